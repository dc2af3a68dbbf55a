# Generates tests/data/graphs/rebatch/list_{type_as,split_sizes,pad_const,pad_sequence,packed}.json: hand-made
# graphs of a model that takes its samples as lists and packs them (diffusers' ZImageTransformer2DModel: each
# sample's tokens concatenated, split back by per-sample lengths, padded with pad_sequence).
# Usage: python3 gen_list_packed.py DIR
import json, sys
out = sys.argv[1]
def ph(n, shape, dt="float32"):
    return {"name": n, "op": "placeholder", "target": n, "args": [], "kwargs": {},
            "val": {"shape": shape, "dtype": dt}, "module": ""}
def op(n, t, args, val, mod="", kwargs=None):
    return {"name": n, "op": "call_function", "target": t, "args": args, "kwargs": kwargs or {}, "val": val,
            "module": mod, "module_stack": [mod] if mod else []}
def V(*s, dt="float32"): return {"shape": list(s), "dtype": dt}
def R(n): return {"node": n}
def output(items, first):
    return {"name": "output", "op": "output", "target": "output", "args": [[R(i) for i in items]], "kwargs": {},
            "val": None, "module": ""}
def doc(cls, comment, nodes, ins, out_node):
    return {"format": "drift-aten-graph", "version": 1, "producer": {"torch": "hand-made", "comment": comment},
            "model_class": cls, "nodes": nodes, "inputs": ins,
            "outputs": [{"node": out_node, "name": "output:noise_pred"}], "constants": {}, "non_tensor_inputs": {}}
def lin(name, node):
    return {"node": node, "kind": "user_input", "target": name, "role": "other"}

def type_as():
    """ZImage's `adaln_input = t_embedder(t).type_as(x[0])`, recorded at batch 1: the timestep's embedding takes the
    first list element's dtype only. y = cat([(x_i * 2).unsqueeze(0)]) + ta.view(-1, 1, 1), ta = (t * 3).type_as(x[0])."""
    n = [ph("x0", [2, 3]), ph("t", [1]),
         op("ts", "aten.mul.Tensor", [R("t"), 3.0], V(1), "t_embedder"),
         op("ta", "aten.type_as.default", [R("ts"), R("x0")], V(1)),
         op("e0", "aten.mul.Tensor", [R("x0"), 2.0], V(2, 3), "embed"),
         op("u0", "aten.unsqueeze.default", [R("e0"), 0], V(1, 2, 3), "embed"),
         op("j", "aten.cat.default", [[R("u0")]], V(1, 2, 3)),
         op("tv", "aten.view.default", [R("ta"), [-1, 1, 1]], V(1, 1, 1)),
         op("y", "aten.add.Tensor", [R("j"), R("tv")], V(1, 2, 3), "blocks.0"),
         output(["y"], "y")]
    return doc("ListTypeAs", type_as.__doc__, n, [lin("x.0", "x0"), {"node": "t", "kind": "user_input", "target": "t",
                                                                    "role": "timestep"}], "y")

def split_sizes():
    """ZImage's `x = embedder(torch.cat(x)); list(x.split(x_seqlens))`, recorded at batch 2: each sample's tokens
    (x_i * 2) joined along dim 0 into [4, 3], one op over all of them (+ 1), split back by the samples' lengths
    ([2, 2]), each piece * 3, the output the list of pieces: y[b] = (2 x_b + 1) * 3."""
    n = [ph("x0", [2, 3]), ph("x1", [2, 3])]
    for i in range(2):
        n.append(op("e%d" % i, "aten.mul.Tensor", [R("x%d" % i), 2.0], V(2, 3), "patchify"))
    n += [op("j", "aten.cat.default", [[R("e0"), R("e1")]], V(4, 3)),
          op("z", "aten.add.Tensor", [R("j"), 1.0], V(4, 3), "embedder"),
          op("sp", "aten.split_with_sizes.default", [R("z"), [2, 2]], [V(2, 3), V(2, 3)])]
    for i in range(2):
        n += [op("g%d" % i, "getitem", [R("sp"), i], V(2, 3)),
              op("o%d" % i, "aten.mul.Tensor", [R("g%d" % i), 3.0], V(2, 3), "unpatchify")]
    n.append(output(["o0", "o1"], "o0"))
    return doc("ListSplitSizes", split_sizes.__doc__, n, [lin("x.0", "x0"), lin("x.1", "x1")], "o0")

