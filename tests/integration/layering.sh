#!/usr/bin/env bash
# The layering of DESIGN.md s3, checked over every #include of the library
# code (formats, kernels, replay, recorder, tui, cli; not tests, bench, fuzz):
#
#   cli -> {recorder, replay, tui} -> kernels -> formats
#   replay/ in parts: ir <- models <- exec <- dist <- drive <- search, and
#   analysis (-> ir) below drive; replay/capture (the graph importer) is one
#   library with exec: captured graphs are models of the prepared forward
#   kernels' private headers (backend_impl.h, cpu/, ref/, cuda/ but
#   cuda/cuda_backend.h) only from kernels/
#   curses headers only in tui/view.c; CUDA/NCCL/CUPTI/NVTX headers only in
#   kernels/cuda and recorder/
#
# Also bans raw allocation (malloc, calloc, realloc, strdup, strndup) in the
# library code (not cli/, the executable) outside formats/alloc.c: DESIGN.md s10 and docs/RELIABILITY.md
# promise that every allocation goes through formats/alloc.h, so that
# tests/formats/test_fault_alloc.c can fail any of them. recorder/intercept
# (an LD_PRELOAD interposer) and recorder/python are exempt.
#
# Usage: layering.sh [SOURCE_ROOT]   (default: $DRIFT_SRC, else the repository)
# Exit 0 when clean, 1 listing every violation as FILE:LINE: why.
set -u
ROOT=${1:-${DRIFT_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}}
cd "$ROOT" || exit 2

# the module of a source path, for the table below
module_of() {
  case "$1" in
    replay/*/*) local r=${1#replay/}; echo "replay/${r%%/*}" ;;
    replay/*) echo "replay" ;;
    *) echo "${1%%/*}" ;;
  esac
}

# what a module may include (modules; a module always may include itself)
allowed() {
  case "$1" in
    formats) echo "formats" ;;
    kernels) echo "kernels formats" ;;
    replay/ir) echo "replay/ir kernels formats" ;;
    replay/models) echo "replay/models replay/ir kernels formats" ;;
    replay/analysis) echo "replay/analysis replay/ir kernels formats" ;;
    replay/exec) echo "replay/exec replay/capture replay/models replay/ir kernels formats" ;;
    replay/dist) echo "replay/dist replay/exec replay/capture replay/models replay/ir kernels formats" ;;
    replay/drive) echo "replay/drive replay/dist replay/exec replay/capture replay/analysis replay/models replay/ir kernels formats" ;;
    replay/search) echo "replay/search replay/drive replay/dist replay/exec replay/capture replay/analysis replay/models replay/ir kernels formats" ;;
    replay/capture) echo "replay/capture replay/exec replay/ir replay/models kernels formats" ;;
    recorder) echo "recorder formats" ;;
    tui) echo "tui formats" ;;
    cli) echo "cli recorder replay/ir replay/models replay/analysis replay/exec replay/dist replay/drive replay/search replay/capture tui kernels formats" ;;
    *) echo "" ;;
  esac
}

bad=0
violation() {
  echo "$1: $2"
  bad=$((bad + 1))
}

files=$(find formats kernels replay recorder tui cli -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) \
          -not -path 'recorder/python/*' | LC_ALL=C sort)
for f in $files; do
  mod=$(module_of "$f")
  ok=$(allowed "$mod")
  if [ -z "$ok" ]; then
    violation "$f:1" "module '$mod' is not in the layering map (tests/integration/layering.sh): add it"
    continue
  fi
  # "quoted" includes with a directory: the module they name must be allowed
  while IFS=: read -r line inc; do
    [ -n "$inc" ] || continue
    case "$inc" in */*) ;; *) continue ;; esac # same-directory include
    tmod=$(module_of "$inc")
    allowed_here=0
    for a in $ok; do [ "$a" = "$tmod" ] && allowed_here=1; done
    [ "$allowed_here" = 1 ] || violation "$f:$line" "includes \"$inc\": $mod may include only: $ok"
    case "$inc" in
      kernels/backend_impl.h | kernels/cpu/* | kernels/ref/* | kernels/cuda/*)
        if [ "$inc" != kernels/cuda/cuda_backend.h ] && [ "$mod" != kernels ]; then
          violation "$f:$line" "includes \"$inc\", private to kernels/ (use the door, kernels/backend.h)"
        fi ;;
    esac
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | sed -E 's/^([0-9]+):[^"]*"([^"]+)".*/\1:\2/')
  # <system> includes: curses only in the view, CUDA only in kernels/cuda and the recorder
  while IFS=: read -r line inc; do
    case "$inc" in
      curses.h | ncurses.h | ncursesw/* | ncurses/* | term.h | panel.h)
        [ "$f" = tui/view.c ] || violation "$f:$line" "includes <$inc>: curses belongs to tui/view.c alone" ;;
      cuda*.h | cublas*.h | cupti*.h | nccl.h | nvtx*.h | nvToolsExt*.h | nvml.h | cuda/* | nvtx3/*)
        case "$f" in
          kernels/cuda/* | recorder/*) ;;
          *) violation "$f:$line" "includes <$inc>: CUDA headers belong to kernels/cuda and recorder/ alone" ;;
        esac ;;
    esac
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*<' "$f" | sed -E 's/^([0-9]+):[^<]*<([^>]+)>.*/\1:\2/')
  # raw allocation
  case "$f" in
    formats/alloc.c | recorder/intercept/* | cli/*) ;;
    *)
      while IFS=: read -r line _; do
        violation "$f:$line" "raw allocation: use drift_malloc/drift_calloc/drift_realloc/drift_strdup (formats/alloc.h)"
      done < <(sed -E 's@//.*$@@' "$f" | grep -nE '(^|[^A-Za-z0-9_.>])(malloc|calloc|realloc|strdup|strndup)[[:space:]]*\(' |
               grep -vE '^[0-9]+:[[:space:]]*(\*|/\*)')
      ;;
  esac
done

n=$(echo "$files" | wc -l)
if [ "$bad" -gt 0 ]; then
  echo "layering: $bad violation(s) in $n files"
  exit 1
fi
echo "layering: $n files, every include in the allowed direction, curses and CUDA where they belong, no raw allocation"
exit 0
