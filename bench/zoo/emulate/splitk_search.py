"""Which GEMM of a captured graph did cuBLASLt run as split-K on the recording GPU?
For each bf16 linear/matmul with K >= 32 (in graph order, greedily), tries split-K 2, 3, 4
accumulating in bf16 in place (chunks of roundup(K/S, 16), the bias in the first) and keeps
the form that lowers the number of elements differing from the recording (every recorded
site and the output, both steps). Usage: splitk_search.py TRACE [EMULATOR_OPTIONS_DICT]
(e.g. "{'sdpa_math_masked8': True}"). HunyuanDiT: linear_6 (2x1556 @ 1556x64) -> 0 differences."""
import os, sys, math; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_emulate import *
tr=sys.argv[1]
BASE=eval(sys.argv[2]) if len(sys.argv)>2 else {}
def score(cfg):
    t=0; per={}
    for st in (0,1):
        o=dict(BASE); o['lin_split']=cfg; e=Emu(tr,st,o); e.run()
        r=e.site('output:noise_pred'); c=int((np.asarray(e.out[0]).reshape(r.shape)!=r).sum()); t+=c; per['out']=per.get('out',0)+c
        for s in e.f['sites']:
            if s.endswith(':out'):
                nn=site_node(e,s[:-4]); c=int((np.asarray(e.env[nn]).reshape(e.site(s).shape)!=e.site(s)).sum()); t+=c; per[s]=per.get(s,0)+c
    return t, per
e=Emu(tr,0,BASE); e.run()
gem=[n for n in e.doc['nodes'] if n['op']=='call_function' and n['target'] in ('aten.linear.default','aten.matmul.default') and isinstance(n.get('val'),dict) and n['val']['dtype'] in ('bfloat16','float16')]
cfg={}; cur,per=score(cfg); print('base',cur,per,flush=True)
for n in gem:
    K=np.asarray(e.env[n['args'][0]['node']]).shape[-1]
    if K<32: continue
    res=[]
    for s_ in (2,3,4):
        c=int(math.ceil(K/s_/16)*16)
        if c>=K: continue
        c2=dict(cfg); c2[n['name']]=('c',c,'B',True); res.append((score(c2)[0],c))
    if not res: continue
    b=min(res)
    M=int(np.prod(n['val']['shape'][:-1]))
    print(n['name'],n.get('module'),'M',M,'N',n['val']['shape'][-1],'K',K,'best',b,'cur',cur,flush=True)
    if b[0]<cur: cur=b[0]; cfg[n['name']]=('c',b[1],'B',True)
print('final',cur,score(cfg)[1],cfg)
