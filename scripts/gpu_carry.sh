#!/usr/bin/env bash
# Prepares what the GPU machine needs and lacks, in ignored folders of the
# checkout, to be named in the device tool's `carry`:
#
#   .pydeps/diffusers      diffusers' src/diffusers without pipelines/ (kept packed,
#                          .pydeps/pipelines_full.tgz, to stay under the 64 MiB carry;
#                          unpack on the device: tar xzf .pydeps/pipelines_full.tgz -C .pydeps/diffusers)
#   .pydeps/dtests/tests   diffusers' tests/ (the zoo reads its configurations from them)
#   .debs                  Debian packages the device image lacks (cmocka, OpenBLAS, ncurses, tmux);
#                          tests/gpu/run.sh unpacks them with DEBS=$PWD/.debs
#
#   scripts/gpu_carry.sh DIFFUSERS_GIT_DIR     (a bare snapshot, e.g. from the fetch tool)
set -eu
S="$(cd "$(dirname "$0")/.." && pwd)"
G="${1:?usage: scripts/gpu_carry.sh DIFFUSERS_GIT_DIR}"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
git --git-dir="$G" archive HEAD src/diffusers tests | tar x -C "$T"
rm -rf "$S/.pydeps"; mkdir -p "$S/.pydeps/dtests"
(cd "$T/src/diffusers" && tar czf "$S/.pydeps/pipelines_full.tgz" pipelines && rm -rf pipelines)
mv "$T/src/diffusers" "$S/.pydeps/diffusers"
mv "$T/tests" "$S/.pydeps/dtests/tests"
# the zoo reads only the model and pipeline tests: the rest would push the carry past 64 MiB
(cd "$S/.pydeps/dtests/tests" && find . -mindepth 1 -maxdepth 1 ! -name models ! -name pipelines ! -name '*.py' -exec rm -rf {} +)
git --git-dir="$G" log -1 --format='diffusers %H %cs' > "$S/.pydeps/VERSION"
mkdir -p "$S/.debs"
(cd "$S/.debs" && apt-get download libcmocka0 libcmocka-dev libopenblas-dev libopenblas-pthread-dev \
   libopenblas0-pthread libopenblas0 libgfortran5 libncurses-dev libncurses6 libtinfo6 tmux libevent-core-2.1-7 libutempter0 >/dev/null)
# OpenBLAS's static archives (5 MB) are not linked: repack its -dev package without them
d=$(ls "$S"/.debs/libopenblas-pthread-dev_*.deb); rm -rf "$T/obd"; dpkg-deb -R "$d" "$T/obd"
find "$T/obd" -name '*.a' -delete; dpkg-deb -b "$T/obd" "$d" >/dev/null
du -sh "$S/.pydeps" "$S/.debs"
