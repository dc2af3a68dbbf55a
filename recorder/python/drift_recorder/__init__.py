"""drift_recorder: PyTorch (or numpy) binding of drift's C recording API.

    from drift_recorder import Recorder
    with Recorder("trace.rank{rank}.h5", family=..., plan=..., run_id=...) as rec:
        ...

See docs/recorder.md. Installed with pip install ./recorder/python (the
build puts libdrift_recorder.so inside the package); from a checkout, the
library is found through DRIFT_RECORDER_LIB, next to the package or in a
build*/ directory of the checkout.
"""
from ._lib import DT_BF16, DT_FP16, DT_FP32, find_library, load
from .metrics import compare_metrics, logprob_metrics
from .recorder import Recorder, RecorderError, strip_fqn

__all__ = ["Recorder", "RecorderError", "strip_fqn", "compare_metrics", "logprob_metrics", "find_library", "load",
           "DT_FP32", "DT_BF16", "DT_FP16"]
__version__ = "0.1.0"
