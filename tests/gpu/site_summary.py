"""Prints, for each replay_trainer_*.json in a capture_record logs.tgz, its first
divergent sites (n_diff, mean |diff|, max ULP). Usage: site_summary.py logs.tgz"""
import json, sys, tarfile
t = tarfile.open(sys.argv[1])
for m in t.getmembers():
    if m.name.endswith('.json') and 'replay_trainer' in m.name:
        d = json.load(t.extractfile(m))
        print("==", m.name, d.get('first_divergent'))
        k = 0
        for x in d.get('sites', []):
            if x.get('n_diff'):
                print("%-50s %s n_diff %d/%d mean %.3g max_ulp %s" % (x['site'], x['dtype'], x['n_diff'], x['numel'], x['mean_abs_diff'], x['max_ulp']))
                k += 1
                if k > 25: break
