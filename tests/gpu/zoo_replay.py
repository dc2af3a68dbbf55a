#!/usr/bin/env python3
"""The zoo's replay stage (issue 31), on the GPU machine after tests/gpu/zoo.py record:

    python3 tests/gpu/zoo_replay.py --rec /tmp/zoo/rec --drift BUILD/drift --out $OUT \
        [--record-rows $OUT/zoo_record.jsonl] [--budget SECONDS]

For every recorded model (a folder with trainer.h5): `drift check`, a replay on cuda
(torch kernel profile, torch's own cuDNN/cuBLAS first on the library path) against the
recording (every recorded site, so a non-bitwise row names where it starts), and a replay on cpu with --max-floor 2 (exit 0 when the output's
mean |d| is within 2x drift's noise floor). Writes $OUT/zoo_table.md (one row per model,
the record stage's reason for a model it could not record) and prints a summary line.
Every failure row names its reason: the first line drift printed.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time


def torch_lib_path():
    """torch's nvidia-* wheel library folders, for a bitwise replay (the system cuDNN differs)."""
    try:
        import torch  # noqa: F401  (only to find its site-packages)
        base = os.path.dirname(os.path.dirname(torch.__file__))
    except Exception:
        return ""
    dirs = sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib")))
    return ":".join(dirs + [os.path.join(os.path.dirname(torch.__file__), "lib")])


def run(cmd, env, timeout):
    t0 = time.time()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr, time.time() - t0
    except subprocess.TimeoutExpired:
        return 124, "", "timed out after %d s" % timeout, time.time() - t0


def first_error(err):
    for line in err.splitlines():
        if line.startswith("drift") and "no --plan given" not in line and not line.startswith("drift replay: libraries:"):
            return line[:240]
    lines = [x for x in err.splitlines() if x.strip()]
    return (lines[-1] if lines else "")[:240]


def output_site(js):
    for s in js.get("sites", []):
        if s.get("site") == "output:noise_pred":
            return s
    return None


