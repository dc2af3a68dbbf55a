#!/usr/bin/env bash
# fuzz/build.sh names the sources each libFuzzer harness links by hand; the captured-graph
# harness (fuzz_aten_graph) must link every importer file that the lowering calls into, or the
# CI's fuzz stage fails to link (aten_routed_slices.c was missed once). Every
# replay/capture/aten_*.c is listed there except those that read traces or files (the model and
# step-graph loaders, the summary), which the harness does not reach. No compiler needed.
set -u
S=${DRIFT_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
line=$(grep -E '^\s*\[fuzz_aten_graph\]=' "$S/fuzz/build.sh") || { echo "FAIL: no fuzz_aten_graph in fuzz/build.sh"; exit 1; }
missing=0
for f in "$S"/replay/capture/aten_*.c; do
  b="replay/capture/$(basename "$f")"
  case "$b" in replay/capture/aten_model.c|replay/capture/aten_steps.c|replay/capture/aten_summary.c) continue ;; esac
  case "$line" in *" $b "*|*"\"$b "*) ;; *) echo "FAIL: fuzz/build.sh fuzz_aten_graph does not link $b"; missing=1 ;; esac
done
[ $missing = 0 ] && echo "ok   fuzz_aten_graph links every importer source ($(ls "$S"/replay/capture/aten_*.c | wc -l) files, 3 loaders left out)"
exit $missing
