"""The Recorder: drift's C recording API for PyTorch trainers and rollout
engines (DESIGN.md s7d "Hooks"). See docs/recorder.md.

Failure policy: the training job never sees an exception from here. Every
public method catches its own failures (a C status, a Python error), logs
the first one of each kind on stderr ("drift recorder: ...") and returns;
when the C recorder turns itself off (disk full, file gone) every later
call is a cheap no-op. strict=True raises RecorderError instead (tests).
"""
import ctypes as C
import fnmatch
import os
import re
import sys
import threading
from contextlib import contextmanager

from . import _lib
from . import compiled as _compiled
from .identity import FIELDS as _IDENTITY_FIELDS, blas_workspace, library_identity
from ._tensor import prepare, to_host_f32, dtype_code, buffer_host
from .capture_outputs import first_tensor, remove_hooks
from .metrics import compare_metrics, logprob_metrics

# Wrapper components that never belong to a diffusers FQN (FSDP1, activation
# checkpointing, torch.compile); DDP's "module." is stripped at the root only.
_WRAPPER_PARTS = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod")



def _plan_dict(plan):
    """The plan as a dict (a dict, a JSON string or None); {} if unreadable."""
    if isinstance(plan, dict):
        return plan
    if isinstance(plan, str) and plan.strip():
        try:
            import json
            v = json.loads(plan)
            return v if isinstance(v, dict) else {}
        except ValueError:
            return {}
    return {}

# per-step graphs of a trace whose /graph is specialised to one step's data (docs/recorder.md)
MAX_STEP_GRAPHS = 64


def _blas_workspace_now():
    """blas_workspace() of the environment now; (0, 0) (torch's defaults) when it cannot be read."""
    try:
        return blas_workspace()
    except Exception:  # noqa: BLE001 - never worth a failure of the job
        return (0, 0)


class RecorderError(RuntimeError):
    pass


def strip_fqn(name, root_prefixes=()):
    """Model FQN without wrapper components: diffusers' names (DESIGN.md s8)."""
    parts = [p for p in name.split(".") if p not in _WRAPPER_PARTS]
    name = ".".join(parts)
    for pre in root_prefixes:
        if pre and name.startswith(pre):
            name = name[len(pre):]
            break
    return name


def _root_prefixes(model, extra):
    pre = []
    if type(model).__name__ in ("DistributedDataParallel", "DataParallel"):
        pre.append("module.")
    if extra:
        pre.extend([extra] if isinstance(extra, str) else list(extra))
    return tuple(pre)


def _dist_rank_world():
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
    except Exception:
        pass
    r, w = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if r is not None and w is not None:
        return int(r), int(w)
    return 0, 1


def _is_dtensor(p):
    return type(p).__name__ == "DTensor" and hasattr(p, "to_local")


