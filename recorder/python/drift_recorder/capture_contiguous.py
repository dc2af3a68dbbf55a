"""Keeps `Tensor.contiguous()` in a captured graph even where it does nothing.

torch returns the tensor itself when it is already contiguous, so neither
torch.export nor the dispatch trace sees the call: Flux's joint attention
slices its output ([B, L_txt + L_img, D] split on dim 1) and calls
`to_out[0](hidden_states.contiguous())`. At batch 1 the slice is contiguous
and the graph has no copy; at batch 2 (drift invariance re-batches the graph)
the slice is strided, torch copies it and `linear` stays one GEMM with a bias
epilogue, while the graph without the call hands linear the strided slice
(matmul + add_, two roundings). While a graph is captured, a `.contiguous()`
of an already-contiguous tensor becomes `aten.clone(memory_format=
contiguous_format)`: the same values (a copy), and the call survives at
every batch. The one difference from eager: the result no longer aliases its
input, which matters only to an in-place write through one of the two.
"""
import contextlib


@contextlib.contextmanager
def contiguous_kept():
    """Within the block, Tensor.contiguous() of a contiguous tensor is an
    explicit clone (see the module doc). A no-op without torch."""
    try:
        import torch
    except Exception:  # noqa: BLE001
        yield
        return
    original = torch.Tensor.contiguous

    def contiguous(self, memory_format=torch.contiguous_format):
        try:
            keep = memory_format == torch.contiguous_format and self.is_contiguous()
        except Exception:  # noqa: BLE001  (a symbolic shape the check cannot decide)
            keep = False
        if keep:
            return torch.ops.aten.clone.default(self, memory_format=torch.contiguous_format)
        return original(self, memory_format=memory_format)

    torch.Tensor.contiguous = contiguous
    try:
        yield
    finally:
        torch.Tensor.contiguous = original
