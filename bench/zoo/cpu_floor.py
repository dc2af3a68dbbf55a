#!/usr/bin/python3
"""cpu replay of local zoo traces against their H200 recording, in torch's noise-floor units
(issue 31's criterion: tests/gpu/zoo_replay.py's "cpu in torch's noise-floor units" column).
Usage: DRIFT=path/to/drift ZOO=/work/zoo/comb [DEV=cpu] cpu_floor.py MODEL...
Per model: ZOO/MODEL/trainer.h5 and info.json (its torch_floor per step, from tests/gpu/zoo.py);
prints the output's mean |d| against the recording and mean |d| / mean(torch_floor).
DEV=cpu:gpu_as=none replays without the recording GPU's GEMM forms and attention splits."""
import json, os, subprocess, sys
drift = os.environ.get("DRIFT", "drift")
root = os.environ.get("ZOO", "/work/zoo/comb")
for m in sys.argv[1:]:
    d = os.path.join(root, m)
    if not os.path.exists(os.path.join(d, "trainer.h5")):
        print(m, "no trace"); continue
    try:
        info = json.load(open(os.path.join(d, "info.json")))
    except Exception:
        info = {}
    tf = [x for x in info.get("torch_floor") or [] if isinstance(x, (int, float))]
    tfm = sum(tf) / len(tf) if tf else 0
    p = subprocess.run([drift, "replay", os.path.join(d, "trainer.h5"), "--device", os.environ.get("DEV", "cpu"),
                        "--ref", "trainer", "--output-only", "--json"], capture_output=True, text=True)
    try:
        s = [x for x in json.loads(p.stdout).get("sites", []) if x.get("site", "").startswith("output:")][0]
    except Exception:
        print(m, "no replay:", (p.stderr.strip().splitlines() or ["?"])[-1][:200]); continue
    md = s["mean_abs_diff"]
    u = "%.2f" % (md / tfm) if tfm else ("0 (bitwise)" if md == 0 else "torch's floor is 0")
    print("%-42s mean|d| %-10.4g n_diff %-6d torch floor %-10.3g -> %s" % (m, md, s.get("n_diff", -1), tfm, u))
