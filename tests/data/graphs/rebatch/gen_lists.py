# Generates tests/data/graphs/rebatch/list_*.json (hand-made WanAnimate2-style graphs with list inputs)
import json, sys
out = sys.argv[1]
def ph(n, shape, dt="float32"):
    return {"name": n, "op": "placeholder", "target": n, "args": [], "kwargs": {},
            "val": {"shape": shape, "dtype": dt}, "module": ""}
def op(n, t, args, val, mod=""):
    return {"name": n, "op": "call_function", "target": t, "args": args, "kwargs": {}, "val": val, "module": mod,
            "module_stack": [mod] if mod else []}
def V(*s): return {"shape": list(s), "dtype": "float32"}
def R(n): return {"node": n}

def doc(comment, scale1=2.0, h1=(2, 3), plant=False, linear=False):
    """WanAnimate2's list forward at a recorded batch of 2: per sample i, e_i = cat([h_i, c_i]) * s (patch
    embedding of the sample joined with its condition along channels), joined into a batch by a cat of
    e_i.unsqueeze(0); z = j + t.view(-1, 1, 1) (the timestep modulation, per row); unbind over the batch
    (the unpatchify loop): o_i = z_i[0:2] * 3; the output is the list [o_0, o_1].
    scale1: sample 1's scale (unlike code when not 2); h1: sample 1's hidden_states shape; plant: a
    cumsum over the batch after the join (an op that mixes the samples); linear: each sample's cat goes
    through a linear (proj) instead of the scale (an autocast op under a bf16 plan: its casts are the copy's)."""
    n = [ph("h0", [2, 3]), ph("c0", [1, 3]), ph("h1", list(h1)), ph("c1", [1, 3]), ph("t", [2])]
    if linear:
        n += [ph("w", [3, 3]), ph("b", [3])]
    for i, s in ((0, 2.0), (1, scale1)):
        rows = 2 if i == 0 else h1[0]
        parts = [R("h%d" % i), R("c%d" % i)]
        if rows < 2:  # padded to 2 rows, as WanAnimate2 pads each text to its length
            n.append(op("p%d" % i, "aten.new_zeros.default", [R("h%d" % i), [2 - rows, 3]], V(2 - rows, 3), "patch_embedding"))
            parts.append(R("p%d" % i))
        m = (op("m%d" % i, "aten.linear.default", [R("e%d" % i), R("w"), R("b")], V(3, 3), "patch_embedding") if linear
             else op("m%d" % i, "aten.mul.Tensor", [R("e%d" % i), s], V(3, 3), "patch_embedding"))
        n += [op("e%d" % i, "aten.cat.default", [parts], V(3, 3), "patch_embedding"), m,
              op("u%d" % i, "aten.unsqueeze.default", [R("m%d" % i), 0], V(1, 3, 3), "patch_embedding")]
    n += [op("j", "aten.cat.default", [[R("u0"), R("u1")]], V(2, 3, 3)),
          op("tv", "aten.view.default", [R("t"), [-1, 1, 1]], V(2, 1, 1))]
    z_in = "j"
    if plant:
        n.append(op("mix", "aten.cumsum.default", [R("j"), 0], V(2, 3, 3), "blocks.0"))
        z_in = "mix"
    n += [op("z", "aten.add.Tensor", [R(z_in), R("tv")], V(2, 3, 3), "blocks.0"),
          op("ub", "aten.unbind.int", [R("z")], [V(3, 3), V(3, 3)], "head")]
    for i in range(2):
        n += [op("g%d" % i, "getitem", [R("ub"), i], V(3, 3), "head"),
              op("s%d" % i, "aten.slice.Tensor", [R("g%d" % i), 0, 0, 2], V(2, 3), "head"),
              op("o%d" % i, "aten.mul.Tensor", [R("s%d" % i), 3.0], V(2, 3), "head")]
    n.append({"name": "output", "op": "output", "target": "output", "args": [[R("o0"), R("o1")]], "kwargs": {},
              "val": None, "module": ""})
    ins = [{"node": "h0", "kind": "user_input", "target": "hidden_states.0", "role": "other"},
           {"node": "c0", "kind": "user_input", "target": "condition_latents.0", "role": "other"},
           {"node": "h1", "kind": "user_input", "target": "hidden_states.1", "role": "other"},
           {"node": "c1", "kind": "user_input", "target": "condition_latents.1", "role": "other"},
           {"node": "t", "kind": "user_input", "target": "timestep", "role": "timestep"}]
    if linear:
        ins += [{"node": "w", "kind": "parameter", "target": "patch_embedding.weight"},
                {"node": "b", "kind": "parameter", "target": "patch_embedding.bias"}]
    return {"format": "drift-aten-graph", "version": 1,
            "producer": {"torch": "hand-made", "comment": comment},
            "model_class": "ListSamplesIO", "nodes": n, "inputs": ins,
            "outputs": [{"node": "o0", "name": "output:noise_pred"}], "constants": {}, "non_tensor_inputs": {}}

def dump(name, d):
    with open("%s/%s" % (out, name), "w") as f:
        json.dump(d, f, indent=1)
        f.write("\n")

dump("list_io.json", doc("WanAnimate2's lists at a recorded batch of 2: hidden_states and condition_latents one tensor "
                         "per sample, each sample's cat * 2, joined by a cat; + t per row; unbind; each sample's "
                         "rows 0..1 * 3, the output a list of per-sample tensors"))
dump("list_io_mix.json", doc("list_io.json with a cumsum over the batch after the join: the samples mixed", plant=True))
dump("list_linear.json", doc("list_io.json with each sample's cat through a linear (patch_embedding): under a bf16 "
                             "plan its autocast casts belong to the sample's copy", linear=True))
dump("list_unlike_ops.json", doc("list_io.json with sample 1 scaled by 5 where sample 0 is scaled by 2: the per-sample "
                                 "code differs, refused", scale1=5.0))
dump("list_unlike_shapes.json", doc("list_io.json with hidden_states.1 of 1 row where hidden_states.0 has 2: refused",
                                    h1=(1, 3)))
