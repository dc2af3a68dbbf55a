"""Teacher-forced attention: the module's to_q/to_k/to_v/norm_q/norm_k outputs are replaced by the recorded
sites, its SDPA by each FlashAttention-2 variant of fa2.py (auto: torch 2.11's split-KV heuristic on 132
SMs), and the recorded MODULE.to_out.0:out is compared. Usage: attn_teacher.py TRACE MODULE (a rec5 trace,
every module a site), e.g. LTX-2 transformer_blocks.0.video_to_audio_attn: auto 0 of 144 differ, the
unsplit form 9 and 17."""
import os, sys, numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_emulate import *
from fa2 import fa2, fa2_split, fa2_auto, num_splits, bf16 as b16
tr, mod = sys.argv[1], sys.argv[2]
variants = [('auto', 'auto'), ('onesoftmax', {'BN': 100000, 'reverse': False}), ('fa2', {}), ('forward tiles', {'reverse': False}), ('exp no fold', {'fold': False}), ('sequential row sum', {'quad': False}), ('div', {'inv_mul': False}), ('mma128', {'mma_chunk': 128})]
for step in (0, 1):
    e = Emu(tr, step, {}); e.run()
    ov = {}
    for sub in ('to_q', 'to_k', 'to_v', 'norm_q', 'norm_k'):
        s = mod + '.' + sub + ':out'
        if s in e.f['sites']:
            nn = site_node(e, mod + '.' + sub)
            ov[nn] = e.site(s).reshape(np.asarray(e.env[nn]).shape).astype(np.float32)
    e = Emu(tr, step, {'override': ov}); e.run()
    sds = [n for n in e.doc['nodes'] if n.get('module') == mod and 'scaled_dot' in str(n.get('target'))]
    site = mod + '.to_out.0:out'
    rec = e.site(site); sn = site_node(e, mod + '.to_out.0')
    base = np.asarray(e.env[sn]).reshape(rec.shape)
    print('step', step, [np.asarray(e.env[a['node']]).shape for a in sds[0]['args'][:3]], 'overrides', len(ov), 'baseline emulator differs in', int((base != rec).sum()), 'of', rec.size, flush=True)
    for name, kw in variants:
        o2 = dict(ov)
        for sd in sds:
            q, k, v = [np.asarray(e.env[a['node']], np.float32) for a in sd['args'][:3]]
            if kw == 'auto': y = fa2_auto(q, k, v)
            elif isinstance(kw, tuple): y = fa2_split(q, k, v, kw[1])
            else: y = fa2(q, k, v, **kw)
            o2[sd['name']] = b16(y)
        e2 = Emu(tr, step, {'override': o2}); e2.run()
        out = np.asarray(e2.env[sn]).reshape(rec.shape)
        print('  ', name, 'differs in', int((out != rec).sum()), flush=True)
