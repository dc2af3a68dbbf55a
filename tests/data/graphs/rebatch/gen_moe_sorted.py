# Generates tests/data/graphs/rebatch/moe_sorted.json: HiDream's moe_infer (DeepSeek-style dispatch)
# as a dispatch capture records it at a batch of 2, the token counts per expert burnt into the
# slices of the sorted expert ids (bincount().cpu() is host code: no node computes them).
#   flat = x.view(-1, 2); top-2 of softmax(flat W_g^T) over 3 experts; idxs = argsort(ids);
#   per expert e: rows = (idxs // 2)[lo_e:hi_e], out += scatter(rows, (e + 1) (flat[rows] W_e^T) * w[idxs[lo_e:hi_e]])
# The counts are those of the tests' data (tests/replay/rebatch_util.h rb_xval / rb_pval: a token
# goes to experts {0, 1} when its features sum below 0, else {1, 2}): 4, 6 and 2 at batch 2.
import json, sys

def ph(n, shape, dt="float32"):
    return {"name": n, "op": "placeholder", "target": n, "args": [], "kwargs": {},
            "val": {"shape": shape, "dtype": dt}, "module": ""}
def op(n, t, args, val, mod="moe"):
    return {"name": n, "op": "call_function", "target": t, "args": args, "kwargs": {}, "val": val, "module": mod,
            "module_stack": [mod] if mod else []}
def V(*s, dt="float32"): return {"shape": list(s), "dtype": dt}
def R(n): return {"node": n}

B, L, D, E, K = 2, 3, 2, 3, 2
T = B * L
counts = (4, 6, 2)
n = [ph("x", [B, L, D]), ph("wg", [E, D])] + [ph("w%d" % e, [D, D]) for e in range(E)] + \
    [ph("t", [B]), ph("c", [B, 3, 2])]
n += [op("flat", "aten.view.default", [R("x"), [-1, D]], V(T, D)),
      op("logits", "aten.linear.default", [R("flat"), R("wg")], V(T, E), "moe.gate"),
      op("scores", "aten.softmax.int", [R("logits"), -1], V(T, E), "moe.gate"),
      op("tk", "aten.topk.default", [R("scores"), K, -1, True, False], [V(T, K), V(T, K, dt="int64")], "moe.gate"),
      op("tw", "getitem", [R("tk"), 0], V(T, K), "moe.gate"),
      op("ti", "getitem", [R("tk"), 1], V(T, K, dt="int64"), "moe.gate"),
      op("ids", "aten.view.default", [R("ti"), [-1]], V(T * K, dt="int64")),
      op("fw", "aten.view.default", [R("tw"), [-1, 1]], V(T * K, 1)),
      op("cache", "aten.zeros_like.default", [R("flat")], V(T, D)),
      op("idxs", "aten.argsort.default", [R("ids")], V(T * K, dt="int64")),
      op("tok", "aten.floor_divide.default", [R("idxs"), K], V(T * K, dt="int64"))]
lo, prev = 0, "cache"
for e, cnt in enumerate(counts):
    hi = lo + cnt
    m = "moe.experts.%d" % e
    n += [op("rows%d" % e, "aten.slice.Tensor", [R("tok"), 0, lo, hi], V(cnt, dt="int64")),
          op("g%d" % e, "aten.index.Tensor", [R("flat"), [R("rows%d" % e)]], V(cnt, D)),
          op("h%d" % e, "aten.linear.default", [R("g%d" % e), R("w%d" % e)], V(cnt, D), m),
          op("sel%d" % e, "aten.slice.Tensor", [R("idxs"), 0, lo, hi], V(cnt, dt="int64")),
          op("wi%d" % e, "aten.index.Tensor", [R("fw"), [R("sel%d" % e)]], V(cnt, 1)),
          op("hx%d" % e, "aten.mul.Tensor", [R("h%d" % e), e + 1], V(cnt, D), m),
          op("hm%d" % e, "aten.mul.Tensor", [R("hx%d" % e), R("wi%d" % e)], V(cnt, D)),
          op("rv%d" % e, "aten.view.default", [R("rows%d" % e), [-1, 1]], V(cnt, 1, dt="int64")),
          op("rr%d" % e, "aten.repeat.default", [R("rv%d" % e), [1, D]], V(cnt, D, dt="int64")),
          op("acc%d" % e, "aten.scatter_reduce_.two", [R(prev), 0, R("rr%d" % e), R("hm%d" % e), "sum"], V(T, D))]
    lo, prev = hi, "acc%d" % e
n += [op("yo", "aten.view.default", [R(prev), [B, L, D]], V(B, L, D)),
      op("tv", "aten.view.default", [R("t"), [B, 1, 1]], V(B, 1, 1), ""),
      op("y", "aten.add.Tensor", [R("yo"), R("tv")], V(B, L, D), ""),
      {"name": "output", "op": "output", "target": "output", "args": [[R("y")]], "kwargs": {}, "module": ""}]
doc = {"format": "drift-aten-graph", "version": 1,
       "producer": {"torch": "hand-made", "comment": "HiDream's moe_infer as a dispatch capture records it "
                    "(gen_moe_sorted.py): the slices of the sorted expert ids hold the recorded batch's counts "
                    "per expert (4, 6, 2); y = sum over the token's top-2 experts e of w_e (e + 1) (x W_e^T) + t"},
       "model_class": "MoeSorted", "nodes": n,
       "inputs": [{"node": "x", "kind": "user_input", "target": "hidden_states", "role": "latents"},
                  {"node": "wg", "kind": "parameter", "target": "moe.gate.weight"}] +
                 [{"node": "w%d" % e, "kind": "parameter", "target": "moe.experts.%d.weight" % e} for e in range(E)] +
                 [{"node": "t", "kind": "user_input", "target": "timestep", "role": "timestep"},
                  {"node": "c", "kind": "user_input", "target": "encoder_hidden_states", "role": "cond"}],
       "outputs": [{"node": "y", "name": "output:noise_pred"}], "constants": {}, "non_tensor_inputs": {}}
json.dump(doc, open(sys.argv[1], "w"), indent=1)
