"""ctypes view of libdrift_recorder.so (recorder/recorder.h, formats/trace.h).

Only plain C types cross the boundary (recorder.h's "Python/ctypes" rule);
the two row structs of /metrics are mirrored field for field below. Keep
them in the order and with the types of formats/trace.h: a mismatch writes
garbage metrics without any error.
"""
import ctypes as C
import glob
import os

# drift_dtype (formats/dtype.h)
DT_FP32, DT_BF16, DT_FP16, DT_FP64 = 1, 2, 3, 4  # formats/dtype.h
DTYPE_NAMES = {DT_FP32: "fp32", DT_BF16: "bf16", DT_FP16: "fp16", DT_FP64: "fp64"}
# drift_trace_side
SIDES = {"trainer": 0, "rollout": 1, "replay": 2}
# drift_status codes the binding looks at (formats/err.h)
E_OK = 0
E_UNSUPPORTED = 6
# drift_recorder_counter
COUNTERS = ["records", "stored", "sampled_out", "dropped", "lost", "rejected", "dropped_steps", "ended_steps",
            "committed_steps", "last_committed", "written_records", "written_bytes", "staging_bytes", "staging_used",
            "staging_high", "blocked_ns", "block_timeouts", "off", "started", "n_sites"]

METRIC_FIRST_DIVERGENT = 1
METRIC_BITWISE_EQUAL = 2


class TraceMetric(C.Structure):
    """drift_trace_metric (formats/trace.h), one row of /metrics/rows."""
    _fields_ = [
        ("step", C.c_int64),
        ("site", C.c_int32),
        ("variant", C.c_int32),
        ("denoise_index", C.c_int32),
        ("flags", C.c_uint32),
        ("numel", C.c_int64),
        ("mean_abs_diff", C.c_double),
        ("max_abs_diff", C.c_double),
        ("rel_max", C.c_double),
        ("cosine", C.c_double),
        ("rmse", C.c_double),
        ("rmse_oracle", C.c_double),
        ("nan_count", C.c_int64),
        ("inf_count", C.c_int64),
        ("ref_nan_count", C.c_int64),
        ("ref_inf_count", C.c_int64),
        ("worst_index", C.c_int64),
        ("max_ulp_diff", C.c_uint64),
    ]


class TraceStepMetrics(C.Structure):
    """drift_trace_step_metrics (formats/trace.h), one row of /metrics/steps."""
    _fields_ = [
        ("step", C.c_int64),
        ("variant", C.c_int32),
        ("denoise_index", C.c_int32),
        ("n_pairs", C.c_int64),
        ("log_prob_mean_abs_diff", C.c_double),
        ("ratio_abs_minus_1", C.c_double),
        ("approx_kl", C.c_double),
    ]


# sizeof as the C compiler lays them out on x86-64 / aarch64 (LP64).
assert C.sizeof(TraceMetric) == 128, C.sizeof(TraceMetric)
assert C.sizeof(TraceStepMetrics) == 48, C.sizeof(TraceStepMetrics)


def _candidates():
    env = os.environ.get("DRIFT_RECORDER_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libdrift_recorder.so")
    yield os.path.join(os.path.dirname(here), "libdrift_recorder.so")
    # the build directories of the checkout this package sits in (recorder/python/drift_recorder)
    root = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    found = glob.glob(os.path.join(root, "build*", "libdrift_recorder.so"))
    found.sort(key=lambda p: os.path.getmtime(p), reverse=True)
    for p in found:
        yield p


def find_library():
    """Path of libdrift_recorder.so: $DRIFT_RECORDER_LIB, else next to the
    package, else the newest build*/ of the checkout. None if not found."""
    for p in _candidates():
        if os.path.isfile(p):
            return p
    return None


_LIB = {}


def load(path=None):
    """Loads (once per path) and declares every function's argtypes."""
    path = path or find_library()
    if not path:
        raise OSError("libdrift_recorder.so not found: set DRIFT_RECORDER_LIB or build the "
                      "drift_recorder_shared target")
    path = os.path.abspath(path)
    if path in _LIB:
        return _LIB[path]
    lib = C.CDLL(path)
    P, I, I32, I64, D, S = C.c_void_p, C.c_int, C.c_int32, C.c_int64, C.c_double, C.c_char_p
    PI64 = C.POINTER(I64)
    decl = {
        "drift_recorder_open": ([C.POINTER(P), S, I, I32, I32, S, S, D, S, S, P], I),
        "drift_recorder_close": ([P, P], I),
        "drift_recorder_declare_site": ([P, S, I, I, PI64, C.POINTER(I), P], I),
        "drift_recorder_add_param": ([P, S, I, PI64, PI64, PI64, P, P], I),
        "drift_recorder_set_param_dtype": ([P, S, I, P], I),
        "drift_recorder_add_buffer": ([P, S, I, I, PI64, P, P], I),
        "drift_recorder_set_graph": ([P, S, C.c_size_t, P], I),
        "drift_recorder_set_params_ref": ([P, S, C.c_size_t, P], I),
        "drift_recorder_set_libraries": ([P, S, I, I, I64, I64, I64, I64, I64, S, S, S, P], I),
        "drift_recorder_set_compiled": ([P, S, S, P], I),
        "drift_recorder_hash64": ([P, C.c_size_t, I, P, C.POINTER(C.c_uint64), P], I),
        "drift_recorder_start": ([P, P], I),
        "drift_recorder_begin_step": ([P, I64, P], I),
        "drift_recorder_end_step": ([P, P], I),
        "drift_recorder_record_host": ([P, S, I, I, PI64, P, I32, I32, I32, P], I),
        "drift_recorder_record_device": ([P, S, I, I, PI64, P, P, I32, I32, I32, P], I),
        "drift_recorder_prepare_device": ([P, P], I),
        "drift_recorder_wants_tensor": ([P, S], I),
        "drift_recorder_add_metric": ([P, S, C.POINTER(TraceMetric), P], I),
        "drift_recorder_add_step_metrics": ([P, C.POINTER(TraceStepMetrics), P], I),
        "drift_recorder_note": ([P, I, S, P], I),
        "drift_recorder_batch": ([P, I32, I, I, PI64, P], I),
        "drift_recorder_flush": ([P, I, P], I),
        "drift_recorder_counter": ([P, I], I64),
        "drift_recorder_enabled": ([P], I),
        "drift_recorder_error": ([P], S),
        "drift_recorder_last_error": ([], S),
    }
    # newer entry points: a library built before them still loads (the Recorder then skips per-step graphs)
    optional = {
        "drift_recorder_reserve_step_graphs": ([P, P], I),
        "drift_recorder_step_graph": ([P, I64, S, C.c_size_t, S, P], I),
        "drift_recorder_set_blas_workspace": ([P, I64, I64, P], I),
    }
    for name, (args, res) in list(decl.items()) + list(optional.items()):
        fn = getattr(lib, name, None)
        if fn is None and name in optional:
            continue
        if fn is None:
            raise OSError("%s: no %s (a libdrift_recorder.so older than this package)" % (path, name))
        fn.argtypes = args
        fn.restype = res
    _LIB[path] = lib
    return lib


def shape_array(shape):
    n = len(shape)
    return (C.c_int64 * max(n, 1))(*[int(s) for s in shape])
