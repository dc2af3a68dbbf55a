#!/usr/bin/env python3
"""One PyTorch forward of a zoo model at one batch size, for tests/gpu/gemm_log_probe.sh (which
runs it under cuBLAS's and cuBLASLt's API logs, one process per batch so that each log holds
one forward):

    python3 tests/gpu/gemm_log_probe.py --model TAG --batch B [--island PATTERN]

The model, its parameters (bf16, the fp32 island kept), its inputs and the batch (sample 0 at
position 0, the other rows as drift builds them) are zoo_invariance.py's, so the GEMMs logged
here are the ones behind its torch verdict. Prints one line: the output row 0's checksum.
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import zoo_invariance as zi  # noqa: E402
import zoo_models  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--island", default=None)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    entries = {e["tag"].replace(":", "_"): e for e in zoo_models.zoo()}
    m, kw, main_in, b0, names, _, lay = zi.prepared(entries[a.model], a.island)
    k = (zi.alone(kw, names, b0, lay=lay) if a.batch == 1
         else zi.rows_for(kw, names, b0, a.batch, 0, main_in, 1234 + a.batch, lay))
    torch.cuda.synchronize()
    print("GEMM_PROBE_FORWARD_BEGIN", file=sys.stderr, flush=True)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        o = zi.sample_rows(m(**k), lay)[0]
    torch.cuda.synchronize()
    print("%s batch %d: row 0 sum %.9g, abs sum %.9g" % (a.model, a.batch, float(o.double().sum()),
                                                         float(o.double().abs().sum())))


if __name__ == "__main__":
    main()
