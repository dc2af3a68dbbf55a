"""Captures diffusers DiTs with drift_recorder.capture and dumps what the
importer needs: the drift-aten-graph JSON, and (for the small configs) a
safetensors file with the fp32 parameters, buffers, inputs and torch's fp32
output. GPU machine (torch 2.11); diffusers source on PYTHONPATH.

    python3 tests/gpu/capture_models.py OUTDIR [--models wan,qwen,...] [--big]

Small configs are diffusers' own test configurations (seeded weights);
--big adds WanTransformer3DModel at Wan2.1-1.3B widths (dim 1536, 12 heads,
ffn 8960, 4 blocks, a 5x32x32 latent: graph only, no tensors).
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "recorder", "python"))
from drift_recorder.capture import export_graph  # noqa: E402


def g(seed):
    return torch.Generator("cpu").manual_seed(seed)


def rn(*shape, seed=0):
    return torch.randn(*shape, generator=g(seed))


def seed_params(model, seed):
    """Seeded, non-trivial weights (norm weights away from 1, biases non-zero)."""
    gen = g(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim <= 1 or name.endswith("scale_shift_table"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen) if "norm" in name and name.endswith("weight")
                        else 0.05 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=gen) / fan_in ** 0.5)


def build(name, big=False):
    from diffusers import (FluxTransformer2DModel, LTX2VideoTransformer3DModel, QwenImageTransformer2DModel,
                           SD3Transformer2DModel, WanTransformer3DModel)
    if name == "wan":
        if big:
            m = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128,
                                      in_channels=16, out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=8960,
                                      num_layers=4, cross_attn_norm=True, qk_norm="rms_norm_across_heads")
            kw = {"hidden_states": rn(1, 16, 5, 32, 32, seed=1), "timestep": torch.tensor([500]),
                  "encoder_hidden_states": rn(1, 512, 4096, seed=2), "return_dict": False}
        else:
            m = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12,
                                      in_channels=4, out_channels=4, text_dim=16, freq_dim=256, ffn_dim=32,
                                      num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                      rope_max_seq_len=32)
            kw = {"hidden_states": rn(1, 4, 2, 16, 16, seed=1), "timestep": torch.tensor([500]),
                  "encoder_hidden_states": rn(1, 12, 16, seed=2), "return_dict": False}
    elif name == "qwen":
        m = QwenImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4, num_layers=2,
                                        attention_head_dim=16, num_attention_heads=4, joint_attention_dim=16,
                                        guidance_embeds=False, axes_dims_rope=(8, 4, 4))
        kw = {"hidden_states": rn(1, 16, 16, seed=1), "encoder_hidden_states": rn(1, 8, 16, seed=2),
              "encoder_hidden_states_mask": torch.ones(1, 8, dtype=torch.long), "timestep": torch.tensor([1.0]),
              "img_shapes": [(1, 4, 4)], "return_dict": False}
    elif name == "ltx2":
        m = LTX2VideoTransformer3DModel(in_channels=4, out_channels=4, patch_size=1, patch_size_t=1,
                                        num_attention_heads=2, attention_head_dim=8, cross_attention_dim=16,
                                        audio_in_channels=4, audio_out_channels=4, audio_num_attention_heads=2,
                                        audio_attention_head_dim=4, audio_cross_attention_dim=8, num_layers=2,
                                        qk_norm="rms_norm_across_heads", caption_channels=16,
                                        rope_double_precision=False)
        kw = {"hidden_states": rn(1, 2 * 16 * 16, 4, seed=1), "audio_hidden_states": rn(1, 9, 4, seed=2),
              "encoder_hidden_states": rn(1, 16, 16, seed=3), "audio_encoder_hidden_states": rn(1, 16, 16, seed=4),
              "timestep": torch.tensor([500.0]), "encoder_attention_mask": torch.ones(1, 16, dtype=torch.bool),
              "num_frames": 2, "height": 16, "width": 16, "audio_num_frames": 9, "fps": 25.0, "return_dict": False}
    elif name == "flux":
        m = FluxTransformer2DModel(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1,
                                   attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                   pooled_projection_dim=32, axes_dims_rope=[4, 4, 8])
        kw = {"hidden_states": rn(1, 16, 4, seed=1), "encoder_hidden_states": rn(1, 48, 32, seed=2),
              "pooled_projections": rn(1, 32, seed=3), "img_ids": rn(16, 3, seed=4), "txt_ids": rn(48, 3, seed=5),
              "timestep": torch.tensor([1.0]), "return_dict": False}
    elif name == "sd3":
        m = SD3Transformer2DModel(sample_size=32, patch_size=1, in_channels=4, num_layers=4, attention_head_dim=8,
                                  num_attention_heads=4, caption_projection_dim=32, joint_attention_dim=32,
                                  pooled_projection_dim=64, out_channels=4, pos_embed_max_size=96,
                                  dual_attention_layers=(), qk_norm=None)
        kw = {"hidden_states": rn(1, 4, 32, 32, seed=1), "encoder_hidden_states": rn(1, 154, 32, seed=2),
              "pooled_projections": rn(1, 64, seed=3), "timestep": torch.tensor([500]), "return_dict": False}
    else:
        raise SystemExit("unknown model " + name)
    return m, kw


def to_dev(kw, dev):
    return {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--models", default="wan,qwen,ltx2,flux,sd3")
    ap.add_argument("--big", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    from safetensors.torch import save_file
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    summary = {}
    jobs = [(n, False) for n in a.models.split(",") if n] + ([("wan", True)] if a.big else [])
    for name, big in jobs:
        tag = name + ("_1p3b" if big else "")
        torch.manual_seed(0)
        t0 = time.perf_counter()
        try:
            m, kw = build(name, big)
            seed_params(m, 7)
            m = m.to(dev).float().eval()
            kwd = to_dev(kw, dev)
            doc, ep = export_graph(m, kwd)
        except Exception as e:
            print("CAPTURE FAIL %s: %s: %s" % (tag, type(e).__name__, str(e)[:2000]), flush=True)
            summary[tag] = {"error": str(e)[:500]}
            continue
        ops = {}
        for n in doc["nodes"]:
            if n["op"] == "call_function":
                ops[n["target"]] = ops.get(n["target"], 0) + 1
        with open(os.path.join(a.out, tag + ".json"), "w") as f:
            json.dump(doc, f)
        info = {"nodes": len(doc["nodes"]), "ops": ops, "export_s": doc.get("export_seconds"),
                "params": sum(p.numel() for p in m.parameters()), "build_s": round(time.perf_counter() - t0, 2)}
        if not big:
            with torch.no_grad():
                out = m(**kwd)
                out = out[0] if isinstance(out, (tuple, list)) else out
                # the exported program must compute the same thing
                out2 = ep.module()(**kwd)
                out2 = out2[0] if isinstance(out2, (tuple, list)) else out2
            info["export_vs_eager_max_abs"] = float((out - out2).abs().max())
            t = {}
            for k, p in m.named_parameters():
                t[k] = p.detach().float().cpu().contiguous()
            for k, b in m.named_buffers():
                b = b.detach().cpu()
                if b.is_complex():
                    b = torch.view_as_real(b.resolve_conj())
                t["buffer:" + k] = b.contiguous()
            for k, c in ep.constants.items():
                if isinstance(c, torch.Tensor):
                    c = c.detach().cpu()
                    if c.is_complex():  # safetensors readers need not know complex: (real, imag) pairs
                        c = torch.view_as_real(c.resolve_conj())
                    t["constant:" + k] = c.contiguous()
            for k, v in kw.items():
                if isinstance(v, torch.Tensor):
                    t["input:" + k] = v.detach().cpu().contiguous()
            t["output:noise_pred"] = out.detach().float().cpu().contiguous()
            save_file(t, os.path.join(a.out, tag + ".safetensors"),
                      metadata={"model_class": type(m).__name__, "torch": torch.__version__, "device": dev,
                                "non_tensor_inputs": json.dumps({k: v for k, v in kw.items()
                                                                 if not isinstance(v, torch.Tensor)})})
        summary[tag] = info
        print("CAPTURE OK %s: %d nodes, %d distinct ops, export %.2f s" % (tag, info["nodes"], len(ops),
              info["export_s"] or -1), flush=True)
    allops = {}
    for v in summary.values():
        for k, c in v.get("ops", {}).items():
            allops[k] = allops.get(k, 0) + c
    summary["_all_ops"] = dict(sorted(allops.items()))
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("distinct ops over all models: %d" % len(allops))
    print(json.dumps(summary["_all_ops"]))


if __name__ == "__main__":
    main()
