"""Each FlashAttention-2 variant of fa2.py for every SDPA of MODULE, compared at the recorded SITE
(downstream: other ops in between count too). Usage: attn_block.py TRACE MODULE SITE."""
import os, sys, numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_emulate import *
from fa2 import fa2, fa2_split, fa2_auto, bf16 as b16
tr, mod, site = sys.argv[1], sys.argv[2], sys.argv[3]
variants = [('auto', 'auto'), ('onesoftmax', {'BN': 100000, 'reverse': False}), ('fa2', {}), ('forward tiles', {'reverse': False}), ('exp no fold', {'fold': False}), ('sequential row sum', {'quad': False})]
for step in (0, 1):
    e = Emu(tr, step, {}); e.run()
    sds = [n for n in e.doc['nodes'] if n.get('module') == mod and 'scaled_dot' in str(n.get('target'))]
    rec = e.site(site)
    sn = site_node(e, site[:-4])
    base = np.asarray(e.env[sn]).reshape(rec.shape)
    print('step', step, [np.asarray(e.env[a['node']]).shape for a in sds[0]['args'][:3]], 'baseline emulator differs in', int((base != rec).sum()), 'of', rec.size, flush=True)
    for name, kw in variants:
        ov = {}
        for sd in sds:
            q, k, v = [np.asarray(e.env[a['node']], np.float32) for a in sd['args'][:3]]
            ov[sd['name']] = b16(fa2_auto(q, k, v) if kw == 'auto' else fa2(q, k, v, **kw))
        e2 = Emu(tr, step, {'override': ov}); e2.run()
        out = np.asarray(e2.env[sn]).reshape(rec.shape)
        print('  ', name, 'differs in', int((out != rec).sum()), flush=True)
