#!/usr/bin/env bash
# The README's demo command: installs what is missing, builds, runs `drift demo`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/setup.sh
scripts/build.sh build >/dev/null
exec build/drift demo "$@"
