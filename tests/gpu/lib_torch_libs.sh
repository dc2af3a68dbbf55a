# Sourced by the GPU scripts. torch_lib_dirs prints, colon-separated, the
# folders of torch's own CUDA library wheels (site-packages/nvidia/*/lib)
# that hold cuBLAS(Lt) or cuDNN, or nothing without torch. Putting them first
# on drift's LD_LIBRARY_PATH makes drift run the same cuBLASLt and cuDNN
# builds as the recorded PyTorch run (docs/replay-libraries.md): same
# heuristics, same kernels. drift links against the CUDA toolkit's copies,
# which share the sonames (libcublasLt.so.13, libcudnn.so.9).
torch_lib_dirs() {
  "${PY:-python3}" - 2>/dev/null <<'PY' || true
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except Exception:
    roots = []
dirs = []
for r in roots:
    for lib in glob.glob(os.path.join(r, "**", "lib*.so*"), recursive=True):
        b = os.path.basename(lib)
        if b.startswith(("libcublasLt.so", "libcublas.so", "libcudnn.so", "libcudnn_")):
            d = os.path.dirname(lib)
            if d not in dirs:
                dirs.append(d)
print(":".join(dirs))
PY
}

# prefix_lib_dirs PREFIX prints, colon-separated with a trailing colon, the folders of the shared
# libraries unpacked from .debs into PREFIX (OpenBLAS, cmocka: drift needs them at run time), but
# not a folder that holds only the terminal libraries (libtinfo, libncurses: Debian 12's, there for
# the link of the dashboard): first on LD_LIBRARY_PATH, Debian's libtinfo.so.6 breaks the device
# image's newer libncursesw.so.6 that drift loads ("undefined symbol: _nc_safe_fopen").
prefix_lib_dirs() {
  [ -d "${1:-}" ] || return 0
  local d
  find "$1" \( -name '*.so' -o -name '*.so.*' \) -printf '%h\n' 2>/dev/null | sort -u | while read -r d; do
    ls "$d" | grep -E '\.so(\.|$)' | grep -qvE '^lib(tinfo|ncurses|ncursesw|tic)\.so' && printf '%s:' "$d"
  done
}
