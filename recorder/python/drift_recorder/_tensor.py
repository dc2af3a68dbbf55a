"""Tensors as the C API wants them: a pointer, a drift dtype, a shape.

torch tensors (CUDA or CPU) and numpy arrays are accepted. torch is only
imported when a torch tensor is seen, so the binding works (and is tested)
without it. numpy conventions: float32 -> fp32, float16 -> fp16, uint16 ->
bf16 raw bits (numpy has no bf16), anything else is converted to float32.
"""
from . import _lib


def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


def dtype_code(x):
    if _is_torch(x):
        import torch
        return {torch.float32: _lib.DT_FP32, torch.bfloat16: _lib.DT_BF16, torch.float16: _lib.DT_FP16}.get(
            x.dtype, _lib.DT_FP32)
    import numpy as np
    dt = np.asarray(x).dtype
    if dt == np.float16:
        return _lib.DT_FP16
    if dt == np.uint16:
        return _lib.DT_BF16
    return _lib.DT_FP32


def f32_to_bf16_bits(x):
    """numpy float32 -> bf16 bits, round to nearest even, NaN -> 0x7fc0 (as c10)."""
    import numpy as np
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    r = np.where(nan, 0x7FC0, r)
    return r.astype(np.uint16)


def bf16_bits_to_f32(b):
    import numpy as np
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def as_f32(x, dtype=None):
    """numpy view of x widened to float32 (uint16 = bf16 bits)."""
    import numpy as np
    a = np.asarray(x)
    if a.dtype == np.uint16:
        return bf16_bits_to_f32(a)
    return a.astype(np.float32, copy=False)


class Prepared:
    """What one record call needs; keeps any temporary copy alive."""
    __slots__ = ("ptr", "dtype", "shape", "device", "stream", "keep")

    def __init__(self, ptr, dtype, shape, device, stream, keep):
        self.ptr, self.dtype, self.shape, self.device, self.stream, self.keep = ptr, dtype, shape, device, stream, keep


def prepare(x, want_host=False):
    """Prepared view of x: contiguous, a supported dtype; for a CUDA tensor a
    device pointer and the current stream of its device (unless want_host:
    then a host copy). DTensors contribute their local shard."""
    if _is_torch(x):
        import torch
        t = x.detach()
        if hasattr(t, "to_local") and type(t).__name__ == "DTensor":
            t = t.to_local()
        if t.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            t = t.float()
        if not t.is_contiguous():
            t = t.contiguous()
        code = dtype_code(t)
        shape = tuple(int(s) for s in t.shape)
        if t.is_cuda and not want_host:
            stream = torch.cuda.current_stream(t.device).cuda_stream
            return Prepared(t.data_ptr(), code, shape, t.device.index, stream, t)
        if t.is_cuda:
            t = t.cpu()
        return Prepared(t.data_ptr(), code, shape, None, None, t)
    import numpy as np
    a = np.asarray(x)
    if a.dtype not in (np.float32, np.float16, np.uint16):
        a = a.astype(np.float32)
    a = np.ascontiguousarray(a)
    code = dtype_code(a)
    return Prepared(a.ctypes.data, code, tuple(int(s) for s in a.shape), None, None, a)


def to_host_f32(x):
    """(pointer, shape, keepalive) of x as contiguous host fp32 (for /params)."""
    if _is_torch(x):
        import torch
        t = x.detach()
        if hasattr(t, "to_local") and type(t).__name__ == "DTensor":
            t = t.to_local()
        t = t.to(device="cpu", dtype=torch.float32).contiguous()
        return t.data_ptr(), tuple(int(s) for s in t.shape), t
    import numpy as np
    a = np.ascontiguousarray(as_f32(x), dtype=np.float32)
    return a.ctypes.data, tuple(int(s) for s in a.shape), a


def buffer_host(x):
    """(pointer, drift dtype, shape, keepalive) of x as a contiguous host
    array for /buffers: fp32/bf16/fp16/fp64 kept, complex as a trailing
    dimension of 2 (real, imag) of its real dtype, anything else (integers,
    bool) as fp32; a 0-d tensor as shape (1,) (buffers have rank >= 1)."""
    if _is_torch(x):
        import torch
        t = x.detach()
        if hasattr(t, "to_local") and type(t).__name__ == "DTensor":
            t = t.to_local()
        if t.is_complex():
            t = torch.view_as_real(t.resolve_conj())
        if t.dtype == torch.float64:
            code = _lib.DT_FP64
        else:
            if t.dtype not in (torch.float32, torch.bfloat16, torch.float16):
                t = t.float()
            code = dtype_code(t)
        t = t.to("cpu").contiguous()
        if t.dim() == 0:
            t = t.reshape(1)
        return t.data_ptr(), code, tuple(int(s) for s in t.shape), t
    import numpy as np
    a = np.asarray(x)
    if np.iscomplexobj(a):
        a = np.stack([a.real, a.imag], axis=-1)
    if a.dtype == np.float64:
        code = _lib.DT_FP64
    else:
        if a.dtype not in (np.float32, np.float16, np.uint16):
            a = a.astype(np.float32)
        code = dtype_code(a)
    a = np.ascontiguousarray(a.reshape(1) if a.ndim == 0 else a)
    return a.ctypes.data, code, tuple(int(s) for s in a.shape), a
