# Crafts a trace pair whose strings carry terminal escapes (issue 34 item 12):
# the family and a site's name with ESC/BEL and UTF-8 C1 controls (U+009B CSI,
# U+009D OSC), and a plan name with them; python3 integrity_term.py A B [B_FAMILY_SUFFIX]
import json, sys
import h5py, numpy as np
EVIL = "\x1b]0;owned\x07\x1b[2J\u009b31m\u009d52;c;ZXZpbA==\x07"
for k, path in enumerate(sys.argv[1:3]):
    with h5py.File(path, "r+") as f:
        fam = f.attrs["family"].decode() + EVIL + ("x" if k == 1 and len(sys.argv) > 3 else "")
        f.attrs["family"] = np.bytes_(fam.encode())
        plan = json.loads(f.attrs["plan"].decode())
        plan["name"] = "p" + EVIL
        f.attrs["plan"] = np.bytes_(json.dumps(plan).encode())
        g = f["sites/blocks.0:out"]
        g.attrs["name"] = np.bytes_(("blocks.0" + EVIL + ":out").encode())