def bisect_island(a, env, tag, device):
    """drift bisect between the recorded plan (the fp32 island) and the same plan without it,
    asking the bitwise question (--threshold 0): does it name the island's pattern?"""
    good = os.path.join(a.rec, tag, "trainer_plan.json")
    p = json.load(open(good))
    pats = [x[0] for x in p.get("param_dtype_patterns", [])]
    if not pats:
        return "no island"
    bad = os.path.join(a.out, "bisect_bad_%s.json" % tag)
    p["name"] = "no_island"
    p["param_dtype_patterns"] = []
    json.dump(p, open(bad, "w"))
    trace = os.path.join(a.rec, tag, "trainer.h5")
    # bisect replays one graph: a trace whose steps have graphs of their own (docs/format.md 9.1) is
    # bisected at its first step
    steps = []
    try:
        ls = json.loads(subprocess.run([a.drift, "ls", trace, "--json"], env=env, capture_output=True, text=True,
                                       timeout=60).stdout)
        if ls.get("step_graphs"):
            steps = ["--steps", "0:0"]
    except Exception:  # noqa: BLE001
        pass
    rc, out, err, dt = run([a.drift, "bisect", trace, "--good", good, "--bad", bad,
                            "--threshold", "0", "--device", device, "--json"] + steps, env, 180)
    os.remove(bad)
    try:
        js = json.loads(out)
    except Exception:  # noqa: BLE001
        return "error: " + first_error(err)[:160]
    named = [c for cs in js.get("culprit_sets", []) for c in cs if c.get("pattern") in pats]
    if named:
        return "names the island %s (first divergent %s, %.1f s)" % (named[0]["pattern"], named[0].get("first_divergent"),
                                                                     dt)
    return "island harmless: the output is bitwise without it (%.1f s)" % dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rec", required=True)
    ap.add_argument("--drift", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--record-rows", default=None)
    ap.add_argument("--budget", type=float, default=300)
    ap.add_argument("--devices", default="cuda,cpu", help="which replays to run (cpu alone: on a machine without a GPU)")
    a = ap.parse_args()
    t_end = time.time() + a.budget
    env = dict(os.environ)
    lp = torch_lib_path()
    if lp:
        env["LD_LIBRARY_PATH"] = lp + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    rows = {}
    rec_rows = a.record_rows or os.path.join(a.out, "zoo_record.jsonl")
    if os.path.exists(rec_rows):
        for line in open(rec_rows):
            try:
                r = json.loads(line)
                rows[r["tag"]] = r
            except Exception:
                pass
    tags = sorted(set(rows) | {d for d in os.listdir(a.rec) if os.path.isdir(os.path.join(a.rec, d))})
    table = []
    n = {"models": 0, "captured": 0, "replays_cuda": 0, "bitwise_cuda": 0, "cpu_floor": 0, "replays_cpu": 0,
         "bisect_names_island": 0, "cpu_torch_floor_2x": 0}
    for tag in tags:
        n["models"] += 1
        r = rows.get(tag, {})
        tr = os.path.join(a.rec, tag, "trainer.h5")
        row = {"model": tag, "captured": r.get("mode") if r.get("captured") else "no",
               "cuda": "", "bitwise": "", "cpu": "", "cpu_torch_floor": "", "bisect": "", "reason": ""}
        if r.get("captured"):
            n["captured"] += 1
        if not os.path.exists(tr):
            row["reason"] = (r.get("reason") or "not recorded")[:240]
            table.append(row)
            continue
        if time.time() > t_end:
            row["reason"] = "not replayed: the stage's time budget ran out"
            table.append(row)
            continue
        rc, out, err, dt = (1, "", "", 0.0)
        if "cuda" in a.devices.split(","):
            rc, out, err, dt = run([a.drift, "replay", tr, "--device", "cuda", "--kernels", "torch", "--ref", "trainer",
                                    "--json"], env, 120)  # every recorded site: where a difference starts
        if out.strip():  # every site's verdict, brought back with the trace (zoo.sh packs rec/)
            with open(os.path.join(a.rec, tag, "replay_cuda.json"), "w") as f:
                f.write(out)
        js = None
        try:
            js = json.loads(out) if out.strip() else None
        except Exception:
            js = None
        site = output_site(js) if js else None
        if "cuda" not in a.devices.split(","):
            row["cuda"] = "not run"
        elif site is None:
            row["cuda"] = "no"
            row["reason"] = first_error(err) or ("exit %d" % rc)
        else:
            n["replays_cuda"] += 1
            row["cuda"] = "yes (%.1f s)" % dt
            if site.get("bitwise_equal"):
                n["bitwise_cuda"] += 1
                row["bitwise"] = "yes"
            else:
                row["bitwise"] = "no: max |d| %.3g" % site.get("max_abs_diff", float("nan"))
                fd = [x.get("site") for x in (js.get("first_divergent") or [])]
                row["bitwise"] += ", first divergent per step %s" % fd
                if js.get("kernel_fallbacks"):  # ops the torch profile left to drift's exact kernels
                    row["bitwise"] += "; %d runs of %s on exact kernels (%s)" % (
                        js["kernel_fallbacks"], js.get("kernel_fallback_ops"), (js.get("kernel_fallback_why") or "")[:60])
        rc2, out2, err2, _ = run([a.drift, "replay", tr, "--device", "cpu", "--ref", "trainer", "--output-only",
                                  "--max-floor", "2", "--json"], env, 180)
        try:
            js2 = json.loads(out2) if out2.strip() else None
        except Exception:
            js2 = None
        s2 = output_site(js2) if js2 else None
        if s2 is None:
            row["cpu"] = "no"
            if not row["reason"]:
                row["reason"] = first_error(err2) or ("exit %d" % rc2)
        else:
            n["replays_cpu"] += 1
            ok = rc2 == 0
            n["cpu_floor"] += ok
            xf = s2.get("x_floor")
            row["cpu"] = ("within 2x floor" if ok else "over 2x floor") + " (%s x floor, mean |d| %.3g)" % (
                "%.2f" % xf if isinstance(xf, (int, float)) else "?", s2.get("mean_abs_diff", 0))
            # the criterion: torch's own noise floor (zoo.py: the middle latent moved by one
            # bf16 ULP, the mean |d| of torch's output over the steps)
            tf = [x for x in (r.get("torch_floor") or []) if isinstance(x, (int, float))]
            tfm = sum(tf) / len(tf) if tf else 0.0
            md = s2.get("mean_abs_diff", 0) or 0.0
            if tfm > 0:
                u = md / tfm
                row["cpu_torch_floor"] = "%.2f" % u
                n["cpu_torch_floor_2x"] += u <= 2
            elif md == 0:
                row["cpu_torch_floor"] = "0 (bitwise)"
                n["cpu_torch_floor_2x"] += 1
            else:
                row["cpu_torch_floor"] = "torch's floor is 0"
        if row["cpu"] != "no" and os.path.exists(os.path.join(a.rec, tag, "trainer_plan.json")):
            row["bisect"] = bisect_island(a, env, tag, "cuda" if "cuda" in a.devices.split(",") else "cpu")
            n["bisect_names_island"] += row["bisect"].startswith("names the island")
        table.append(row)
        print("ZOO_REPLAY " + json.dumps(row), flush=True)
    with open(os.path.join(a.out, "zoo_table.md"), "w") as f:
        f.write("| model | captured | replays on cuda | bitwise on cuda | cpu in drift's noise-floor units | cpu "
                "in torch's noise-floor units | bisect (island fp32 -> bf16) | reason |\n")
        f.write("|---|---|---|---|---|---|---|---|\n")
        for row in table:
            f.write("| %s | %s | %s | %s | %s | %s | %s | %s |\n" % (
                row["model"], row["captured"], row["cuda"], row["bitwise"], row["cpu"], row["cpu_torch_floor"],
                row["bisect"], row["reason"].replace("|", "/")))
    print("zoo: %(models)d models, %(captured)d captured, %(replays_cuda)d replay on cuda, %(bitwise_cuda)d bitwise "
          "on cuda, %(replays_cpu)d replay on cpu, %(cpu_floor)d within 2x drift's floor on cpu, "
          "%(cpu_torch_floor_2x)d within 2x torch's floor on cpu, bisect names the island in %(bisect_names_island)d" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