def pad_const(rb=1, start1=0):
    """ZImage's pad mask: `torch.cat(inner_pad_mask)` over a list of one constant per sample (built from the sample's
    length alone), met row for row by the samples' joined tokens: y = cat([x_i * 2 ...]) + cat([arange(4) ...])
    .unsqueeze(-1), viewed [N, 4, 3]: y[b, r, c] = 2 x[b, r, c] + r. rb: the recorded batch; start1: where sample 1's
    arange starts (not 0: the samples' constants differ)."""
    n = [ph("x%d" % i, [4, 3]) for i in range(rb)]
    n += [op("e%d" % i, "aten.mul.Tensor", [R("x%d" % i), 2.0], V(4, 3), "patchify") for i in range(rb)]
    n += [op("j", "aten.cat.default", [[R("e%d" % i) for i in range(rb)]], V(4 * rb, 3))]
    n += [op("ar%d" % i, "aten.arange.start", [start1 if i else 0, (start1 if i else 0) + 4], V(4),
             kwargs={"dtype": {"dtype": "float32"}}) for i in range(rb)]
    n += [op("m", "aten.cat.default", [[R("ar%d" % i) for i in range(rb)]], V(4 * rb)),
          op("mu", "aten.unsqueeze.default", [R("m"), -1], V(4 * rb, 1)),
          op("z", "aten.add.Tensor", [R("j"), R("mu")], V(4 * rb, 3), "embedder"),
          op("y", "aten.view.default", [R("z"), [rb, 4, 3]], V(rb, 4, 3)),
          output(["y"], "y")]
    return doc("ListPadConst", pad_const.__doc__, n, [lin("x.%d" % i, "x%d" % i) for i in range(rb)], "y")

def pad_sequence():
    """torch.nn.utils.rnn.pad_sequence(feats, batch_first=True) at a recorded batch of 1 as torch.export decomposes
    it: a full([N, Lmax, D], 0) buffer, each sample's rows written by copy_ into select(buf, 0, i)[0:L_i]: the sample's
    tokens (x_0 * 2, 3 rows, joined and split back by length, + 1 over the joined rows) padded to 4 rows, + 1:
    y[b, r, c] = r < 3 ? 2 x[b, r, c] + 2 : 1."""
    n = [ph("x0", [3, 3]),
         op("p0", "aten.mul.Tensor", [R("x0"), 2.0], V(3, 3), "patchify"),
         op("j", "aten.cat.default", [[R("p0")]], V(3, 3)),
         op("z", "aten.add.Tensor", [R("j"), 1.0], V(3, 3), "embedder"),
         op("sp", "aten.split_with_sizes.default", [R("z"), [3]], [V(3, 3)]),
         op("e0", "getitem", [R("sp"), 0], V(3, 3)),
         op("buf", "aten.full.default", [[1, 4, 3], 0.0], V(1, 4, 3), "",
            {"dtype": {"dtype": "float32"}}),
         op("s0", "aten.select.int", [R("buf"), 0, 0], V(4, 3)),
         op("sl0", "aten.slice.Tensor", [R("s0"), 0, 0, 3], V(3, 3)),
         op("copy_", "aten.copy_.default", [R("sl0"), R("e0")], V(3, 3)),
         op("pad", "aten.alias.default", [R("buf")], V(1, 4, 3)),
         op("y", "aten.add.Tensor", [R("pad"), 1.0], V(1, 4, 3), "blocks.0"),
         output(["y"], "y")]
    return doc("ListPadSequence", pad_sequence.__doc__, n, [lin("x.0", "x0")], "y")

