"""The GPU and library identity of a PyTorch run (docs/format.md "/libraries").

library_identity() asks the torch the job already imported (never imports
it) and the shared objects the process has loaded: the GPU's name and
compute capability, the CUDA driver (cuDriverGetVersion of the loaded
libcuda, no nvidia-smi), torch's CUDA runtime (torch.version.cuda), cuDNN
(torch.backends.cudnn.version()), and cuBLASLt / cuBLAS through their own
version calls on the library torch loaded (found in /proc/self/maps), with
those libraries' paths. Unknown fields stay 0 / "".
"""
import ctypes as C
import os
import re
import sys

FIELDS = ("gpu_name", "cc_major", "cc_minor", "driver_version", "runtime_version", "cublaslt_version",
          "cublas_version", "cudnn_version", "torch_version", "cublaslt_path", "cudnn_path")

_CUBLASLT = re.compile(r"/libcublasLt\.so[.\d]*$")
_CUBLAS = re.compile(r"/libcublas\.so[.\d]*$")
_CUDNN = re.compile(r"/libcudnn\.so[.\d]*$")
_CUDA = re.compile(r"/libcuda\.so[.\d]*$")


def empty():
    return {k: ("" if k in ("gpu_name", "torch_version", "cublaslt_path", "cudnn_path") else 0) for k in FIELDS}


def loaded_path(pattern, maps_text):
    """The first mapped file whose path matches pattern ("" if none)."""
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and pattern.search(parts[5].strip()):
            return parts[5].strip()
    return ""


def runtime_code(text):
    """torch.version.cuda ("12.8") as cudaRuntimeGetVersion's number (12080); 0 if unknown."""
    m = re.match(r"^(\d+)\.(\d+)", str(text or ""))
    return int(m.group(1)) * 1000 + int(m.group(2)) * 10 if m else 0


def _read_maps(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _lib_call(path, fn):
    """fn(CDLL(path)) or 0 when the library or the call is unavailable."""
    if not path:
        return 0
    try:
        return int(fn(C.CDLL(path)) or 0)
    except (OSError, AttributeError, ValueError, TypeError):
        return 0


def _cublaslt_version(lib):
    f = lib.cublasLtGetVersion
    f.restype, f.argtypes = C.c_size_t, []
    return f()


def _cublas_version(lib):
    f = lib.cublasGetProperty
    f.restype, f.argtypes = C.c_int, [C.c_int, C.POINTER(C.c_int)]
    parts = []
    for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
        v = C.c_int(0)
        if f(prop, C.byref(v)) != 0:
            return 0
        parts.append(v.value)
    return parts[0] * 10000 + parts[1] * 100 + parts[2]


def _driver_version(lib):
    f = lib.cuDriverGetVersion
    f.restype, f.argtypes = C.c_int, [C.POINTER(C.c_int)]
    v = C.c_int(0)
    return v.value if f(C.byref(v)) == 0 else 0


_WS_PAIR = re.compile(r":(\d+):(\d+)")


def blas_workspace(env=None):
    """(cuBLAS workspace bytes, cuBLASLt workspace bytes) that torch takes from this
    process's environment, 0 for "torch's default" (which drift knows per GPU).
    CUBLAS_WORKSPACE_CONFIG is torch's ":SIZE_KiB:COUNT" pairs (CublasHandlePool.cpp,
    parseChosenWorkspaceSize: the sum of SIZE * COUNT KiB; ":16:8", the setting of
    deterministic runs, is 128 KiB); one torch cannot parse leaves its default.
    CUBLASLT_WORKSPACE_SIZE is KiB. The sizes choose cuBLAS's algorithms (split-K
    needs workspace): a replay under the torch profile must use the same."""
    env = os.environ if env is None else env
    cfg, cublas = str(env.get("CUBLAS_WORKSPACE_CONFIG", "") or ""), 0
    pairs = _WS_PAIR.findall(cfg)
    if pairs and "".join(":%s:%s" % p for p in pairs) == cfg.strip():
        cublas = sum(int(a) * int(b) for a, b in pairs) * 1024
    lt = str(env.get("CUBLASLT_WORKSPACE_SIZE", "") or "").strip()
    return cublas, (int(lt) * 1024 if lt.isdigit() else 0)


def library_identity(torch=None, maps_path="/proc/self/maps"):
    """A dict of FIELDS for the current CUDA device, or None when torch is not
    loaded. Never raises: what cannot be asked stays unknown."""
    torch = torch if torch is not None else sys.modules.get("torch")
    if torch is None:
        return None
    ident = empty()
    ident["torch_version"] = str(getattr(torch, "__version__", "") or "")
    try:
        if not torch.cuda.is_available():
            return ident
        dev = torch.cuda.current_device()
        ident["gpu_name"] = str(torch.cuda.get_device_name(dev))
        ident["cc_major"], ident["cc_minor"] = (int(x) for x in torch.cuda.get_device_capability(dev))
        ident["runtime_version"] = runtime_code(getattr(torch.version, "cuda", None))
    except Exception:  # noqa: BLE001 - an identity is never worth a failure
        return ident
    try:
        v = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        ident["cudnn_version"] = int(v or 0)
    except Exception:  # noqa: BLE001
        pass
    maps = _read_maps(maps_path)
    ident["cublaslt_path"] = loaded_path(_CUBLASLT, maps)
    ident["cudnn_path"] = loaded_path(_CUDNN, maps)
    ident["cublaslt_version"] = _lib_call(ident["cublaslt_path"], _cublaslt_version)
    ident["cublas_version"] = _lib_call(loaded_path(_CUBLAS, maps), _cublas_version)
    ident["driver_version"] = _lib_call(loaded_path(_CUDA, maps) or "libcuda.so.1", _driver_version)
    return ident
