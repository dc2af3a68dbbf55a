#!/usr/bin/env bash
# Installs the Debian packages drift needs, only those missing (root, Debian 12).
set -euo pipefail
pkgs=(build-essential cmake pkg-config libhdf5-dev hdf5-tools python3-h5py python3-numpy
      libcmocka-dev libncurses-dev libopenblas-dev openmpi-bin libopenmpi-dev tmux hdf5-filter-plugin-blosc-serial clang libclang-rt-14-dev
      chromium   # chromium: the headless render test of drift report
      python3-venv python3-setuptools python3-pip)  # the pip install test of the recorder (recorder_pip.sh)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
