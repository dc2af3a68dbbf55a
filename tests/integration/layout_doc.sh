#!/usr/bin/env bash
# docs/layout.md against the tree: every folder and source file its layout
# block names exists, and every folder of the tree (two levels deep, data
# folders below tests/data, fuzz/corpus and recorder/python excepted) is
# named there. Keeps the layout doc true when code moves.
#
# Usage: layout_doc.sh [SOURCE_ROOT]   (default: $DRIFT_SRC, else the repository)
# Exit 0 when they agree, 1 listing every mismatch.
set -u
ROOT=${1:-${DRIFT_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}}
cd "$ROOT" || exit 2
DOC=docs/layout.md
[ -f "$DOC" ] || { echo "$DOC: missing"; exit 1; }

# the tree block: from the line starting "CMakeLists.txt" to the closing fence
block=$(awk '/^```$/ && inblk { exit } inblk { print } /^CMakeLists.txt/ { inblk = 1; print }' "$DOC")
[ -n "$block" ] || { echo "$DOC: no layout block (a fenced block starting with CMakeLists.txt)"; exit 1; }

bad=0
named=" "
top=""
while IFS= read -r line; do
  [ -n "${line// /}" ] || continue
  case "$line" in
    "  "[!\ ]*) depth=1 ;;
    [!\ ]*) depth=0 ;;
    *) depth=-1 ;; # a continuation line of a description
  esac
  if [ "$depth" -ge 0 ]; then
    # leading words ending in "/" are folders (several on one line: siblings)
    for w in $line; do
      case "$w" in
        */) d=${w%/}
            if [ "$depth" = 0 ]; then top=$d; path=$d; else path=$top/$d; fi
            named="$named$path "
            [ -d "$path" ] || { echo "$DOC: names folder '$path/', which does not exist"; bad=$((bad + 1)); } ;;
        *) break ;;
      esac
    done
  fi
  # source file names anywhere in the line: must exist below the current top folder (or at the root)
  for f in $(printf '%s\n' "$line" | grep -oE '[A-Za-z0-9_]+\.(c|h|cu|cuh|sh)\b'); do
    base=${top:-.}
    if [ -z "$(find "$base" -name "$f" -print -quit 2>/dev/null)" ] && [ ! -e "$f" ]; then
      echo "$DOC: names file '$f' (under $base/), which does not exist"
      bad=$((bad + 1))
    fi
  done
done <<< "$block"

for d in $(find formats kernels replay recorder tui cli bench fuzz scripts tests docs -mindepth 0 -maxdepth 1 -type d \
             -not -name '__pycache__' 2>/dev/null | LC_ALL=C sort); do
  case "$d" in */.*) continue ;; esac
  case " $named " in *" $d "*) ;; *)
    echo "$DOC: folder '$d/' is not in the layout"; bad=$((bad + 1)) ;;
  esac
done

if [ "$bad" -gt 0 ]; then
  echo "layout_doc: $bad mismatch(es) between $DOC and the tree"
  exit 1
fi
echo "layout_doc: $DOC matches the tree"