def _dtensor_offset(p):
    """(offset, full_shape) of this rank's local shard of DTensor p."""
    full = tuple(int(s) for s in p.shape)
    try:
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
        _, off = compute_local_shape_and_global_offset(p.shape, p.device_mesh, p.placements)
        return tuple(int(o) for o in off), full
    except Exception:
        pass
    # FSDP2's layout: Shard(0) on a 1-D mesh, torch.chunk sizes
    off = [0] * len(full)
    mesh = p.device_mesh
    for mdim, pl in enumerate(p.placements):
        if type(pl).__name__ in ("Shard", "_StridedShard") and getattr(pl, "dim", None) is not None:
            n = mesh.size(mdim)
            coord = mesh.get_coordinate()[mdim]
            size = full[pl.dim]
            chunk = -(-size // n)
            off[pl.dim] += min(coord * chunk, size)
    return tuple(off), full


def _is_fsdp_module(m):
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            from torch.distributed.fsdp import FSDPModule
            return isinstance(m, FSDPModule)
        except Exception:  # noqa: BLE001
            pass
    return type(m).__name__.startswith("FSDP")


def _options_str(options):
    if options is None:
        return None
    if isinstance(options, str):
        return options
    return ";".join(f"{k}={v}" for k, v in options.items())


def _producer():
    """The producer attribute of this binding's traces: drift reads "drift-recorder-python" as
    "recorded from PyTorch" (its default kernel profile for replay on a GPU is torch)."""
    from . import __version__
    torch = sys.modules.get("torch")
    tv = getattr(torch, "__version__", None) if torch is not None else None
    return f"drift-recorder-python {__version__}" + (f" torch {tv}" if tv else "")


def _with_producer(options):
    """options with producer= added unless the caller set one."""
    if options is None:
        return {"producer": _producer()}
    if isinstance(options, str):
        if re.search(r"(^|[;\n])\s*producer\s*=", options):
            return options
        return (options + ";" if options.strip() else "") + "producer=" + _producer()
    if "producer" in options:
        return options
    out = dict(options)
    out["producer"] = _producer()
    return out


def _checkpoint_map(path):
    """(root, {tensor: shard file}, index file name or None) of a diffusers
    checkpoint directory (one *.safetensors.index.json, else one
    *.safetensors) or of such a file."""
    import glob
    import json
    import struct
    if os.path.isdir(path):
        idx = sorted(glob.glob(os.path.join(path, "*.safetensors.index.json")))
        if len(idx) > 1:
            raise ValueError(f"{path}: {len(idx)} index files, name one")
        if not idx:
            single = sorted(glob.glob(os.path.join(path, "*.safetensors")))
            if len(single) != 1:
                raise ValueError(f"{path}: no index and {len(single)} .safetensors files")
            path = single[0]
        else:
            path = idx[0]
    root, name = os.path.split(path)
    if name.endswith(".safetensors.index.json"):
        with open(path) as f:
            return root, dict(json.load(f)["weight_map"]), name
    with open(path, "rb") as f:
        (hl,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(hl))
    return root, {k: name for k in hdr if k != "__metadata__"}, None


def _make_parent(path):
    """Creates the trace's missing folders ("traces/trainer.rank0.h5" in a fresh run folder), as
    logging tools do; an error here is left for the open to report with the path."""
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        try:
            os.makedirs(d, exist_ok=True)
        except OSError:
            pass


class Recorder:
    """One trace file (one rank of one side).

        with Recorder("trace.rank{rank}.h5", family="wan2.2:layers=2,...", plan=plan,
                      run_id="run-42", options={"store_steps": "every:10"}) as rec:
            rec.record_params(model)                  # fp32 masters (shards), before step 0 ends
            rec.watch(model, outputs="blocks.*")      # module outputs, gathered dtypes
            for step in ...:
                with rec.step(step):
                    rec.input("latents", latents_handed_over, latents_cast)
                    out = model(...)
                    rec.output("noise_pred", out)
    """

    def __init__(self, path, *, side="trainer", rank=None, world_size=None, run_id=None, family="",
                 guidance_scale=1.0, plan=None, options=None, lib=None, strict=False, quiet=False,
                 libraries="auto", compiled="auto"):
        self.strict = strict
        # "auto": the identity of torch's GPU and libraries (identity.py), written when the
        # trace starts; a dict of identity.FIELDS: those values; None: none
        self._libraries = libraries
        self._libs_written = False
        # torch reads the GEMM workspace variables when it creates its cuBLAS handle (the first GEMM,
        # after this): taken now, not when /libraries is written after the first step
        self._blas_ws = _blas_workspace_now()
        # torch.compile (compiled.py): "auto" finds compiled modules in what watch / record_params /
        # capture_graph see and dynamo graphs compiled by the first step's end; a dict
        # {"mode": ..., "modules": [...]} says so explicitly; None: never marked
        self._compiled_arg = compiled
        self._compiled = {}
        if isinstance(compiled, dict):
            for f in compiled.get("modules", []) or [_compiled.ROOT]:
                self._compiled.setdefault(f, compiled.get("mode", ""))
        self.quiet = quiet
        self._h = C.c_void_p()
        self._open = False
        self._logged = set()
        self._lock = threading.RLock()
        self._in_step = False
        self._step = -1
        self._paused = 0
        self._calls = {}
        self._names = {}
        self._device_ok = True
        self._hooks = []
        self._started_steps = 0  # steps ended
        self._seen_dtypes = {}   # fqn -> drift dtype observed in this step's forward
        self._param_dtypes = {}  # fqn -> dtype written to /param_dtypes
        self._dtype_changes = {}
        self._first_div = False
        self._pending_notes = []  # notes made outside a step: written at the next begin_step
        self._buffers = set()     # /buffers names written
        self._graph_sites = {}    # user-input path -> site, from the captured graph
        self.graph = None         # the captured drift-aten-graph dict (capture_graph)
        self._stepg = None        # capture_steps.StepGraphs of a specialised /graph (per-step graphs)
        self._step_kwargs = None  # this step's forward kwargs (inputs()), for its graph check
        self._sig_graph = {}      # data signature -> per-step graph number (0: /graph)
        self._sig_failed = {}     # data signature -> why its graph could not be captured
        self._n_step_graphs = 0
        self._graph_tensor_names = set()
        self.step_graphs = {}     # step -> graph number it uses (0 /graph, -1 none), the steps checked
        self.failures = 0
        self.lib = None
        try:
            self.lib = _lib.load(lib)
            r0, w0 = _dist_rank_world()
            self.rank = r0 if rank is None else int(rank)
            self.world_size = w0 if world_size is None else int(world_size)
            self.path = path.format(rank=self.rank) if "{rank}" in path else path
            _make_parent(self.path)
            if run_id is None:
                run_id = os.environ.get("DRIFT_RUN_ID") or os.environ.get("TORCHELASTIC_RUN_ID") or ""
            self.run_id = run_id
            self._plan_obj = _plan_dict(plan)
            self._side_name = side if isinstance(side, str) else ""
            if isinstance(plan, dict):
                import json
                plan = json.dumps(plan)
            options = _with_producer(options)
            sd = _lib.SIDES[side] if isinstance(side, str) else int(side)
            rc = self.lib.drift_recorder_open(C.byref(self._h), self.path.encode(), sd, self.rank, self.world_size,
                                              run_id.encode(), (family or "").encode(), float(guidance_scale),
                                              (plan or "").encode(), (_options_str(options) or "").encode() or None,
                                              None)
            if rc != 0:
                self._status_fail("open", rc)
                return
            self._open = True
        except Exception as e:  # noqa: BLE001 - the job must go on
            self._fail("open", e)

    # ------------------------------------------------------------------ errors
    def _log_once(self, key, msg):
        self.failures += 1
        if key in self._logged:
            return
        self._logged.add(key)
        if not self.quiet:
            print(f"drift recorder: {getattr(self, 'path', '?')}: {msg} (reported once; the job goes on)",
                  file=sys.stderr, flush=True)

    def _fail(self, where, exc):
        if self.strict:
            raise RecorderError(f"{where}: {exc}") from exc
        self._log_once(("exc", where), f"{where} failed: {type(exc).__name__}: {exc}")

    def _status_fail(self, where, rc):
        msg = self.lib.drift_recorder_last_error().decode(errors="replace") if self.lib else ""
        if self.strict:
            raise RecorderError(f"{where}: status {rc}: {msg}")
        self._log_once(("rc", where), f"{where}: status {rc}: {msg}")

    def _ok(self):
        return self._open and self._paused == 0

    def _name(self, s):
        b = self._names.get(s)
        if b is None:
            b = s.encode()
            self._names[s] = b
        return b

    # -------------------------------------------------------------- lifecycle
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Ends an open step (uncommitted: a step begun but not ended is not
        committed), drains and closes. Idempotent."""
        if not self._open:
            return
        try:
            self.unwatch()
            if self._stepg is not None:
                self._stepg.close()
                self._stepg = None
            self._open = False
            rc = self.lib.drift_recorder_close(self._h, None)
            self._h = C.c_void_p()
            if rc != 0:
                self._status_fail("close", rc)
        except Exception as e:  # noqa: BLE001
            self._fail("close", e)

    @property
    def enabled(self):
        """True while recording (False once closed or turned off by an error)."""
        try:
            return self._open and self.lib.drift_recorder_enabled(self._h) == 1
        except Exception:  # noqa: BLE001
            return False

    @property
    def error(self):
        """The error that turned the recorder off ('' while on)."""
        if not self._open:
            return ""
        return self.lib.drift_recorder_error(self._h).decode(errors="replace")

    def counters(self):
        if not self._open:
            return {}
        return {n: int(self.lib.drift_recorder_counter(self._h, i)) for i, n in enumerate(_lib.COUNTERS)}

    def _note_model(self, model):
        """Remembers model's compiled modules (torch.compile wrappers, in-place compiles)."""
        if self._compiled_arg != "auto":
            return
        try:
            for f, mode in _compiled.compiled_modules(model):
                self._compiled.setdefault(f, mode)
        except Exception as e:  # noqa: BLE001
            self._fail("compiled modules", e)

    @property
    def compiled(self):
        """{fqn: inductor mode} of the compiled modules found so far ("<model>": the root)."""
        return dict(self._compiled)

    def _write_compiled(self):
        """The torch.compile marker, merged into /libraries (before set_libraries)."""
        graphs = _compiled.dynamo_graphs() if self._compiled_arg == "auto" else 0
        if not self._compiled and not graphs:
            return
        mode, text = _compiled.describe(list(self._compiled.items()), graphs)
        rc = self.lib.drift_recorder_set_compiled(self._h, mode.encode()[:63], text.encode()[:1023], None)
        if rc:
            self._status_fail("set_compiled", rc)

    def _write_libraries(self):
        """/libraries, once, before the trace starts (after the first step torch has loaded
        cuBLASLt and cuDNN, so their versions and paths are known)."""
        if self._libs_written:
            return
        self._libs_written = True
        try:
            if self._compiled_arg is not None:
                self._write_compiled()
        except Exception as e:  # noqa: BLE001
            self._fail("set_compiled", e)
        try:
            ws = self._blas_ws
            if any(ws) and getattr(self.lib, "drift_recorder_set_blas_workspace", None) is not None:
                rc = self.lib.drift_recorder_set_blas_workspace(self._h, int(ws[0]), int(ws[1]), None)
                if rc:
                    self._status_fail("set_blas_workspace", rc)
        except Exception as e:  # noqa: BLE001
            self._fail("set_blas_workspace", e)
        if self._libraries is None:
            return
        try:
            ident = library_identity() if self._libraries == "auto" else dict(self._libraries)
            if not ident:
                return
            v = {k: ident.get(k, "" if k in ("gpu_name", "torch_version", "cublaslt_path", "cudnn_path") else 0)
                 for k in _IDENTITY_FIELDS}
            rc = self.lib.drift_recorder_set_libraries(
                self._h, str(v["gpu_name"]).encode(), int(v["cc_major"]), int(v["cc_minor"]),
                int(v["driver_version"]), int(v["runtime_version"]), int(v["cublaslt_version"]),
                int(v["cublas_version"]), int(v["cudnn_version"]), str(v["torch_version"]).encode(),
                str(v["cublaslt_path"]).encode(), str(v["cudnn_path"]).encode(), None)
            if rc:
                self._status_fail("set_libraries", rc)
        except Exception as e:  # noqa: BLE001
            self._fail("set_libraries", e)

    def start(self):
        """Starts the trace now (else: at the end of the first step)."""
        if self._open:
            self._flush_param_dtypes()
            self._write_libraries()
            rc = self.lib.drift_recorder_start(self._h, None)
            if rc:
                self._status_fail("start", rc)

    def prepare_device(self):
        """Pins staging and creates the copy stream now (optional)."""
        if self._open:
            rc = self.lib.drift_recorder_prepare_device(self._h, None)
            if rc == _lib.E_UNSUPPORTED:
                self._device_ok = False
            elif rc:
                self._status_fail("prepare_device", rc)

    def flush(self, timeout_ms=-1):
        if self._open:
            rc = self.lib.drift_recorder_flush(self._h, int(timeout_ms), None)
            if rc:
                self._status_fail("flush", rc)
                return False
        return True

    # ------------------------------------------------------------------ steps
    def begin_step(self, step):
        if not self._open:
            return
        try:
            with self._lock:
                rc = self.lib.drift_recorder_begin_step(self._h, int(step), None)
                if rc:
                    self._status_fail("begin_step", rc)
                    return
                self._in_step = True
                self._step = int(step)
                self._calls.clear()
                self._seen_dtypes.clear()
                self._first_div = False
                pending, self._pending_notes = self._pending_notes, []
            for level, text in pending:
                self.note(text, level)
        except Exception as e:  # noqa: BLE001
            self._fail("begin_step", e)

    def end_step(self):
        if not self._open or not self._in_step:
            return
        try:
            self._check_step_graph()
        except Exception as e:  # noqa: BLE001
            self._fail("step graph", e)
        try:
            with self._lock:
                if self._started_steps == 0:
                    self._flush_param_dtypes()   # before the trace starts (end of the first step)
                    self._write_libraries()
                else:
                    self._note_dtype_changes()
                self._in_step = False
                self._started_steps += 1
                rc = self.lib.drift_recorder_end_step(self._h, None)
                if rc:
                    self._status_fail("end_step", rc)
        except Exception as e:  # noqa: BLE001
            self._fail("end_step", e)

    @contextmanager
    def step(self, step):
        self.begin_step(step)
        try:
            yield self
        finally:
            self.end_step()

    @contextmanager
    def paused(self):
        """No hook records inside (e.g. a second forward that is not the trainer's)."""
        self._paused += 1
        try:
            yield self
        finally:
            self._paused -= 1

    # ---------------------------------------------------------------- records
    def record(self, site, x, microbatch=0, denoise_index=-1, call_index=None):
        """Records tensor x (torch CUDA/CPU tensor or numpy array) under site in
        the open step. call_index None: counted per (site, microbatch,
        denoise_index) within the step. Returns True if the record was taken."""
        if not self._open or not self._in_step or x is None:
            return False
        try:
            if call_index is None:
                key = (site, microbatch, denoise_index)
                call_index = self._calls.get(key, 0)
                self._calls[key] = call_index + 1
            p = prepare(x)
            name = self._name(site)
            shape = _lib.shape_array(p.shape)
            if p.device is not None and self._device_ok:
                rc = self.lib.drift_recorder_record_device(self._h, name, p.dtype, len(p.shape), shape,
                                                           C.c_void_p(p.ptr), C.c_void_p(p.stream), int(microbatch),
                                                           int(denoise_index), int(call_index), None)
                if rc != _lib.E_UNSUPPORTED:
                    if rc:
                        self._status_fail(f"record {site}", rc)
                    return rc == 0
                self._device_ok = False
                self._log_once("nodevice", "device captures unsupported here ("
                               + self.lib.drift_recorder_last_error().decode(errors="replace")
                               + "): copying CUDA tensors to the host instead")
            if p.device is not None:
                p = prepare(x, want_host=True)
            rc = self.lib.drift_recorder_record_host(self._h, name, p.dtype, len(p.shape), shape, C.c_void_p(p.ptr),
                                                     int(microbatch), int(denoise_index), int(call_index), None)
            if rc:
                self._status_fail(f"record {site}", rc)
            return rc == 0
        except Exception as e:  # noqa: BLE001
            self._fail(f"record {site}", e)
            return False

    def input(self, name, pre_cast, post_cast=None, **idx):
        """Boundary input `name` (latents, cond, timestep) as handed over
        (input:<name>:pre_cast) and after the input_dtype_policy cast
        (input:<name>:post_cast; the same tensor when there is no cast)."""
        self.record(f"input:{name}:pre_cast", pre_cast, **idx)
        self.record(f"input:{name}:post_cast", pre_cast if post_cast is None else post_cast, **idx)

    def output(self, name, x, **idx):
        """The model's final output: output:<name> (output:noise_pred)."""
        return self.record(f"output:{name}", x, **idx)

    def rollout(self, name, x, **idx):
        """A tensor handed over by the rollout: rollout:<name> (rollout:model_output)."""
        return self.record(f"rollout:{name}", x, **idx)

    def logprob(self, kind, x, **idx):
        """logprob:old (rollout) / logprob:new (trainer), one value per sample."""
        return self.record(f"logprob:{kind}", x, **idx)

    def sde(self, name, x, **idx):
        """SDE sample data replay needs for log-probs: sde:x_next, sde:params
        ([sigma, sigma_next, sigma_max, eta], fp32)."""
        return self.record(f"sde:{name}", x, **idx)

    def note(self, text, level=0):
        """A note of the open step; outside a step it is kept (up to 16) and
        written at the next begin_step."""
        if self._open and not self._in_step:
            if len(self._pending_notes) < 16:
                self._pending_notes.append((int(level), text))
            return
        if self._open and self._in_step:
            rc = self.lib.drift_recorder_note(self._h, int(level), text.encode(errors="replace")[:255], None)
            if rc:
                self._status_fail("note", rc)

    def batch(self, samples, cfg="none", microbatch=0):
        """The batch composition of one micro-batch of the open step:
        samples[p] is the id of the sample at batch position p (ints >= 0,
        at most 32), cfg "none", "split" or "joined" (conditional rows first).
        Written as a 'batch-composition v1' note (docs/format.md) that
        `drift invariance` reads back."""
        cfgs = {"none": 0, "split": 1, "joined": 2}
        if cfg not in cfgs:  # a caller's bug, said at once (also when not recording)
            raise ValueError(f"batch: cfg={cfg!r}, expected one of {sorted(cfgs)}")
        if not (self._open and self._in_step):
            return
        ids = [int(x) for x in samples]
        arr = (C.c_int64 * max(1, len(ids)))(*ids)
        rc = self.lib.drift_recorder_batch(self._h, int(microbatch), cfgs[cfg], len(ids), arr, None)
        if rc:
            self._status_fail("batch", rc)

    # ---------------------------------------------------------------- metrics
    def compare(self, site, candidate, reference, batch=None, variant=0, denoise_index=-1, dtype=None):
        """DESIGN.md s7 metrics of candidate vs reference (computed on their
        device, fp64 sums) appended to /metrics for the open step, so that
        `drift top --follow` shows them live. Returns the metrics dict (None
        if nothing could be computed)."""
        if not self._open or not self._in_step:
            return None
        try:
            m = compare_metrics(candidate, reference, batch=batch, dtype=dtype)
            row = _lib.TraceMetric()
            for k, _ in _lib.TraceMetric._fields_:
                if k in m:
                    setattr(row, k, m[k])
            row.step = self._step
            row.variant = int(variant)
            row.denoise_index = int(denoise_index)
            flags = _lib.METRIC_BITWISE_EQUAL if m["bitwise_equal"] else 0
            if not m["bitwise_equal"] and not self._first_div:
                self._first_div = True
                flags |= _lib.METRIC_FIRST_DIVERGENT
            row.flags = flags
            m["flags"] = flags
            rc = self.lib.drift_recorder_add_metric(self._h, self._name(site), C.byref(row), None)
            if rc:
                self._status_fail(f"compare {site}", rc)
            return m
        except Exception as e:  # noqa: BLE001
            self._fail(f"compare {site}", e)
            return None

    def step_metrics(self, lp_new, lp_old, variant=0, denoise_index=-1):
        """log_prob_mean_abs_diff, ratio_abs_minus_1, approx_kl of the open
        step's log-prob pairs, appended to /metrics/steps."""
        if not self._open or not self._in_step:
            return None
        try:
            m = logprob_metrics(lp_new, lp_old)
            row = _lib.TraceStepMetrics(step=self._step, variant=int(variant), denoise_index=int(denoise_index),
                                        n_pairs=m["n_pairs"], log_prob_mean_abs_diff=m["log_prob_mean_abs_diff"],
                                        ratio_abs_minus_1=m["ratio_abs_minus_1"], approx_kl=m["approx_kl"])
            rc = self.lib.drift_recorder_add_step_metrics(self._h, C.byref(row), None)
            if rc:
                self._status_fail("step_metrics", rc)
            return m
        except Exception as e:  # noqa: BLE001
            self._fail("step_metrics", e)
            return None

    # ------------------------------------------------------- params, buffers
    def add_param(self, fqn, values, offset=None, full_shape=None):
        """One fp32 master (or shard of it: offset and full_shape) into /params."""
        if not self._open:
            return False
        try:
            ptr, shape, keep = to_host_f32(values)
            if len(shape) == 0 or any(s == 0 for s in shape):
                return False  # an empty shard covers nothing
            sh = _lib.shape_array(shape)
            off = _lib.shape_array(offset) if offset is not None else None
            fs = _lib.shape_array(full_shape) if full_shape is not None else None
            rc = self.lib.drift_recorder_add_param(self._h, fqn.encode(), len(shape), sh, off, fs, C.c_void_p(ptr),
                                                   None)
            del keep
            if rc:
                self._status_fail(f"add_param {fqn}", rc)
            return rc == 0
        except Exception as e:  # noqa: BLE001
            self._fail(f"add_param {fqn}", e)
            return False

    def record_params(self, model, strip_prefix=None, reference=None):
        """Every parameter of model as fp32 masters, once (before the first
        step ends): an FSDP2 DTensor parameter as this rank's local shard with
        its offset and the full shape, a plain tensor whole. Names are the
        model's FQNs without wrapper components. Returns the count written.

        reference=CHECKPOINT (the safetensors checkpoint the run loaded: a
        directory with a diffusers *.safetensors.index.json and its shards, or
        one .safetensors file) stores /params_ref instead of values: per
        parameter its file, dtype, shape and the drift-sum64 hash of the
        parameter as it is in memory, cast to the file's dtype and hashed on
        its device (so the trace proves the run used exactly those weights;
        `drift replay` checks every hash against the files). A DTensor is
        gathered (full_tensor(): every rank must call this)."""
        self._note_model(model)
        if reference is not None:
            return self._record_params_ref(model, strip_prefix, reference)
        n = 0
        if not self._open:
            return 0
        try:
            pre = _root_prefixes(model, strip_prefix)
            for name, p in model.named_parameters():
                fqn = strip_fqn(name, pre)
                if _is_dtensor(p):
                    off, full = _dtensor_offset(p)
                    local = p.to_local()
                    if tuple(local.shape) == full:
                        n += self.add_param(fqn, local)
                    else:
                        n += self.add_param(fqn, local, off, full)
                else:
                    n += self.add_param(fqn, p)
        except Exception as e:  # noqa: BLE001
            self._fail("record_params", e)
        return n

    def _record_params_ref(self, model, strip_prefix, checkpoint):
        if not self._open:
            return 0
        try:
            import json
            import struct
            import torch
            root, weight_map, index = _checkpoint_map(checkpoint)
            headers, tensors = {}, []
            tdt = {"BF16": torch.bfloat16, "F32": torch.float32, "F16": torch.float16, "F64": torch.float64}
            pre = _root_prefixes(model, strip_prefix)
            for name, p in model.named_parameters():
                fqn = strip_fqn(name, pre)
                if fqn not in weight_map:
                    raise KeyError(f"parameter {fqn!r} is not in the checkpoint {checkpoint}")
                fname = weight_map[fqn]
                if fname not in headers:
                    with open(os.path.join(root, fname), "rb") as f:
                        (hl,) = struct.unpack("<Q", f.read(8))
                        headers[fname] = json.loads(f.read(hl))
                h = headers[fname].get(fqn)
                if h is None or h.get("dtype") not in tdt:
                    raise KeyError(f"{fname} has no F32/BF16/F16/F64 tensor {fqn!r}")
                t = p.full_tensor() if _is_dtensor(p) else p
                t = t.detach().to(tdt[h["dtype"]]).contiguous()
                if list(t.shape) != list(h["shape"]):
                    raise ValueError(f"{fqn}: shape {list(t.shape)} in memory, {h['shape']} in {fname}")
                out = C.c_uint64(0)
                stream = torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else None
                rc = self.lib.drift_recorder_hash64(C.c_void_p(t.data_ptr()), t.numel() * t.element_size(),
                                                    1 if t.is_cuda else 0, C.c_void_p(stream), C.byref(out), None)
                if rc:
                    self._status_fail(f"hash {fqn}", rc)
                    return 0
                tensors.append({"name": fqn, "file": fname, "dtype": h["dtype"], "shape": list(h["shape"]),
                                "hash": "%016x" % out.value})
            doc = json.dumps({"format": "drift-params-ref", "version": 1, "hash": "drift-sum64",
                              "weights_root": os.path.abspath(root), "index": index, "tensors": tensors}).encode()
            rc = self.lib.drift_recorder_set_params_ref(self._h, doc, len(doc), None)
            if rc:
                self._status_fail("set_params_ref", rc)
                return 0
            return len(tensors)
        except Exception as e:  # noqa: BLE001
            self._fail("record_params(reference=...)", e)
            return 0

    def set_param_dtype(self, fqn, dtype):
        """/param_dtypes row (before the trace starts)."""
        code = dtype if isinstance(dtype, int) else dtype_code_of(dtype)
        self._param_dtypes[fqn] = code
        if self._open:
            rc = self.lib.drift_recorder_set_param_dtype(self._h, fqn.encode(), code, None)
            if rc:
                self._status_fail("set_param_dtype", rc)

    def add_buffer(self, name, x):
        """A non-parameter tensor that matters numerically (RoPE tables), in
        its own dtype (before the trace starts): fp32, bf16, fp16 and fp64 as
        they are, complex as a trailing dimension of 2 (real, imag), integers
        and bool as fp32, a scalar as shape [1]. A name written before is
        skipped. Returns True when written."""
        if not self._open or name in self._buffers:
            return False
        try:
            ptr, code, shape, keep = buffer_host(x)
            sh = _lib.shape_array(shape)
            rc = self.lib.drift_recorder_add_buffer(self._h, name.encode(), code, len(shape), sh, C.c_void_p(ptr),
                                                    None)
            del keep
            if rc:
                self._status_fail(f"add_buffer {name}", rc)
                return False
            self._buffers.add(name)
            return True
        except Exception as e:  # noqa: BLE001
            self._fail(f"add_buffer {name}", e)
            return False

    # ------------------------------------------------------- graph capture
    def _plan_autocast(self):
        """The run's autocast dtype per the plan: the trainer's
        diffusion_forward_dtype, the rollout's sglang_dit_precision; None for
        fp32 or no plan."""
        import torch

        p = getattr(self, "_plan_obj", None) or {}
        key = "sglang_dit_precision" if getattr(self, "_side_name", "") == "rollout" else "diffusion_forward_dtype"
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(str(p.get(key, "")).lower())

    def capture_graph(self, model, kwargs, *, factory=None, mode="auto", exporter=None, autocast="plan"):
        """Exports model(**kwargs) once with torch.export and stores it in
        /graph (docs/aten-graph.md), with every buffer and every lifted
        constant too large to inline in /buffers (docs/recorder.md "Graph
        capture"). Call it before step 0 ends (the trace starts then), with
        the kwargs of the forward; record_params/watch as usual. A sharded
        (FSDP2) model is never gathered: a meta-device copy is exported
        (factory: a callable building an unsharded copy, rarely needed: a
        model without a diffusers .config is copied from its own module
        tree), as a fake-tensor copy in the forward's parameter dtypes (FSDP2
        param_dtype) on the GPU; where torch.export fails (data-dependent
        shapes), the forward is traced as it runs with this step's tensors
        ("dispatch": specialised to their shapes), and a meta copy in fp32 is
        the last resort; so is a model whose parameters are not fp32. The export
        runs under autocast: "plan" (the default: the plan's forward dtype for
        this side), None (off: fp32 semantics) or a torch dtype, so that the
        model code's run-time dtype decisions are the run's (docs/aten-graph.md
        "Dtype decisions"). mode: auto | model | fake | device | meta | dispatch. exporter(model,
        kwargs, factory=, mode=) -> (doc, [(name, tensor)]) replaces the
        torch.export path (tests). A model that cannot be exported gets a
        warning note in the trace and one stderr line; the recording goes
        on. Returns the graph dict, or None."""
        if not self._open:
            return None
        if self.graph is not None:
            return self.graph  # once per trace
        if self._started_steps > 0:
            self._capture_failed("called after the first step ended (the trace has started; /graph is fixed)")
            return None
        try:
            kw = {"factory": factory, "mode": mode}
            if exporter is None:  # the stand-in exporters of the tests take no autocast
                from .capture_source import capture_for_recording as exporter
                kw["autocast"] = self._plan_autocast() if autocast == "plan" else autocast
            self._note_model(model)
            found = _compiled.compiled_modules(model)
            # a compiled module: its original (_orig_mod) module tree is exported, eager semantics
            with self.paused(), _compiled.eager_for_capture(model) as orig:
                doc, tensors = exporter(orig, kwargs, **kw)
        except Exception as e:  # noqa: BLE001 - CaptureError, or torch missing: the job goes on
            self._capture_failed(f"{type(e).__name__}: {e}")
            return None
        try:
            import json
            text = json.dumps(doc, separators=(",", ":"), allow_nan=False,
                              default=lambda o: {"repr": repr(o)[:200]})  # a callable among the args: named, not fatal
            self.set_graph(text)
            nbuf = sum(1 for name, t in tensors if self.add_buffer(name, t))
            self._graph_tensor_names = {name for name, _ in tensors}  # a per-step graph may read these
            self._graph_sites = {i["target"]: i["site"] for i in doc.get("inputs", [])
                                 if i.get("kind") == "user_input" and i.get("site")}
            self.graph = doc
            cap = doc.get("capture", {})
            secs = cap.get("seconds", doc.get("export_seconds"))
            nodes = len(doc.get("nodes", []))
            self.note(f"graph captured: {doc.get('model_class', '?')}, {nodes} nodes, "
                      f"{len(self._graph_sites)} tensor inputs, {nbuf} buffers, export "
                      f"{secs if secs is not None else '?'} s ({cap.get('mode', 'model')}"
                      f"{', autocast ' + cap['autocast'] if cap.get('autocast') else ''})", 0)
            if found:
                self.note(("graph capture: %s ran torch.compile'd: captured the original module's graph "
                           "(_orig_mod, eager semantics)" % ", ".join(f for f, _ in found))[:255], 0)
                if not self.quiet:
                    print(f"drift recorder: {self.path}: graph capture: the model is torch.compile'd: captured the "
                          "original module's graph (_orig_mod); replay follows eager semantics", file=sys.stderr,
                          flush=True)
            if cap.get("fallback"):
                how = {"meta": "a meta copy in fp32", "dispatch": "a trace of the forward as it ran",
                       "device": "a device copy"}.get(cap.get("mode"), cap.get("mode", "?"))
                self.note(("graph capture fell back to %s: %s" % (how, cap["fallback"]))[:255], 1)
            if cap.get("missing_values"):
                self.note("graph capture: no values for " + ", ".join(cap["missing_values"])[:200], 1)
            if cap.get("specialized") and "autocast" in kw:  # the real capture, not a test's stand-in exporter
                self._start_step_graphs(model, kwargs, kw["autocast"], factory)
            return doc
        except Exception as e:  # noqa: BLE001
            self._fail("capture_graph", e)
            return None

    # ------------------------------------------------------- per-step graphs
    def _start_step_graphs(self, model, kwargs, autocast, factory):
        """A /graph specialised to one step's data (a forward trace): from now on every step's
        data is checked against it (docs/recorder.md "Per-step graphs"). Never raises."""
        try:
            from .capture_steps import stateful_input
            held = stateful_input(kwargs)
            if held:  # re-running the forward to check a step would see the object as this step left it
                self.note(("per-step graphs off: input '%s' is a %s, an object the forward may change (a cache): "
                           "every step uses /graph" % held)[:255], 1)
                self._stepg = None
                return
            self.reserve_step_graphs()
            from .capture_steps import StepGraphs
            with self.paused(), _compiled.eager_for_capture(model) as orig:
                sg = StepGraphs(orig, kwargs, autocast, factory)
                self._sig_graph = {sg.signature(kwargs): 0}
            self._stepg = sg
        except Exception as e:  # noqa: BLE001
            self._stepg = None
            msg = f"per-step graphs off: {type(e).__name__}: {e}"
            self.note(msg[:255], 1)
            self._log_once(("stepgraphs",), msg[:2000])

    def reserve_step_graphs(self):
        """Creates /graph_steps (before the trace starts: with set_graph), so that later steps
        can have graphs of their own (step_graph). capture_graph calls it for a specialised
        graph. Raises RuntimeError when the library has no per-step graphs or the trace started."""
        if getattr(self.lib, "drift_recorder_reserve_step_graphs", None) is None:
            raise RuntimeError("this libdrift_recorder.so has no per-step graphs (rebuild it)")
        rc = self.lib.drift_recorder_reserve_step_graphs(self._h, None)
        if rc:
            raise RuntimeError(self.lib.drift_recorder_last_error().decode(errors="replace"))

    def step_graph(self, graph, json_text=None, reason=None):
        """The open step uses per-step graph `graph` (1, 2, ... in order of first use; its
        drift-aten-graph JSON text the first time, None to reuse it), or graph 0: no graph fits
        the step (reason). The Recorder calls it itself for a specialised /graph; public for
        producers that capture per-step graphs their own way (docs/format.md 9.1)."""
        if not (self._open and self._in_step):
            return False
        fn = getattr(self.lib, "drift_recorder_step_graph", None)
        if fn is None:
            self._log_once(("stepgraph-lib",), "step_graph: this libdrift_recorder.so has none (rebuild it)")
            return False
        b = json_text.encode() if json_text is not None else None
        r = (reason or "").encode(errors="replace")[:200]
        rc = fn(self._h, int(graph), b, len(b) if b is not None else 0, r, None)
        if rc:
            self._status_fail("step_graph", rc)
            return False
        self.step_graphs[self._step] = int(graph) if graph else -1
        return True

    def _check_step_graph(self):
        """At the end of a step: which graph fits this step's data (the signature of its
        forward); a new one is traced and written, a failure is a note and the step's replay is
        refused with its reason. Never raises."""
        sg, kw = self._stepg, self._step_kwargs
        self._step_kwargs = None
        if sg is None:
            return
        if kw is None:
            if ("nokw",) not in self._logged:
                self._logged.add(("nokw",))
                self.note("per-step graphs: no rec.inputs(kwargs) in this step: its data was not checked against "
                          "the specialised /graph", 1)
            return
        try:
            with self.paused():
                sg.refresh()
                sig = sg.signature(kw)
        except Exception as e:  # noqa: BLE001 - the signature forward failed: stop checking
            self._stepg = None
            sg.close()
            msg = f"per-step graphs off: the step's signature forward failed: {type(e).__name__}: {e}"
            self.note(" ".join(msg.split())[:255], 1)
            self._log_once(("stepgraphs",), msg[:2000])
            return
        g = self._sig_graph.get(sig)
        if g == 0:
            self.step_graphs[self._step] = 0
            return
        if g is not None:
            self.step_graph(g)
            return
        if sig in self._sig_failed:
            self.step_graph(0, reason=self._sig_failed[sig])
            return
        if self._n_step_graphs >= MAX_STEP_GRAPHS:  # data that never repeats a path: the trace stays bounded
            self.step_graph(0, reason=f"more than {MAX_STEP_GRAPHS} per-step graphs: this step's was not captured")
            return
        try:
            import json
            with self.paused():
                doc, tensors = sg.capture(kw)
            missing = [n for n, _ in tensors if n not in self._buffers and n not in self._graph_tensor_names]
            if missing:  # /buffers is fixed once the trace started
                raise RuntimeError("buffers not in /buffers: " + ", ".join(missing[:4]))
            doc.setdefault("capture", {})["step"] = self._step
            text = json.dumps(doc, separators=(",", ":"), allow_nan=False, default=lambda o: {"repr": repr(o)[:200]})
            if len(text.encode()) > 64 << 20:
                raise RuntimeError("the step's graph is %d bytes, more than a graph may hold (64 MiB)" % len(text))
        except Exception as e:  # noqa: BLE001
            reason = " ".join(f"{type(e).__name__}: {e}".split())[:180]
            self._sig_failed[sig] = reason
            self.step_graph(0, reason=reason)
            self._log_once(("steptrace",), f"step {self._step}: its own graph could not be captured ({reason}); "
                                           "its replay is refused")
            return
        n = self._n_step_graphs + 1
        if self.step_graph(n, text):
            self._n_step_graphs = n
            self._sig_graph[sig] = n

    def compile_floor(self, model, kwargs, site="output:noise_pred"):
        """Measures how far compilation alone moves the output, once: the
        forward model(**kwargs) as it runs (compiled) and again as eager code
        (compiled.eager: the original modules, torch.compiler's force_eager
        stance), under no_grad and with no hook recording; stores the mean
        |compiled - eager| of the first output tensor, with the mean |eager|,
        as an info note "compile-floor v1 site=S step=N mean_abs_diff=X
        mean_abs=Y" (docs/format.md section 6) that drift replay and drift
        compare report divergence in units of. Call it inside a step with the
        step's inputs, under the same autocast as the trainer's forward.
        Returns (mean_abs_diff, mean_abs), or None when it failed (a
        warning note says why; the job goes on)."""
        if not self._open:
            return None
        try:
            import torch

            self._note_model(model)
            with self.paused(), torch.no_grad():
                out_c = first_tensor(model(**kwargs))
                with _compiled.eager(model) as eager_model:
                    out_e = first_tensor(eager_model(**kwargs))
            if out_c is None or out_e is None:
                raise ValueError("the forward returned no tensor")
            c, e = out_c.detach().float(), out_e.detach().float()
            d = float((c - e).abs().mean().item())
            m = float(e.abs().mean().item())
            step = self._step if self._in_step else self._step + 1
            self.note(_compiled.floor_note(site, max(step, 0), d, m), 0)
            return d, m
        except Exception as e:  # noqa: BLE001
            self.note(f"compile floor not measured: {type(e).__name__}: {e}"[:255], 1)
            self._log_once(("compile_floor",), f"compile_floor failed: {type(e).__name__}: {e}")
            return None

    def _capture_failed(self, msg):
        msg = " ".join(str(msg).split())
        self.note(f"graph capture failed, recording without /graph: {msg}"[:255], 1)
        self._log_once(("capture",), f"graph capture failed, recording without /graph: {msg[:2000]}")

    def inputs(self, kwargs, pre_cast=None, **idx):
        """Every tensor the forward takes (the kwargs of capture_graph, any
        nesting), once per step: the boundary inputs hidden_states/sample,
        encoder_hidden_states, timestep as input:latents|cond|timestep
        (pre_cast: pre_cast[path] if given, else the value; post_cast: the
        value), unless rec.input() recorded them already this step; every
        other one as input:<path>:pre_cast. Returns the number recorded."""
        if not self._open or not self._in_step:
            return 0
        if self._stepg is not None:
            self._step_kwargs = kwargs  # checked against the specialised graph at the end of the step
        from .capture import ROLE_OF_KWARG, flatten_inputs, input_site
        n = 0
        try:
            mb, di = idx.get("microbatch", 0), idx.get("denoise_index", -1)
            for path, v in flatten_inputs(kwargs):
                if not (hasattr(v, "data_ptr") or hasattr(v, "__array_interface__")):
                    continue  # Python scalars are in the graph's non_tensor_inputs
                role = ROLE_OF_KWARG.get(path, "other")
                site = self._graph_sites.get(path) or input_site(path, role)
                if role != "other":
                    if (site, mb, di) in self._calls:
                        continue
                    self.input(role, (pre_cast or {}).get(path, v), v, **idx)
                    n += 1
                else:
                    n += bool(self.record(site, v, **idx))
        except Exception as e:  # noqa: BLE001
            self._fail("inputs", e)
        return n

    def set_graph(self, json_text):
        if self._open:
            b = json_text.encode()
            rc = self.lib.drift_recorder_set_graph(self._h, b, len(b), None)
            if rc:
                self._status_fail("set_graph", rc)

    def _flush_param_dtypes(self):
        for fqn, code in sorted(self._seen_dtypes.items()):
            if fqn not in self._param_dtypes:
                self.set_param_dtype(fqn, code)

    def _note_dtype_changes(self):
        changed = [(f, self._param_dtypes[f], c) for f, c in sorted(self._seen_dtypes.items())
                   if f in self._param_dtypes and self._param_dtypes[f] != c]
        if not changed:
            return
        f, a, b = changed[0]
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        self.note(f"param dtype changed: {f} gathered as {_lib.DTYPE_NAMES.get(b, b)}, "
                  f"/param_dtypes says {_lib.DTYPE_NAMES.get(a, a)}{more}", level=1)
        for f, _, c in changed:
            self._param_dtypes[f] = c

    # ------------------------------------------------------------------ hooks
    def watch(self, model, outputs=None, gathered=None, param_dtypes=True, strip_prefix=None):
        """Installs forward hooks on model (call after fully_shard):

        outputs: glob(s) over module FQNs; each matching module's first tensor
          output is recorded as "<fqn>:out" (call_index counts repeated calls
          within a step).
        param_dtypes: the dtype each parameter had when its forward ran (the
          gathered, unsharded parameter under FSDP2; the plan in force),
          written to /param_dtypes at the end of the first step; a later step
          that sees a different dtype gets a note.
        gathered: glob(s) over parameter FQNs whose gathered values are
          recorded as "param:<fqn>:gathered" (once per step).
        """
        if not self._open:
            return
        self._note_model(model)
        try:
            pre = _root_prefixes(model, strip_prefix)
            out_globs = [outputs] if isinstance(outputs, str) else list(outputs or [])
            g_globs = [gathered] if isinstance(gathered, str) else list(gathered or [])
            mods = [(strip_fqn(n, pre), m) for n, m in model.named_modules()]
            fsdp = [(n, m) for n, m in mods if _is_fsdp_module(m)]
            if param_dtypes or g_globs:
                # FSDP2 unshards in a pre-forward hook registered with
                # prepend=True, so hooks registered here run after it and see
                # the unsharded parameters of the module's own group (a
                # parameter still sharded is a DTensor: another group's).
                owners = fsdp if fsdp else [(n, m) for n, m in mods if any(True for _ in m.parameters(recurse=False))]
                for n, m in owners:
                    names = [(strip_fqn(pn, ()), pn) for pn, _ in m.named_parameters()]
                    self._hooks.append(m.register_forward_pre_hook(self._make_param_hook(n, m, names, g_globs,
                                                                                           param_dtypes)))
            for n, m in mods:
                if n and any(fnmatch.fnmatchcase(n, g) for g in out_globs):
                    self._hooks.append(m.register_forward_hook(self._make_out_hook(f"{n}:out")))
        except Exception as e:  # noqa: BLE001
            self._fail("watch", e)

    def unwatch(self):
        remove_hooks(self._hooks)

    def _make_out_hook(self, site):
        def hook(module, args, output):
            if self._ok() and self._in_step:
                t = first_tensor(output)  # the tensor module_outputs' first entry names
                if t is not None:
                    self.record(site, t)
        return _not_compiled(hook)

    def _make_param_hook(self, prefix, module, names, g_globs, want_dtypes):
        def hook(mod, args):
            if not (self._ok() and self._in_step):
                return None
            try:
                params = dict(mod.named_parameters())
                for local, pn in names:
                    p = params.get(pn)
                    if p is None or _is_dtensor(p):
                        continue
                    fqn = f"{prefix}.{local}" if prefix else local
                    if want_dtypes and fqn not in self._seen_dtypes:
                        self._seen_dtypes[fqn] = dtype_code(p)
                    if g_globs and any(fnmatch.fnmatchcase(fqn, g) for g in g_globs):
                        key = f"param:{fqn}:gathered"
                        if (key, 0, -1) not in self._calls:
                            self.record(key, p)
            except Exception as e:  # noqa: BLE001
                self._fail("param hook", e)
            return None
        return _not_compiled(hook)


def _not_compiled(fn):
    """fn run as plain Python under torch.compile (dynamo graph-breaks around
    it instead of tracing the recorder's ctypes calls); fn itself without torch."""
    torch = sys.modules.get("torch")
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    if disable is None:
        return fn
    try:
        return disable(fn)
    except Exception:  # noqa: BLE001 - an older torch
        return fn


def dtype_code_of(d):
    """drift dtype code of a name ('fp32', 'bf16', 'fp16') or a torch dtype."""
    s = str(d).replace("torch.", "")
    return {"fp32": 1, "float32": 1, "float": 1, "bf16": 2, "bfloat16": 2, "fp16": 3, "float16": 3,
            "half": 3}[s]