def packed(rb=1):
    """ZImage's whole packing (its diffusers test configuration records 1 sample; rb: the recorded batch): the
    timestep's embedding typed as x[0]; each sample's tokens (x_i * 2, 3 rows) joined, one op over all (+ 1), split
    back by length; the pad mask cat([zeros(3) ...]) picks the pad token where set (none here: where(mask, pad,
    feats)); split again; padded to 4 rows by pad_sequence; + the timestep; unbind over the batch, each sample's first
    3 rows * 3, the output a list: y[b, r, c] = ((2 x[b, r, c] + 1) + 5 t[b]) * 3."""
    S = range(rb)
    n = [ph("pad_token", [1, 3])] + [ph("x%d" % i, [3, 3]) for i in S] + [ph("t", [rb]),
         op("ts", "aten.mul.Tensor", [R("t"), 5.0], V(rb), "t_embedder"),
         op("ta", "aten.type_as.default", [R("ts"), R("x0")], V(rb))]
    n += [op("e%d" % i, "aten.mul.Tensor", [R("x%d" % i), 2.0], V(3, 3), "patchify") for i in S]
    n += [op("j", "aten.cat.default", [[R("e%d" % i) for i in S]], V(3 * rb, 3)),
          op("z", "aten.add.Tensor", [R("j"), 1.0], V(3 * rb, 3), "embedder"),
          op("sp", "aten.split_with_sizes.default", [R("z"), [3] * rb], [V(3, 3) for i in S])]
    n += [op("g%d" % i, "getitem", [R("sp"), i], V(3, 3)) for i in S]
    n += [op("fc", "aten.cat.default", [[R("g%d" % i) for i in S]], V(3 * rb, 3))]
    n += [op("mz%d" % i, "aten.zeros.default", [[3]], V(3, dt="bool"), "", {"dtype": {"dtype": "bool"}}) for i in S]
    n += [op("mc", "aten.cat.default", [[R("mz%d" % i) for i in S]], V(3 * rb, dt="bool")),
          op("mu", "aten.unsqueeze.default", [R("mc"), -1], V(3 * rb, 1, dt="bool")),
          op("w", "aten.where.self", [R("mu"), R("pad_token"), R("fc")], V(3 * rb, 3)),
          op("sp2", "aten.split_with_sizes.default", [R("w"), [3] * rb], [V(3, 3) for i in S])]
    n += [op("h%d" % i, "getitem", [R("sp2"), i], V(3, 3)) for i in S]
    n += [op("buf", "aten.full.default", [[rb, 4, 3], 0.0], V(rb, 4, 3), "", {"dtype": {"dtype": "float32"}})]
    for i in S:
        n += [op("s%d" % i, "aten.select.int", [R("buf"), 0, i], V(4, 3)),
              op("sl%d" % i, "aten.slice.Tensor", [R("s%d" % i), 0, 0, 3], V(3, 3)),
              op("copy_%d" % i if i else "copy_", "aten.copy_.default", [R("sl%d" % i), R("h%d" % i)], V(3, 3))]
    n += [op("pad", "aten.alias.default", [R("buf")], V(rb, 4, 3)),
          op("tv", "aten.view.default", [R("ta"), [-1, 1, 1]], V(rb, 1, 1)),
          op("a", "aten.add.Tensor", [R("pad"), R("tv")], V(rb, 4, 3), "layers.0"),
          op("ub", "aten.unbind.int", [R("a")], [V(4, 3) for i in S])]
    for i in S:
        n += [op("u%d" % i, "getitem", [R("ub"), i], V(4, 3)),
              op("us%d" % i if i else "us", "aten.slice.Tensor", [R("u%d" % i), 0, 0, 3], V(3, 3)),
              op("o%d" % i, "aten.mul.Tensor", [R("us%d" % i if i else "us"), 3.0], V(3, 3), "unpatchify")]
    n.append(output(["o%d" % i for i in S], "o0"))
    ins = [{"node": "pad_token", "kind": "parameter", "target": "x_pad_token"}] + [lin("x.%d" % i, "x%d" % i) for i in S]
    ins.append({"node": "t", "kind": "user_input", "target": "t", "role": "timestep"})
    return doc("ListPacked", packed.__doc__, n, ins, "o0")

def dump(name, d):
    with open("%s/%s" % (out, name), "w") as f:
        json.dump(d, f, indent=1)
        f.write("\n")

dump("list_type_as.json", type_as())
dump("list_split_sizes.json", split_sizes())
dump("list_pad_const.json", pad_const())
dump("list_pad_const2.json", pad_const(2))
dump("list_pad_const2_unlike.json", pad_const(2, 1))
dump("list_pad_sequence.json", pad_sequence())
dump("list_packed.json", packed())
dump("list_packed2.json", packed(2))
