"""PyTorch adapter: a model's Conv2d layers run through ucudnn plans where they are faster.

    import ucudnn.torch
    model = ucudnn.torch.convert(model, server="planner:50051", workspace_bytes="64MiB")
    ucudnn.torch.prepare(model, sample_input, wait_ms=60000)   # declare and plan every kernel
    loss = loss_fn(model(x), y); loss.backward()   # convolutions run as planned micro-batches

convert() swaps each torch.nn.Conv2d for a UcudnnConv2d in place (same parameters, buffers and
state_dict keys: a converted model saves and loads like the original; unconvert() undoes it).
Its forward, backward-data and backward-filter call the client library's shape-level C API on
PyTorch's current CUDA stream and PyTorch's own cuDNN handle (or, for CPU tensors, on the
library's CPU backend), with the
workspace a plan asks for taken from PyTorch's caching allocator for the call and given back
after it.

PyTorch's own convolution is a candidate of every plan: prepare() measures PyTorch's time for the
kernels the cluster has no such measurement of, submits it (needs a token), and the planner
chooses ucudnn's configuration only where it is faster by more than the measurements' noise.
A kernel whose plan chose the framework, or that has no plan (yet, or the server is away), runs
PyTorch's own convolution through the same path an unconverted layer takes, so a converted model
is never slower than the original beyond that noise, and a step never fails or waits for the
planner.

Under torch.compile (PyTorch 2.4 and later: torch.library custom ops) a converted layer is one op
of the graph, ucudnn::conv2d, with a fake (meta) implementation and its autograd, so compiling
breaks no graph; older PyTorch keeps the eager path.

Configuration is the C++ library's: the UCUDNN_* environment, overridden by keyword arguments
(server="h:p" is UCUDNN_SERVER, workspace_mode="total" is UCUDNN_WORKSPACE_MODE, ...), validated
when convert() is called.
"""

import collections
import contextlib
import ctypes
import hashlib
import json
import logging
import os
import platform
import re
import time
import warnings
import weakref

import torch
import torch.nn.functional as F
from torch import nn

from . import _cache
from . import _lib
from . import curve as _curve
from . import profile as _profile

_log = logging.getLogger(__name__)

__all__ = ["UcudnnConv2d", "convert", "unconvert", "kernels", "prepare", "stats", "report",
           "wait_for_plans", "compare_kernels", "framework_identity", "memory_profile",
           "liveness_limits", "step_curve", "framework_benchmarks", "framework_cudnn_handle",
           "CONFIG_KEYS"]

# Keyword arguments of convert() and the variables they set (ClientConfig's names).
CONFIG_KEYS = ("server", "token", "tls", "ca_file", "policy", "workspace_mode", "workspace_bytes",
               "algorithms", "cache_path", "compiled_plan_cache", "deadline_ms", "server_wait_ms",
               "contribute", "log_level", "disable", "framework")
# Options that a checkpoint (torch.save of a converted model) does not carry: a bearer token is a
# secret, and a server and CA file belong to the cluster that loads it, not the one that saved it.
# A loaded model takes them from the loading process's UCUDNN_* environment.
_NOT_PICKLED = ("token", "server", "ca_file", "tls")

_DATA_TYPES = {torch.float32: _lib.FLOAT, torch.float16: _lib.HALF, torch.bfloat16: _lib.BFLOAT16}
_TORCH_DTYPES = {value: key for key, value in _DATA_TYPES.items()}

# ---- options -------------------------------------------------------------------------------------
_CHOICES = {
    "policy": ("undivided", "power_of_two", "all"),
    "workspace_mode": ("per_kernel", "total", "total_shared", "total_sum"),
    "log_level": ("trace", "debug", "info", "warn", "warning", "error", "critical", "off"),
    "algorithms": ("all", "legacy", "engines"),
}
_BOOLEANS = ("tls", "contribute", "disable")
# The library's ranges (client/src/config.cc).
_MILLISECONDS = {"deadline_ms": (1, 3600000), "server_wait_ms": (0, 600000)}
_MAX_WORKSPACE_BYTES = 1 << 40
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B|[KMGT])?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KIB": 1 << 10, "KB": 1000, "M": 1 << 20,
               "MIB": 1 << 20, "MB": 1000**2, "G": 1 << 30, "GIB": 1 << 30, "GB": 1000**3,
               "T": 1 << 40, "TIB": 1 << 40, "TB": 1000**4}


def parse_bytes(value, what="workspace_bytes"):
    """64 * 2**20 from 64 * 2**20, "64MiB", "64M" or "67108864"; ValueError naming `what`."""
    if isinstance(value, bool):
        raise ValueError(f"ucudnn.torch: {what} must be a byte count, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"ucudnn.torch: {what} must be >= 0, got {value}")
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"ucudnn.torch: {what}={value!r} is not a size (e.g. 67108864, "
                         "'64MiB', '1GiB')")
    unit = (match.group(2) or "").upper()
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def _check_option(key, value):
    """The option's text as the library reads it; ValueError naming what is wrong."""
    if key in _BOOLEANS:
        if isinstance(value, bool):
            return "1" if value else "0"
        if str(value).lower() in ("0", "1", "true", "false", "yes", "no", "on", "off"):
            return str(value)
        raise ValueError(f"ucudnn.torch: option '{key}' must be a bool, got {value!r}")
    text = str(value)
    if ";" in text or "\n" in text or "\r" in text:
        raise ValueError(f"ucudnn.torch: option '{key}' must not contain ';' or a line break")
    if key in _CHOICES and text.lower() not in _CHOICES[key]:
        raise ValueError(f"ucudnn.torch: {key}={value!r} is not one of "
                         f"{', '.join(_CHOICES[key])}")
    if key == "workspace_bytes":
        size = parse_bytes(value)
        if size > _MAX_WORKSPACE_BYTES:
            raise ValueError(f"ucudnn.torch: workspace_bytes={value!r} is over 1 TiB")
        return str(size)
    if key in _MILLISECONDS:
        low, high = _MILLISECONDS[key]
        try:
            milliseconds = int(text)
        except ValueError:
            milliseconds = low - 1
        if not low <= milliseconds <= high:
            raise ValueError(f"ucudnn.torch: {key} must be an int in [{low}, {high}], got "
                             f"{value!r}")
    if key == "framework" and (not text or len(text) > 128 or
                               any(not " " <= ch <= "~" for ch in text)):
        raise ValueError(f"ucudnn.torch: framework must be 1 to 128 printable ASCII characters, "
                         f"got {value!r}")
    return text


def _options(config):
    """'UCUDNN_X=v;...' from keyword arguments; a clear error for an unknown or bad one."""
    entries = []
    for key, value in sorted(config.items()):
        if key not in CONFIG_KEYS:
            raise TypeError(f"ucudnn.torch: unknown option '{key}' (known: {', '.join(CONFIG_KEYS)})")
        entries.append(f"UCUDNN_{key.upper()}={_check_option(key, value)}")
    return ";".join(entries)


def framework_identity():
    """This process's PyTorch as the planner knows it: its version and whether cuDNN benchmarks
    (what it chooses depends on it). Timings of PyTorch's own convolution are shared by every job
    with the same identity on the same device (the device fingerprint holds the cuDNN version)."""
    mode = "benchmark" if torch.backends.cudnn.benchmark else "heuristic"
    if torch.backends.cudnn.deterministic:
        mode += "-deterministic"
    return f"torch-{torch.__version__}/{mode}"


_INFINITY = float("inf")
# prepare()'s budgets (its docstring says what each is).
_BUDGETS = ("auto", "fixed", "liveness", "allowance")


# ---- the runtime of one convert() call -------------------------------------------------------------
# at::native::getCudnnHandle(), exported by libtorch_cuda (ATen/cudnn/Handle.h) since PyTorch 1.x.
_GET_CUDNN_HANDLE = "_ZN2at6native14getCudnnHandleEv"
_CUDNN_HANDLE_CHOICES = ("framework", "own")
_MAIN_CUDNN = re.compile(r"libcudnn\.so(\.\d+)*$")


def _cudnn_instances(maps="/proc/self/maps"):
    """The distinct cuDNN libraries (libcudnn.so*, not its sub-libraries) mapped into this
    process, by real path; None where that cannot be read (not Linux)."""
    try:
        with open(maps) as f:
            fields = [line.split(None, 5) for line in f]
    except OSError:
        return None
    paths = {f[5].strip() for f in fields if len(f) == 6}
    return {os.path.realpath(p) for p in paths if _MAIN_CUDNN.search(os.path.basename(p))}


def framework_cudnn_handle():
    """PyTorch's cuDNN handle of the calling thread on the current device, as an int, for the
    library to run its plans on (it then adds no cuDNN handle of its own to the device: measured
    on an H100, docs/torch-models.md); None where it cannot be borrowed safely: no CUDA build of
    PyTorch loaded, no such symbol, or not exactly one cuDNN library in the process (a handle of
    one instance passed to another would crash). The handle is the calling thread's: the
    library's calls from autograd's thread use it while that thread waits on the backward pass,
    as a training loop does; a job whose thread runs other cuDNN work of PyTorch's meanwhile
    converts with cudnn_handle="own"."""
    if not (torch.cuda.is_available() and torch.backends.cudnn.is_available()):
        return None
    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so")
    try:
        torch_cuda = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)  # only if loaded
        get = getattr(torch_cuda, _GET_CUDNN_HANDLE)
    except (OSError, AttributeError):
        return None
    instances = _cudnn_instances()
    if instances is None or len(instances) != 1:
        return None
    get.argtypes = []
    get.restype = ctypes.c_void_p
    return get() or None


class Runtime:
    """The contexts of one convert() call: one per device, made at its first convolution."""

    def __init__(self, config, workspace_limit=0, min_layer_gain_us=None,
                 cudnn_handle="framework"):
        self.config = dict(config)
        self.options = _options(self.config)
        self.workspace_limit = workspace_limit
        # "framework": the contexts run on PyTorch's cuDNN handle where it can be borrowed
        # (framework_cudnn_handle()); "own": each makes its own.
        self.cudnn_handle = cudnn_handle
        self.min_layer_gain_us = (MIN_LAYER_GAIN_US if min_layer_gain_us is None
                                  else min_layer_gain_us)
        # PyTorch benchmarks its own convolution at each job's first calls: a layer whose plans
        # tie with it runs them (decide_layer), and no benchmark of its own runs in the job.
        self.framework_benchmarks = framework_benchmarks(self.config.get("framework") or "")
        self.library = _lib.load()
        self._contexts = {}
        # prepare(): convolutions are recorded, not run through the library.
        self.recording = None
        # memory_profile(): PyTorch's own convolutions, the memory in use at each op's start.
        self.profiling = None
        # trace_memory(): the steps' own ops, the memory in use at each one's start.
        self.tracing = None
        # Calls whose plan's workspace the allocator could not give (_workspace_out_of_memory).
        self.workspace_out_of_memory = 0
        # Calls that ran PyTorch's own convolution without asking the library (the route was
        # known): [no plan, framework chosen]. stats() adds them to the library's counters.
        self.skipped = [0, 0]
        # Kernels (shape tuples) that run the framework by this process's own measurement, when
        # the cluster could not take it (no token or server): not shared, but never slower.
        self.local_framework = set()
        # prepare(budget="liveness"): each kernel's own workspace limit (shape tuple -> bytes).
        self.kernel_limits = {}
        # Limits lowered where a plan's workspace did not fit (_Conv._workspace_out_of_memory),
        # over any budget, until the next prepare().
        self.lowered_limits = {}
        # Every converted layer's _ConvCache by id: a lowered limit reaches the layers of that
        # shape (a dict is not hashable, so no WeakSet).
        self.conv_caches = weakref.WeakValueDictionary()
        # Times the job's steps changed the liveness budgets (_StepBudget.check).
        self.budget_replans = 0
        # prepare(budget="allowance"): the limit of every kernel not in kernel_limits.
        self.budget_limit = None
        # prepare(): the step is host-bound (is_host_bound): a layer's plans save nothing of it.
        self.host_bound = False
        # Layers on the native route (route_native) and the earliest time one is due back.
        self.native_routed = []
        self.native_until = _INFINITY

    def workspace_mode(self):
        """The mode the library runs in: convert()'s option, else UCUDNN_WORKSPACE_MODE, else
        per_kernel."""
        mode = self.config.get("workspace_mode") or os.environ.get("UCUDNN_WORKSPACE_MODE")
        return (mode or "per_kernel").strip().lower()

    def has_server(self):
        """Whether a planner server is configured (convert()'s option, else UCUDNN_SERVER): plans
        and PyTorch's times shared with the cluster."""
        server = self.config.get("server")
        return bool(str(server if server is not None else
                        os.environ.get("UCUDNN_SERVER", "")).strip())

    def limit_of(self, shape):
        """The workspace limit `shape`'s kernel is planned with."""
        default = self.workspace_limit if self.budget_limit is None else self.budget_limit
        key = _shape_key(shape)
        limit = self.kernel_limits.get(key, default)
        lowered = self.lowered_limits.get(key)
        # 0 is the configured limit, whatever it is: a lowered one replaces it.
        return lowered if lowered is not None and (limit == 0 or lowered < limit) else limit

    def context(self, device):
        key = (device.type, device.index)
        context = self._contexts.get(key)
        if context is None:
            if device.type == "cuda":
                with torch.cuda.device(device):
                    borrowed = (framework_cudnn_handle() if self.cudnn_handle == "framework"
                                else None)
                    context = _lib.Context(self.library, "cudnn", self.options, borrowed)
            elif device.type == "cpu":
                context = _lib.Context(self.library, "cpu", self.options)
            else:
                return None
            self._contexts[key] = context
        return context

    def contexts(self):
        return list(self._contexts.values())

    def route_native(self, module, until):
        """`module`'s calls run nn.Conv2d's own forward, unasked and uncounted, until `until`
        (the step's root hook or restore_native() brings it back): a layer whose every op runs
        PyTorch's own then costs a host-bound step exactly what it costs unconverted."""
        module.__class__ = _NativeRoutedConv2d
        self.native_routed.append(module)
        self.native_until = min(self.native_until, until)

    def restore_native(self):
        """Every layer on the native route back on the adapter's, which asks the library again
        at its next call (at the routes' recheck; before prepare() records or profiles a step)."""
        for module in self.native_routed:
            if type(module) is _NativeRoutedConv2d:  # not unconverted meanwhile
                module.__class__ = UcudnnConv2d
        self.native_routed = []
        self.native_until = _INFINITY

    # A converted model copied shares its runtime (the library's sessions are per process), and
    # one pickled whole (torch.save(model)) gets a new runtime when loaded, without the options
    # that belong to the saving process's cluster (_NOT_PICKLED).
    def __deepcopy__(self, memo):
        return self

    def __getstate__(self):
        kept = {k: v for k, v in self.config.items() if k not in _NOT_PICKLED}
        return {"config": kept, "workspace_limit": self.workspace_limit,
                "min_layer_gain_us": self.min_layer_gain_us, "cudnn_handle": self.cudnn_handle}

    def __setstate__(self, state):
        self.__init__(state.get("config", {}), state["workspace_limit"],
                      state.get("min_layer_gain_us"), state.get("cudnn_handle", "framework"))


_SUCCESS = _lib.SUCCESS
_CHANNELS_LAST = torch.channels_last

# Routes of one op of one signature, as last learnt from the library.
_ROUTE_ASK = 0        # unknown: call the library
_ROUTE_PLAN = 1       # ucudnn's plan runs
_ROUTE_NO_PLAN = 2    # no plan now: PyTorch's own, ask again after _RECHECK_NO_PLAN_S
_ROUTE_FRAMEWORK = 3  # the plan chose PyTorch's own: ask again after _RECHECK_FRAMEWORK_S
_RECHECK_NO_PLAN_S = 0.25  # plans arrive in the background: pick them up soon
_RECHECK_FRAMEWORK_S = 5.0  # re-planned only when timings change
# Within this share of each other PyTorch's time and ucudnn's are a tie: the planner's
# kFrameworkMargin, applied here where the decision cannot be shared or is read back.
FRAMEWORK_MARGIN = 0.03


def framework_benchmarks(identity):
    """The planner's FrameworkBenchmarks: whether the framework of `identity` (framework_identity())
    benchmarks its own convolution in every job (its mode, after the last '/', begins with
    "benchmark"). Ties then go to ucudnn, whose plans spare the job that benchmark."""
    slash = identity.rfind("/")
    return slash >= 0 and identity[slash + 1:].startswith("benchmark")


def _beats_framework(ucudnn_ms, framework_ms, benchmarks=False):
    """The planner's BeatsFramework: ucudnn's time under PyTorch's less the margin, or, where ties
    go to ucudnn (`benchmarks`), under PyTorch's plus it (PyTorch's own kept only where faster
    than ucudnn's by the margin)."""
    if benchmarks:
        return ucudnn_ms < framework_ms / (1 - FRAMEWORK_MARGIN)
    return ucudnn_ms < framework_ms * (1 - FRAMEWORK_MARGIN)


# convert()'s default min_layer_gain_us: what the library's path costs on the host per layer and
# step over PyTorch's own (the autograd Function, the ctypes calls, the workspace): 38 us on the
# H100 machine (bench/torch_adapter.py overhead, docs/torch-models.md), 17 us on a CPU.
MIN_LAYER_GAIN_US = 40.0

# A step is host-bound when its device work ends within this share of the step after the host
# has launched its last kernel: the device waits for the host, so a plan's device-time saving
# does not shorten the step while its path's host cost lengthens it (step_is_host_bound()). On
# the H100 machine (docs/torch-models.md, calls 21-23): EfficientNet-B0 AMP 3-15% (host-bound: its
# planned layer cost its step), ResNet-50 AMP and ConvNeXt-T 50-52%.
HOST_BOUND_LAG = 0.25
# A step with cuDNN's heuristic choices within this share of the step a host-bound record was
# measured on keeps them (heuristics_keep_pace): the run-to-run spread of a device-bound step.
HEURISTICS_MARGIN = 0.02


def is_host_bound(host_s, total_s):
    """Whether a step that took `host_s` to launch and `total_s` to finish on the device is
    host-bound (HOST_BOUND_LAG)."""
    return total_s > 0 and (total_s - host_s) < HOST_BOUND_LAG * total_s


# What the hot path asks PyTorch, through the cheapest call each version has: these run per
# convolution call, and the public wrappers cost microseconds (torch.cuda.current_stream makes a
# Stream object, torch.backends.cudnn.allow_tf32 goes through a module property).
_allow_tf32 = getattr(torch._C, "_get_cudnn_allow_tf32", None) or (
    lambda: torch.backends.cudnn.allow_tf32)
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)
_current_device = getattr(torch._C, "_cuda_getDevice", None) or (
    lambda: torch.cuda.current_device())
_monotonic = time.monotonic


def _is_channels_last(t):
    return not t.is_contiguous() and t.is_contiguous(memory_format=_CHANNELS_LAST)


def _channels_last_call(x, weight):
    """PyTorch's cuDNN convolution's layout rule: channels-last when either operand is (the
    layout of a call's outputs, which the custom op's fake implementation must predict too)."""
    return _is_channels_last(x) or _is_channels_last(weight)


def _math_mode(dtype, is_cuda, allow_tf32):
    if dtype != torch.float32:
        return _lib.MATH_TENSOR_OP
    # PyTorch's cuDNN math for fp32: TF32 allowed (default math) or strict fp32 (FMA).
    return _lib.MATH_FMA if is_cuda and not allow_tf32 else _lib.MATH_DEFAULT


def _shape_key(shape):
    return tuple(getattr(shape, name) for name, _ in _lib.ConvShape._fields_)


class _Conv:
    """One convolution of one module at one input signature (shape, dtype, device, layout, math):
    its geometry (padding already symmetric), output size, and per op the library's kernel
    handle, the route last learnt and the workspace its plan needs. Made once per signature
    (_ConvCache), so that a call reads no shape and builds no ctypes structure."""

    __slots__ = ("runtime", "context", "run_kernel", "device", "index", "stride", "padding",
                 "dilation", "groups", "memory_format", "out_size", "dims", "data_type", "layout",
                 "math", "kernels", "routes", "recheck", "workspace_bytes", "local", "ops",
                 "framework_layer", "layer_recheck")

    def __init__(self, runtime, context, x, weight, dtype, geometry, channels_last, math):
        self.runtime, self.context = runtime, context
        self.run_kernel = runtime.library.ShapeKernelRun
        self.device = x.device
        self.index = x.get_device() if x.is_cuda else -1
        self.stride, self.padding, self.dilation, self.groups = geometry
        self.memory_format = _CHANNELS_LAST if channels_last else torch.contiguous_format
        self.layout = _lib.NHWC if channels_last else _lib.NCHW
        self.data_type = _DATA_TYPES[dtype]  # the call's, after autocast
        self.math = math
        n, c, h, w = x.shape
        k, _, r, s = weight.shape
        self.dims = (n, c, h, w, k, r, s)
        self.out_size = _output_size(self.dims, self.stride, self.padding, self.dilation)
        self.kernels = [None, None, None]  # by op
        self.routes = [_ROUTE_ASK, _ROUTE_ASK, _ROUTE_ASK]
        self.recheck = [0.0, 0.0, 0.0]
        self.workspace_bytes = [0, 0, 0]
        self.local = [False, False, False]
        self.ops = None  # the ops a training step runs (record(), prepare())
        # The layer's plans save less than the library's path costs on the host: the whole
        # layer runs PyTorch's own, as unconverted (decide_layer(), until layer_recheck).
        self.framework_layer = False
        self.layer_recheck = 0.0

    def shape(self, op):
        """The ucudnnConvShape_t of `op`."""
        return _lib.ConvShape(op, *self.dims, self.padding[0], self.padding[1], self.stride[0],
                              self.stride[1], self.dilation[0], self.dilation[1], self.groups,
                              self.data_type, self.layout, self.math)

    def _routed(self, op, now):
        """Whether `op` runs PyTorch's own without asking the library (its route, until its
        recheck time; past it the library is asked again and sets the route anew)."""
        return self.routes[op] >= _ROUTE_NO_PLAN and now < self.recheck[op]

    def _count_routed(self, op):
        self.runtime.skipped[self.routes[op] - _ROUTE_NO_PLAN] += 1

    def framework_now(self, op):
        """True when `op` runs PyTorch's own convolution without asking the library now."""
        if not self._routed(op, _monotonic()):
            return False
        self._count_routed(op)
        return True

    def framework_until(self, need_x, need_w):
        """When every op of this call runs PyTorch's own now (each counted as such): until when
        that holds without asking the library (the layer's decision or the ops' routes, till
        their recheck); else 0.0."""
        ops = (_lib.FORWARD,) + ((_lib.BACKWARD_DATA,) if need_x else ()) + (
            (_lib.BACKWARD_FILTER,) if need_w else ())
        now = _monotonic()
        if now >= self.layer_recheck:
            self.decide_layer(ops, now)
        if self.framework_layer:
            self.runtime.skipped[1] += len(ops)
            return self.layer_recheck
        if not all(self._routed(op, now) for op in ops):
            return 0.0
        for op in ops:
            self._count_routed(op)
        return min(self.recheck[op] for op in ops)

    def run(self, op, a, b, out):
        """Runs `op` through the library into `out` (every operand dense in the signature's
        layout): True when its plan ran, False when the caller must run PyTorch's own."""
        kernel = self.kernels[op] or self._declare(op)
        if self.local[op]:  # this process measured PyTorch's own faster (not shared)
            self._route(op, _ROUTE_FRAMEWORK)
            self._count_routed(op)
            return False
        index = self.index
        stream = None
        if index >= 0:
            if _current_device() != index:
                # cuDNN runs on the current device: the context's (the tensors') for the call.
                with torch.cuda.device(index):
                    return self.run(op, a, b, out)
            stream = _raw_stream(index)
        needed = self.workspace_bytes[op]
        tracing = self.runtime.tracing
        if tracing is not None:
            tracing.add(self, op, tracing.reader(), 0)
        # From PyTorch's caching allocator for this call, on its stream: a large workspace late
        # in the backward pass never sits in memory at the step's peak.
        try:
            workspace = torch.empty(needed, dtype=torch.uint8,
                                    device=self.device) if needed else None
        except _OUT_OF_MEMORY:
            return self._workspace_out_of_memory(op, needed)
        status = self.run_kernel(kernel, a.data_ptr(), b.data_ptr(), out.data_ptr(), stream,
                                 workspace.data_ptr() if needed else None, needed)
        if status == _SUCCESS:
            self.routes[op] = _ROUTE_PLAN
            return True
        return self._not_run(op, status, kernel, a, b, out, stream)

    def _declare(self, op):
        shape = self.shape(op)
        kernel = self.kernels[op] = self.context.kernel(shape, self.runtime.limit_of(shape))
        self.local[op] = bool(self.runtime.local_framework) and (
            _shape_key(shape) in self.runtime.local_framework)
        return kernel

    def _route(self, op, route):
        self.routes[op] = route
        delay = _RECHECK_FRAMEWORK_S if route == _ROUTE_FRAMEWORK else _RECHECK_NO_PLAN_S
        self.recheck[op] = _monotonic() + delay

    def _not_run(self, op, status, kernel, a, b, out, stream):
        """run() past a call that did not run the plan: once more with the workspace the plan
        needs (its first call, or a plan that changed), else the route to PyTorch's own."""
        if status == _lib.WORKSPACE_TOO_SMALL:
            needed = self.context.kernel_workspace_size(kernel) or 0
            self.workspace_bytes[op] = needed
            try:
                workspace = torch.empty(needed, dtype=torch.uint8, device=self.device)
            except _OUT_OF_MEMORY:
                return self._workspace_out_of_memory(op, needed)
            status = self.run_kernel(kernel, a.data_ptr(), b.data_ptr(), out.data_ptr(), stream,
                                     workspace.data_ptr(), needed)
            if status == _SUCCESS:
                self.routes[op] = _ROUTE_PLAN
                return True
        if status == _lib.FRAMEWORK:
            self._route(op, _ROUTE_FRAMEWORK)
            return False
        # WORKSPACE_TOO_SMALL again: the plan changed meanwhile (not counted as a fallback).
        if status in (_lib.NO_PLAN, _lib.WORKSPACE_TOO_SMALL):
            self._route(op, _ROUTE_NO_PLAN)
            return False
        self.runtime.library.check("ucudnnShapeKernelRun", status)  # raises
        return False

    def _workspace_out_of_memory(self, op, needed):
        """run() when PyTorch's allocator cannot give the plan's `needed` bytes of workspace (the
        memory in use at this point of the step is more than the kernel's limit assumed: a
        profile that was not the job's step, a memory cap set after prepare()): False, this call
        runs PyTorch's own (which finds an algorithm within the memory left, as unconverted), and
        the kernel is planned again at a smaller limit (lowered_limit), so a plan's workspace
        never fails a step. A RuntimeWarning says so; stats() counts them
        ("workspace_out_of_memory")."""
        shape = self.shape(op)
        runtime = self.runtime
        current = runtime.limit_of(shape)
        # 0 is the configured limit (not none): then the workspace that failed is the bound.
        limit = lowered_limit(min(needed, current) if current else needed)
        runtime.workspace_out_of_memory += 1
        key = _shape_key(shape)
        runtime.lowered_limits[key] = limit
        for cache in list(runtime.conv_caches.values()):  # the layers of this shape, at once
            for conv in cache.values():
                if conv is not None:
                    conv.forget_kernel(key)
        self.forget_kernel(key)  # this layer too where it is not registered (a copy)
        in_use = (f" ({torch.cuda.memory_allocated(self.device)} bytes in use)"
                  if self.device.type == "cuda" else "")
        warnings.warn(f"ucudnn.torch: a {needed}-byte workspace did not fit{in_use}; op {op} of "
                      f"{self.dims} planned again within {limit} bytes", RuntimeWarning)
        self._route(op, _ROUTE_NO_PLAN)
        return False

    def forget_kernel(self, key):
        """Its op whose kernel is `key` (a shape key) declared anew at its next call (another
        layer's plan of that shape did not find its workspace: its limit was lowered)."""
        for op in range(3):
            if self.kernels[op] is not None and _shape_key(self.shape(op)) == key:
                self.kernels[op] = None
                self.workspace_bytes[op] = 0
                self.routes[op] = _ROUTE_ASK

    def record(self, needs_x, needs_w):
        """prepare(): the kernels this convolution will run in a training step."""
        ops = [_lib.FORWARD]
        if needs_x:
            ops.append(_lib.BACKWARD_DATA)
        if needs_w:
            ops.append(_lib.BACKWARD_FILTER)
        self.ops = tuple(ops)
        recorded = self.runtime.recording.setdefault(self.device, [])
        recorded.extend(self.shape(op) for op in ops)

    def forget_kernels(self):
        """Its kernels declared anew at the next call (prepare(): the limits changed), with the
        workspace their plans need learnt anew (a plan at a smaller limit needs less)."""
        self.kernels = [None, None, None]
        self.workspace_bytes = [0, 0, 0]
        self.routes = [_ROUTE_ASK, _ROUTE_ASK, _ROUTE_ASK]
        self.local = [False, False, False]
        self.framework_layer = False
        self.layer_recheck = 0.0

    def decide_layer(self, ops, now):
        """Whether the layer runs PyTorch's own whole: its plans for `ops` save only device time
        of a step that prepare() found host-bound, or, where PyTorch does not benchmark in the
        job, save less per step than the runtime's min_layer_gain_us (the library's host cost
        per layer). Where it benchmarks (Runtime.framework_benchmarks) a layer with a plan keeps
        it in a step that is not host-bound: the planner gave it the ties, whose plans spare the
        job PyTorch's benchmark, and the library's host cost is hidden behind the device's work.
        By the cluster's timings and rank 0's measurement, so every rank decides alike;
        undecided (the per-op routes) while a plan or PyTorch's time is missing."""
        gain, planned = self.plan_gain_ms(ops)
        runtime = self.runtime
        if gain is None or gain == _INFINITY:
            self.framework_layer = False
        elif runtime.host_bound:
            # The device's saving does not reach a host-bound step.
            self.framework_layer = runtime.min_layer_gain_us > 0
        elif runtime.framework_benchmarks and planned and runtime.min_layer_gain_us != _INFINITY:
            self.framework_layer = False
        else:
            self.framework_layer = gain * 1e3 < runtime.min_layer_gain_us
        self.layer_recheck = now + (_RECHECK_NO_PLAN_S if gain is None else _RECHECK_FRAMEWORK_S)

    def plan_gain_ms(self, ops):
        """(what this layer's plans of `ops` save per call against PyTorch's own, device time,
        negative for ties that went to ucudnn; how many of `ops` run a plan), the saving None
        while one has no plan or no PyTorch time yet, infinite where a plan is kept for memory."""
        gain = 0.0
        planned = 0
        for op in ops:
            kernel = self.kernels[op] or self._declare(op)
            info = self.context.kernel_info(kernel)
            if info["state"] == "framework" or self.local[op]:
                continue
            if info["state"] != "planned" or info["framework_ms"] <= 0:
                return None, planned
            planned += 1
            if not _beats_framework(info["predicted_ms"], info["framework_ms"],
                                    self.runtime.framework_benchmarks):
                # The plan was chosen though PyTorch's own is faster: PyTorch's needs more
                # workspace than the kernel's limit. The layer keeps its plans.
                return _INFINITY, planned
            gain += info["framework_ms"] - info["predicted_ms"]
        return gain, planned


# What PyTorch raises when its allocator has not the bytes (torch.OutOfMemoryError from 2.1,
# torch.cuda.OutOfMemoryError from 1.13, a RuntimeError before).
_OUT_OF_MEMORY = (getattr(torch, "OutOfMemoryError", None) or
                  getattr(torch.cuda, "OutOfMemoryError", None) or RuntimeError)


def lowered_limit(failed):
    """A kernel's limit after a workspace of `failed` bytes (or its limit, if smaller) did not
    fit: a quarter of it rounded down to a power of two, at least no workspace
    (curve.NO_WORKSPACE), so that a kernel reaches a plan that fits in a few steps, each of
    which costs the allocator a synchronizing retry."""
    quarter = failed // 4
    return max(_curve.NO_WORKSPACE, 1 << (quarter.bit_length() - 1) if quarter > 0 else 0)


def _output_size(dims, stride, padding, dilation):
    n, _, h, w, k, r, s = dims
    sizes = [n, k]
    for i, extent in enumerate((h, w)):
        span = dilation[i] * ((r, s)[i] - 1) + 1
        sizes.append((extent + 2 * padding[i] - span) // stride[i] + 1)
    return sizes


class _ConvCache(dict):
    """A module's _Conv per input signature. Neither copied nor pickled (its kernel handles belong
    to this process's contexts): a copy starts empty."""

    MAX_SIGNATURES = 64  # beyond this (inputs of ever new sizes) it starts over

    def __reduce__(self):
        return (_ConvCache, ())


# ---- the three ops -----------------------------------------------------------------------------
def _forward(x, weight, conv):
    """y = conv(x, weight) without bias: the plan's, or PyTorch's own."""
    if not conv.framework_now(_lib.FORWARD):
        if conv.layout == _lib.NCHW:
            y = x.new_empty(conv.out_size)  # the cheapest allocation call
        else:
            y = torch.empty(conv.out_size, dtype=x.dtype, device=conv.device,
                            memory_format=_CHANNELS_LAST)
        if conv.run(_lib.FORWARD, x, weight, y):
            return y
    y = F.conv2d(x, weight, None, conv.stride, conv.padding, conv.dilation, conv.groups)
    # Same strides as the plan's output (and the fake op's under torch.compile).
    return y if y.is_contiguous(memory_format=conv.memory_format) else y.contiguous(
        memory_format=conv.memory_format)


def _backward(conv, x, weight, grad_y, need_x, need_w):
    """(grad_x, grad_w), each None when not needed: the plans', PyTorch's own for the rest."""
    grad_y = grad_y.contiguous(memory_format=conv.memory_format)
    grad_x = grad_w = None
    if need_x and not conv.framework_now(_lib.BACKWARD_DATA):
        grad_x = torch.empty_like(x)  # x is dense in the signature's layout: so is this
        if not conv.run(_lib.BACKWARD_DATA, grad_y, weight, grad_x):
            grad_x = None
    if need_w and not conv.framework_now(_lib.BACKWARD_FILTER):
        grad_w = torch.empty_like(weight)
        if not conv.run(_lib.BACKWARD_FILTER, x, grad_y, grad_w):
            grad_w = None
    own_x = need_x and grad_x is None
    own_w = need_w and grad_w is None
    if own_x or own_w:
        fallback_x, fallback_w = _torch_backward(conv, x, weight, grad_y, own_x, own_w)
        grad_x = fallback_x if own_x else grad_x
        grad_w = fallback_w if own_w else grad_w
    return grad_x, grad_w


def _torch_backward(conv, x, weight, grad_y, need_x, need_w):
    """PyTorch's own convolution backward for the gradients the library did not compute."""
    if hasattr(torch.ops.aten, "convolution_backward"):
        grad_x, grad_w, _ = torch.ops.aten.convolution_backward(
            grad_y, x, weight, None, list(conv.stride), list(conv.padding), list(conv.dilation),
            False, [0, 0], conv.groups, [need_x, need_w, False])
        return grad_x, grad_w
    grad_x = grad_w = None  # PyTorch without aten::convolution_backward (before 1.11)
    if need_x:
        grad_x = torch.nn.grad.conv2d_input(x.shape, weight, grad_y, conv.stride, conv.padding,
                                            conv.dilation, conv.groups)
    if need_w:
        grad_w = torch.nn.grad.conv2d_weight(x, weight.shape, grad_y, conv.stride, conv.padding,
                                             conv.dilation, conv.groups)
    return grad_x, grad_w


class _Conv2dFunction(torch.autograd.Function):
    """conv2d without bias (the bias is added by PyTorch outside): forward, backward-data and
    backward-filter through the library, PyTorch's own for an op the library declines."""

    @staticmethod
    def forward(ctx, x, weight, conv):
        ctx.conv = conv
        ctx.save_for_backward(x, weight)
        return _forward(x, weight, conv)

    @staticmethod
    def backward(ctx, grad_y):
        if torch.is_grad_enabled():  # backward(create_graph=True): these are not differentiable
            return _once_differentiable_backward(ctx, grad_y)
        return _function_backward(ctx, grad_y)


def _function_backward(ctx, grad_y):
    x, weight = ctx.saved_tensors
    need_x, need_w, _ = ctx.needs_input_grad
    grad_x, grad_w = _backward(ctx.conv, x, weight, grad_y, need_x, need_w)
    return grad_x, grad_w, None


_once_differentiable_backward = torch.autograd.function.once_differentiable(_function_backward)


if hasattr(torch, "get_autocast_dtype"):  # PyTorch >= 2.4: one API for every device type
    def _autocast_dtype(is_cuda):
        """The dtype autocast casts a convolution to on the device, or None when it is off."""
        kind = "cuda" if is_cuda else "cpu"
        return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None
else:
    def _autocast_dtype(is_cuda):
        if is_cuda:
            return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None
        return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None


def _cast_operands(cast, input, weight, bias):
    """What autocast does for F.conv2d, done here for the library's path: the floating operands in
    the autocast dtype `cast` (None: as they are)."""
    if cast is None:
        return input, weight, bias
    return input.to(cast), weight.to(cast), bias.to(cast) if bias is not None else None


def _same_padding(kernel, dilation):
    """padding='same' as PyTorch does it: the symmetric part per dimension, and the extra row or
    column (when the total is odd) that goes at the end through F.pad."""
    symmetric, extra = [], []
    for size, dil in zip(kernel, dilation):
        total = dil * (size - 1)
        symmetric.append(total // 2)
        extra.append(total - 2 * (total // 2))
    return tuple(symmetric), extra


# ---- torch.compile: the layer as a custom op (PyTorch >= 2.4) -------------------------------------
# Converted modules by key, for the custom op's implementation to find its module's signature
# cache (an op's arguments are tensors and numbers).
_MODULES = weakref.WeakValueDictionary()
_next_key = [0]


def _module_key(module):
    key = _next_key[0] = _next_key[0] + 1
    _MODULES[key] = module
    return key


_custom_ops = None  # not tried yet; then torch.ops.ucudnn, or False (this PyTorch has none)


def _register_custom_ops():
    """ucudnn::conv2d and ucudnn::conv2d_backward with fake implementations and autograd; None
    where this PyTorch has no torch.library.register_fake / register_autograd (before 2.4)."""
    library = torch.library
    if not (hasattr(library, "register_fake") and hasattr(library, "register_autograd")):
        return None
    lib = library.Library("ucudnn", "FRAGMENT")
    geometry = "int[2] stride, int[2] padding, int[2] dilation, int groups, int key"
    lib.define(f"conv2d(Tensor x, Tensor weight, {geometry}) -> Tensor")
    lib.define(f"conv2d_backward(Tensor grad_y, Tensor x, Tensor weight, {geometry}, "
               "bool need_x, bool need_w) -> (Tensor, Tensor)")

    def conv_of(x, weight, padding, key):
        module = _MODULES.get(key)
        # The op's operands are cast already (the caller casts for autocast): no cast here.
        return None if module is None else module._ucudnn_conv_of(x, weight, tuple(padding),
                                                                  None)

    def conv2d(x, weight, stride, padding, dilation, groups, key):
        conv = conv_of(x, weight, padding, key)
        if conv is None:
            memory_format = _op_memory_format(x, weight)
            y = F.conv2d(x, weight, None, stride, padding, dilation, groups)
            return y.contiguous(memory_format=memory_format)
        return _forward(x.contiguous(memory_format=conv.memory_format),
                        weight.contiguous(memory_format=conv.memory_format), conv)

    def conv2d_backward(grad_y, x, weight, stride, padding, dilation, groups, key, need_x,
                        need_w):
        conv = conv_of(x, weight, padding, key)
        memory_format = _op_memory_format(x, weight)
        x = x.contiguous(memory_format=memory_format)
        weight = weight.contiguous(memory_format=memory_format)
        if conv is None:
            grad_x, grad_w, _ = torch.ops.aten.convolution_backward(
                grad_y, x, weight, None, stride, padding, dilation, False, [0, 0], groups,
                [need_x, need_w, False])
        else:
            grad_x, grad_w = _backward(conv, x, weight, grad_y, need_x, need_w)
        return (_or_empty(grad_x, x, memory_format), _or_empty(grad_w, weight, memory_format))

    for device in ("CPU", "CUDA"):
        lib.impl("conv2d", conv2d, device)
        lib.impl("conv2d_backward", conv2d_backward, device)

    @library.register_fake("ucudnn::conv2d", lib=lib)
    def conv2d_fake(x, weight, stride, padding, dilation, groups, key):
        n, c, h, w = x.shape
        k, _, r, s = weight.shape
        size = _output_size((n, c, h, w, k, r, s), stride, padding, dilation)
        return x.new_empty(size).contiguous(memory_format=_op_memory_format(x, weight))

    @library.register_fake("ucudnn::conv2d_backward", lib=lib)
    def conv2d_backward_fake(grad_y, x, weight, stride, padding, dilation, groups, key, need_x,
                             need_w):
        memory_format = _op_memory_format(x, weight)
        grad_x = torch.empty_like(x, memory_format=memory_format) if need_x else x.new_empty(0)
        grad_w = (torch.empty_like(weight, memory_format=memory_format) if need_w else
                  weight.new_empty(0))
        return grad_x, grad_w

    def setup_context(ctx, inputs, output):
        x, weight, stride, padding, dilation, groups, key = inputs
        ctx.save_for_backward(x, weight)
        ctx.geometry = (stride, padding, dilation, groups, key)

    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[:2]
        grad_x, grad_w = torch.ops.ucudnn.conv2d_backward(grad_y, x, weight, *ctx.geometry,
                                                          need_x, need_w)
        return (grad_x if need_x else None, grad_w if need_w else None, None, None, None, None,
                None)

    library.register_autograd("ucudnn::conv2d", backward, setup_context=setup_context, lib=lib)
    _register_custom_ops.lib = lib  # the registrations live as long as the library object
    return torch.ops.ucudnn


def _op_memory_format(x, weight):
    """The memory format of the op's outputs (_channels_last_call)."""
    return _CHANNELS_LAST if _channels_last_call(x, weight) else torch.contiguous_format


def _or_empty(tensor, like, memory_format):
    if tensor is None:
        return like.new_empty(0)
    return tensor.contiguous(memory_format=memory_format)


_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)


def custom_ops_available():
    """Whether converted layers are custom ops under torch.compile (PyTorch >= 2.4)."""
    global _custom_ops
    if _custom_ops is None:
        try:
            _custom_ops = _register_custom_ops() or False
        except RuntimeError:  # registered already by another copy of this module
            _custom_ops = torch.ops.ucudnn
    return bool(_custom_ops)


# ---- the module ----------------------------------------------------------------------------------
class UcudnnConv2d(nn.Conv2d):
    """A torch.nn.Conv2d whose convolution runs through ucudnn. Made by convert() from an existing
    Conv2d (its class is swapped in place), so parameters and state_dict keys are the same. Its
    stride, padding, dilation and groups are read at an input signature's first call."""

    def _conv_forward(self, input, weight, bias):
        unbatched = input.dim() == 3
        if unbatched:
            input = input.unsqueeze(0)
        elif input.dim() != 4:
            raise ValueError(f"UcudnnConv2d: expected a 3-D or 4-D input, got {input.dim()}-D")
        if self.padding_mode != "zeros":
            # As nn.Conv2d: explicit padding of the mode, then a convolution without padding.
            input = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            padding = (0, 0)
        elif self.padding == "valid":
            padding = (0, 0)
        elif self.padding == "same":
            padding, extra = _same_padding(self.kernel_size, self.dilation)
            if any(extra):
                input = F.pad(input, [0, extra[1], 0, extra[0]])
        else:
            padding = self.padding
        output = self._ucudnn_conv(input, weight, bias, padding)
        return output.squeeze(0) if unbatched else output

    def _ucudnn_conv(self, input, weight, bias, padding):
        is_cuda = input.is_cuda
        if not is_cuda and not input.is_cpu:
            # A device the library has no backend for.
            return F.conv2d(input, weight, bias, self.stride, padding, self.dilation, self.groups)
        cast = _autocast_dtype(is_cuda)
        if cast is not None and not (input.is_floating_point() and input.dtype != torch.float64):
            cast = None  # autocast leaves it as it is
        if _is_compiling():
            if custom_ops_available() and not self._ucudnn_framework_layer:
                input, weight, bias = _cast_operands(cast, input, weight, bias)
                y = torch.ops.ucudnn.conv2d(input, weight, list(self.stride), list(padding),
                                            list(self.dilation), self.groups,
                                            self._ucudnn_key)
                return y if bias is None else y + bias.view(1, -1, 1, 1)
            return F.conv2d(input, weight, bias, self.stride, padding, self.dilation, self.groups)
        runtime = self._ucudnn_runtime
        conv = self._ucudnn_conv_of(input, weight, padding, cast)
        if conv is not None and runtime.recording is not None:
            grad = torch.is_grad_enabled()
            conv.record(grad and input.requires_grad, grad and weight.requires_grad)
            input, weight, bias = _cast_operands(cast, input, weight, bias)
            return _shape_only_conv(None, conv, input, weight, bias)
        # PyTorch's own on the operands as given: autocast casts them inside F.conv2d as for an
        # unconverted layer (in C++, its weight cast cached for the autocast region), which a
        # cast here in Python would cost a host-bound step several microseconds per operand.
        if conv is None:
            return F.conv2d(input, weight, bias, self.stride, padding, self.dilation, self.groups)
        grad = torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad)
        need_x = grad and input.requires_grad
        need_w = grad and weight.requires_grad
        if runtime.profiling is None:
            until = conv.framework_until(need_x, need_w)
            if until:
                # Every op of the call runs PyTorch's own: the unconverted layer's path, and
                # nn.Conv2d's own forward for the layer's next calls till then (route_native).
                runtime.route_native(self, until)
                return F.conv2d(input, weight, bias, self.stride, padding, self.dilation,
                                self.groups)
        input, weight, bias = _cast_operands(cast, input, weight, bias)
        if runtime.profiling is not None:
            return _shape_only_conv(runtime.profiling, conv, input, weight, bias)
        memory_format = conv.memory_format
        input = input.contiguous(memory_format=memory_format)
        weight = weight.contiguous(memory_format=memory_format)
        y = _Conv2dFunction.apply(input, weight, conv) if grad else _forward(input, weight, conv)
        # In place: the op's output is not saved for its backward.
        return y if bias is None else y.add_(bias.view(1, -1, 1, 1))

    def _ucudnn_conv_of(self, input, weight, padding, cast):
        """The _Conv of the call's signature (the operands' dtype that of autocast's `cast` when
        set), made at its first sight; None when the library has no words for it (a dtype it does
        not plan, operands of two dtypes, no context)."""
        channels_last = _channels_last_call(input, weight)
        allow_tf32 = _allow_tf32()
        dtype, weight_dtype = (cast, cast) if cast is not None else (input.dtype, weight.dtype)
        signature = (input.shape, dtype, input.device, weight.shape, weight_dtype, channels_last,
                     allow_tf32, padding)
        convs = self._ucudnn_convs
        conv = convs.get(signature, False)
        if conv is False:
            if len(convs) >= _ConvCache.MAX_SIGNATURES:
                convs.clear()
            conv = None
            if dtype in _DATA_TYPES and weight_dtype == dtype:
                conv = self._ucudnn_make_conv(input, weight, padding, channels_last, allow_tf32,
                                              dtype)
            convs[signature] = conv
        return conv

    def _ucudnn_make_conv(self, input, weight, padding, channels_last, allow_tf32, dtype):
        runtime = self._ucudnn_runtime
        context = runtime.context(input.device)
        if context is None:
            return None
        geometry = (tuple(self.stride), tuple(padding), tuple(self.dilation), self.groups)
        math = _math_mode(dtype, input.is_cuda, allow_tf32)
        return _Conv(runtime, context, input, weight, dtype, geometry, channels_last, math)

    def __setstate__(self, state):
        super().__setstate__(state)
        if "_ucudnn_runtime" in state:  # unpickled or copied: a key of this process, nothing
            self._ucudnn_runtime.conv_caches[id(self._ucudnn_convs)] = self._ucudnn_convs
            self._ucudnn_key = _module_key(self)  # decided, the adapter's route
            self._ucudnn_framework_layer = False
            if type(self) is _NativeRoutedConv2d:
                self.__class__ = UcudnnConv2d


class _NativeRoutedConv2d(UcudnnConv2d):
    """A converted layer on the native route (Runtime.route_native): nn.Conv2d's own forward,
    with nothing of the adapter's in the call."""

    _conv_forward = nn.Conv2d._conv_forward


def _recheck_native_routes(module, args):
    """The converted model's forward pre-hook: once per step, the layers on the native route
    back on the adapter's once one is due (Runtime.native_until). Nothing under torch.compile,
    which traces what each layer's route is then."""
    if _is_compiling():
        return None
    runtime = module.__dict__.get("_ucudnn_root_runtime")
    if runtime is not None and _monotonic() >= runtime.native_until:
        runtime.restore_native()
    return None


def convert(model, workspace_limit=0, min_layer_gain_us=None, cudnn_handle="framework",
            **config):
    """Runs every torch.nn.Conv2d of `model` (the model itself included) through ucudnn; the
    model is changed in place and returned. `config`: the library's options by their
    UCUDNN_* names in lower case without the prefix (CONFIG_KEYS), over the environment, checked
    here (ValueError or TypeError naming the bad one). `framework` defaults to
    framework_identity(). `workspace_limit`: per-kernel mode, each kernel's workspace limit in
    bytes (0: the configured UCUDNN_WORKSPACE_BYTES, else 64 MiB). `min_layer_gain_us`: where
    PyTorch does not benchmark (torch.backends.cudnn.benchmark off when converted), a layer runs
    the library's plans only where they save at least this much per step against PyTorch's own
    (device time, by the cluster's timings; default MIN_LAYER_GAIN_US, about the library's host
    cost per layer); elsewhere it runs PyTorch's own whole, as unconverted. In a host-bound
    step their saving counts as nothing (0 keeps every plan). Where PyTorch benchmarks, the
    planner gives a kernel's ties (within FRAMEWORK_MARGIN) to ucudnn, and a layer of a step
    that is not host-bound runs every plan it has (unless min_layer_gain_us is infinite): no
    benchmark of PyTorch's runs in the job for it. `cudnn_handle`: "framework" (the default)
    runs the plans on PyTorch's own cuDNN handle where it can be borrowed
    (framework_cudnn_handle(); else as "own"), so that the library puts no handle of its own on
    the device; "own" gives each device's context a handle of the library's.
    Subclasses of Conv2d are left as they are (their forward may do more than a
    convolution)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"ucudnn.torch.convert: expected a torch.nn.Module, got {type(model)}")
    if isinstance(workspace_limit, bool) or not isinstance(workspace_limit, int) or (
            workspace_limit < 0):
        raise ValueError(f"ucudnn.torch.convert: workspace_limit must be an int >= 0, got "
                         f"{workspace_limit!r}")
    if min_layer_gain_us is not None and (
            isinstance(min_layer_gain_us, bool) or
            not isinstance(min_layer_gain_us, (int, float)) or not min_layer_gain_us >= 0):
        raise ValueError(f"ucudnn.torch.convert: min_layer_gain_us must be a number >= 0, got "
                         f"{min_layer_gain_us!r}")
    if cudnn_handle not in _CUDNN_HANDLE_CHOICES:
        raise ValueError(f"ucudnn.torch.convert: cudnn_handle must be one of "
                         f"{', '.join(_CUDNN_HANDLE_CHOICES)}, got {cudnn_handle!r}")
    config.setdefault("framework", framework_identity())
    runtime = Runtime(config, workspace_limit, min_layer_gain_us, cudnn_handle)
    custom_ops_available()  # registered now, not while torch.compile traces
    model._ucudnn_root_runtime = runtime
    if _recheck_native_routes not in model._forward_pre_hooks.values():
        model.register_forward_pre_hook(_recheck_native_routes)
    for module in model.modules():
        if type(module) in (nn.Conv2d, _NativeRoutedConv2d):
            module.__class__ = UcudnnConv2d
        if isinstance(module, UcudnnConv2d):
            module._ucudnn_runtime = runtime
            module._ucudnn_convs = _ConvCache()
            runtime.conv_caches[id(module._ucudnn_convs)] = module._ucudnn_convs
            module._ucudnn_key = _module_key(module)
            module._ucudnn_framework_layer = False
    return model


def unconvert(model):
    """Undoes convert(): every UcudnnConv2d of `model` is a torch.nn.Conv2d again (the same
    parameters), with nothing of the library left on it (PyTorch's cuDNN benchmark as it was
    before a prepare() turned it off). Returns the model."""
    _restore_framework_search()
    for key, hook in list(model._forward_pre_hooks.items()):
        if hook is _recheck_native_routes:
            del model._forward_pre_hooks[key]
    model.__dict__.pop("_ucudnn_root_runtime", None)
    for module in model.modules():
        if isinstance(module, UcudnnConv2d):
            module.__class__ = nn.Conv2d
            for name in ("_ucudnn_runtime", "_ucudnn_convs", "_ucudnn_key",
                         "_ucudnn_framework_layer"):
                module.__dict__.pop(name, None)
    return model


def _runtimes(model):
    seen = []
    for module in model.modules():
        runtime = getattr(module, "_ucudnn_runtime", None)
        if runtime is not None and all(runtime is not r for r in seen):
            seen.append(runtime)
    if not seen:
        raise ValueError("ucudnn.torch: the model has no converted Conv2d (call convert() first)")
    return seen


def kernels(model, *sample_inputs):
    """The convolutions a training step of `model` on `sample_inputs` runs through the library:
    {(runtime, device): [ConvShape, ...]} from one forward pass run by PyTorch (the backward ops
    are those the gradients need: no backward-data for a layer whose input needs no gradient).
    The converted layers compute nothing in it (zero outputs, _ShapeOnlyConv2dFunction): no
    cuDNN call, so no PyTorch benchmark. The pass keeps no activation for a backward (none
    runs): it holds the memory of an inference forward, not of a training step. A
    torch.compile'd model's pass runs its original module."""
    model = _compiled_original(model) or model
    runtimes = _runtimes(model)
    for runtime in runtimes:
        runtime.restore_native()  # every call of the pass through the adapter
        runtime.recording = {}
    try:
        # The pass leaves the model as it was: batch-norm statistics and the like.
        with _model_kept(model), torch.enable_grad(), _nothing_saved():
            model(*sample_inputs)
        return {(runtime, device): shapes for runtime in runtimes
                for device, shapes in runtime.recording.items()}
    finally:
        for runtime in runtimes:
            runtime.recording = None


def _nothing_saved():
    """Autograd keeps none of the tensors a forward saves for its backward (a pass that never
    runs one): each activation is freed once the forward is done with it, while requires_grad
    still flows as in a training step. A no-op where this PyTorch has no saved-tensor hooks."""
    hooks = getattr(getattr(torch.autograd, "graph", None), "saved_tensors_hooks", None)
    if hooks is None:
        return contextlib.nullcontext()

    def unpack(_):
        raise RuntimeError("ucudnn.torch.kernels(): its pass keeps nothing for a backward")
    return hooks(lambda _: None, unpack)


def _compiled_original(model):
    """The module torch.compile wrapped when `model` is its OptimizedModule, else None."""
    original = getattr(model, "_orig_mod", None)
    return original if isinstance(original, nn.Module) else None


def _unique(shapes):
    seen, unique = set(), []
    for shape in shapes:
        key = _shape_key(shape)
        if key not in seen:
            seen.add(key)
            unique.append(shape)
    return unique


def prepare(model, *sample_inputs, wait_ms=0, measure_framework=True, budget="auto",
            above_peak=None, loss_fn=None, host_bound=None, host_bound_search="heuristics"):
    """Declares every kernel of a training step (kernels()) and plans them now: in the total
    modes, the whole network under one budget. `sample_inputs` at the training batch size.
    `wait_ms`: how long to wait for the server's answers (0: plans arrive in the background).
    With `measure_framework` (and wait_ms > 0), PyTorch's own time and workspace are measured
    for the kernels the cluster has no measurement of (this resets the device's peak memory
    counter), once their problems are benchmarked (within wait_ms), and submitted so that every
    job of this framework on this device plans with them (PyTorch's own is a candidate only
    where its workspace fits the kernel's limit); without a server or token, or where the plans
    did not come within wait_ms (a worker may have shared the device), the measurement decides
    for this process alone. `budget`: "fixed" (each
    kernel's limit is the configured one), "liveness" (per-kernel mode, CUDA: each kernel may use
    what is free at its point of the step, memory_profile() and liveness_limits(), plus
    `above_peak` bytes over the step's peak without workspace; default: the configured
    workspace_bytes, else 64 MiB; less where the process may not take that much, by its memory
    cap or the device's free memory; `loss_fn` makes the profiled step's loss from the output;
    a kernel whose plan is slower than PyTorch's own only for want of PyTorch's workspace then
    gets that workspace, which native's step takes at the same point; the model's first
    forwards after this correct the budgets by the memory the job holds beyond the profiled
    step, the optimizer's state: _StepBudget),
    "allowance" (per-kernel mode, CUDA: every kernel may use the memory the process may take, as
    PyTorch's own benchmark does), or "auto" (the default): liveness where it applies (per-kernel
    mode, CUDA inputs), allowance for a compiled model there, else fixed; a step that cannot be
    profiled without a loss_fn (an output that is not a tensor) falls back to fixed with a
    warning. `host_bound`: whether the step is host-bound, where a plan's
    device-time saving does not shorten it (then every layer whose plans only save device time
    runs PyTorch's own); None (the default): measured on CUDA once the plans are in
    (step_is_host_bound(), rank 0's answer for every rank of a torch.distributed job).
    A torch.compile'd model (prepare(torch.compile(model), ...), as a compiled job should call
    it) runs no eager training step here, whose memory and host time are not its step's: its
    kernels are declared by a forward of the original module that keeps no activation, "auto"
    budgets are allowance (an eager step's liveness is not the compiled step's, and a plan kept
    under a fixed limit where PyTorch's own needs more ran slower than native: ConvNeXt-T 0.98x
    on an H100), and `host_bound` defaults to True (a compiled step does not gain from a
    plan's device-time saving what its custom op costs on the host: every layer whose plans
    only save device time is traced as PyTorch's own; host_bound=False keeps them).
    `host_bound_search`: how PyTorch chooses its own convolutions' algorithms in a step measured
    host-bound: "heuristics" (the default) turns its cuDNN benchmark off for the process
    (torch.backends.cudnn.benchmark = False, restored by the next prepare() or unconvert())
    where the step is host-bound, which spares the job's first step the benchmark of every
    kernel and costs its steps nothing (measured: _HOST_BOUND_SEARCHES; the machine's next job
    checks that the step stays host-bound with the heuristics' choices, or at least as fast as
    the step the answer was measured on (heuristics_keep_pace), and keeps the benchmark in later
    jobs where it is neither); "benchmark" leaves the flag as it is.
    Returns {"kernels": declared, "measured": framework timings taken here, "budget": the budget
    used, "above_peak": the bytes over the step's peak that liveness budgets allowed (None under
    other budgets), "framework_fitted": the kernels whose liveness limit was raised to the
    workspace of PyTorch's own, faster than their plan (_framework_fit_limit), "host_bound":
    step_is_host_bound()'s answer, or {"host_bound": the value given} ({"host_bound": True, "assumed": "compiled"} for a compiled model), or None when not
    measured (a host-bound answer's "framework_search": _HOST_BOUND_CODES), "compiled": whether
    `model` was torch.compile's, "cudnn_benchmark": torch.backends.cudnn.benchmark after it,
    "seconds": {"budgets": the memory
    profile, "plans": declaring the kernels, the plans' answers and PyTorch's timings measured
    here, "host_bound": the steps that measure it (PyTorch's benchmark for the layers that run
    its own, the plans' first calls)}}."""
    if budget not in _BUDGETS:
        raise ValueError(f"ucudnn.torch.prepare: budget must be one of {', '.join(_BUDGETS)}, "
                         f"got {budget!r}")
    if host_bound_search not in _HOST_BOUND_SEARCHES:
        raise ValueError(f"ucudnn.torch.prepare: host_bound_search must be one of "
                         f"{', '.join(_HOST_BOUND_SEARCHES)}, got {host_bound_search!r}")
    _restore_framework_search()  # this prepare() decides again
    original = _compiled_original(model)
    compiled = original is not None
    model = original or model  # the eager module: its layers, its passes
    step_budget = None
    budget_limit = None
    started = time.perf_counter()
    model.__dict__.pop("_ucudnn_step_budget", None)
    if budget == "auto":
        budget = _auto_budget(model, sample_inputs)
        if budget == "liveness" and compiled:
            budget = "allowance"  # an eager step's liveness is not the compiled step's
        if budget == "liveness":
            try:
                step_budget = _liveness_budgets(model, sample_inputs, above_peak, loss_fn)
            except (AttributeError, TypeError) as e:
                warnings.warn(f"ucudnn.torch.prepare: the step could not be profiled ({e}); "
                              "each kernel gets the configured limit (give loss_fn)")
                budget = "fixed"
    elif budget == "liveness":
        step_budget = _liveness_budgets(model, sample_inputs, above_peak, loss_fn)
    if budget == "allowance":
        _require_per_kernel(model, "prepare: budget='allowance'")
        budget_limit = _allowance_limit(sample_inputs)
    limits = step_budget.limits() if step_budget is not None else {}
    for runtime in _runtimes(model):
        runtime.kernel_limits = limits
        runtime.lowered_limits = {}
        runtime.budget_limit = budget_limit
    for conv in _convs(model):
        conv.forget_kernels()  # declared again with the limits now in force
    budgeted = time.perf_counter()
    declared = measured = fitted = 0
    for (runtime, device), shapes in kernels(model, *sample_inputs).items():
        context = runtime.context(device)
        if context is None:
            continue
        shapes = _unique(shapes)
        declared += len(shapes)
        _declare_at_limits(runtime, context, shapes)
        if wait_ms <= 0:
            continue
        not_shared = []
        if measure_framework:
            # PyTorch's own is timed once this job's problems are benchmarked (a warm cluster:
            # at once, and nothing to time): a worker may be benchmarking them on this very
            # device (the README's stack, a cluster's first job), and times taken meanwhile are
            # the shared device's (VGG-16 fp32's: 2x; docs/torch-models.md, session 29). Where
            # the plans are not all in by wait_ms, the times decide for this process alone.
            quiet = runtime.has_server() and _wait_planned(runtime, context, shapes, wait_ms)
            not_shared = _measure_framework(runtime, context, device, shapes, share=quiet)
            measured += len(not_shared[1]) if not_shared else 0
        context.wait_for_plans(wait_ms)
        if not_shared and not not_shared[0]:
            _decide_locally(runtime, context, not_shared[1])
        elif step_budget is not None:
            raised = _fit_framework(runtime, context, shapes, step_budget.ceiling())
            step_budget.raised.update(raised)
            if raised:
                fitted += len(raised)
                context.wait_for_plans(wait_ms)
    if fitted:
        for conv in _convs(model):
            conv.forget_kernels()  # declared again at the raised limits
    planned = time.perf_counter()
    bound = None
    for runtime in _runtimes(model):
        runtime.host_bound = False  # the rule alone, for the step measured below
    if host_bound is not None:
        bound = {"host_bound": bool(host_bound)}
    elif compiled:
        # Measured on H100 (docs/torch-models.md, session 24): under torch.compile a planned
        # layer's custom op costs more host time than its plans save (ConvNeXt-T AMP with 31
        # planned calls 0.94x, RegNet-Y-1.6GF 0.84x); with every such layer traced as
        # F.conv2d the graph is native's. Plans kept for memory stay.
        bound = {"host_bound": True, "assumed": "compiled"}
    elif wait_ms > 0 and any(torch.is_tensor(t) and t.is_cuda for t in sample_inputs):
        _decide_layers(model)  # the step measured as it will run
        bound = _step_host_bound(model, sample_inputs, loss_fn, host_bound_search)
    for runtime in _runtimes(model):
        runtime.host_bound = bool(bound and bound["host_bound"])
    if wait_ms > 0:
        _decide_layers(model)
    if step_budget is not None:
        # The job's first steps correct the budgets (_StepBudget.check).
        step_budget.wait_ms = wait_ms
        model._ucudnn_step_budget = step_budget
        if _check_step_budget not in model._forward_pre_hooks.values():
            model.register_forward_pre_hook(_check_step_budget)
    _release_cached_memory(sample_inputs)
    return {"kernels": declared, "measured": measured, "budget": budget,
            "above_peak": step_budget.above_peak() if step_budget is not None else None,
            "framework_fitted": fitted, "host_bound": bound,
            "compiled": compiled, "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "seconds": {"budgets": budgeted - started, "plans": planned - budgeted,
                        "host_bound": time.perf_counter() - planned}}


def _release_cached_memory(sample_inputs):
    """prepare()'s end on CUDA: the blocks its passes left in PyTorch's allocator cache are
    released (torch.cuda.empty_cache; nothing in use is touched), so that the job's steps lay out
    their memory from a clean cache rather than around the blocks of the passes' layout (the
    profiled step's without workspaces, the measuring steps' first calls)."""
    if any(torch.is_tensor(t) and t.is_cuda for t in sample_inputs):
        torch.cuda.empty_cache()


def median_step(samples):
    """Of steps measured as (host_s, total_s), the one whose lag (the device's time after the
    host's launches, as a fraction of the step) is the median: one step alone flips on a loaded
    host (ConvNeXt-T: 42 ms of host time in a 53 ms step in one run, 25 of 51 in the next,
    docs/torch-models.md calls 49-50)."""
    def lag(sample):
        host, total = sample
        return (total - host) / total if total > 0 else 0.0
    ranked = sorted(samples, key=lag)
    return ranked[len(ranked) // 2]


def allocator_syncs(before, after):
    """Of two torch.cuda.memory_stats() readings, the allocator's synchronizing events between
    them: retries after a failed cudaMalloc and cudaFree calls (each waits for the device). A
    step that has them is bound by its memory, and its host time holds those waits."""
    return sum(max(0, after.get(name, 0) - before.get(name, 0))
               for name in ("num_alloc_retries", "num_device_free"))


def step_is_host_bound(model, *sample_inputs, loss_fn=None, steps=4):
    """Whether a training step of `model` (forward, `loss_fn(output)` or the output's sum,
    backward; CUDA) is host-bound: of `steps` steps, the first left out, the median one's
    launch time (until backward() returns) against its time until the device finishes
    (median_step, is_host_bound; a CPU step is all host). Never where PyTorch's allocator
    synchronized in the measured steps (allocator_syncs: a step under a memory cap whose host
    waited on cudaFree, VGG-16 fp32 at 13.1 GiB: host 94 of 104 ms, judged host-bound, every
    layer then PyTorch's own at 126 ms against 103 with plans). The model is left as it was
    (gradients and buffers). In a torch.distributed job every rank gets rank 0's answer.
    {"host_bound", "host_ms", "step_ms", "allocator_syncs"}."""
    device = next(t.device for t in sample_inputs if torch.is_tensor(t))
    cuda = device.type == "cuda"
    samples = []
    stats = [{}, {}]
    with _model_kept(model):
        for i in range(max(2, steps)):  # the first: PyTorch's benchmark, the plans' first calls
            if cuda:
                torch.cuda.synchronize(device)
                if i == 1:
                    stats[0] = torch.cuda.memory_stats(device)
            start = time.perf_counter()
            _training_pass(model, sample_inputs, loss_fn)
            host = time.perf_counter() - start
            if cuda:
                torch.cuda.synchronize(device)
            samples.append((host, time.perf_counter() - start))
        if cuda:
            stats[1] = torch.cuda.memory_stats(device)
    host, total = median_step(samples[1:])
    syncs = allocator_syncs(*stats)
    bound = bool(_rank0s(int(is_host_bound(host, total) and syncs == 0), device))
    return {"host_bound": bound, "host_ms": host * 1e3, "step_ms": total * 1e3,
            "allocator_syncs": syncs}


# prepare()'s host-bound answers, remembered on the machine (UCUDNN_HOST_BOUND_CACHE, a JSON file;
# default $XDG_CACHE_HOME/ucudnn/host_bound.json or ~/.cache/ucudnn/host_bound.json; "off" for
# none): a later job of the same step skips the measuring steps (DenseNet-121 AMP: 4.0-4.7 s of
# its start on an H100, docs/torch-models.md call 71), and near the threshold every job of the
# machine decides alike (one measure flipped between runs of ConvNeXt-T and ResNeXt-50, calls
# 56-60). Keyed by the host, the GPU, PyTorch's version, the model (its repr), the inputs,
# autocast, loss_fn and the layers' routes; the newest HOST_BOUND_RECORDS are kept, each for
# HOST_BOUND_RECORD_DAYS (an answer taken on a busy host does not stand for good). Delete the
# file (or pass host_bound=) to decide again.
HOST_BOUND_RECORDS = 256
HOST_BOUND_RECORD_DAYS = 7


def _host_bound_records_path():
    """Where prepare() remembers host-bound answers, or None for nowhere."""
    return _cache.cache_path("UCUDNN_HOST_BOUND_CACHE", "host_bound.json")


def _host_bound_key(model, sample_inputs, loss_fn):
    """What a host-bound answer holds for: this host and GPU, PyTorch, the model, its inputs,
    autocast, loss_fn and which layers run PyTorch's own (the step as it will run)."""
    device = next(t.device for t in sample_inputs if torch.is_tensor(t))
    inputs = [(tuple(t.shape), str(t.dtype), tuple(t.stride())) if torch.is_tensor(t) else repr(t)
              for t in sample_inputs]
    autocast = str(_autocast_dtype(device.type == "cuda"))
    routes = "".join("f" if conv.framework_layer else "p" for conv in _convs(model))
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    parts = [platform.node(), gpu, torch.__version__,
             hashlib.sha256(repr(model).encode()).hexdigest(), repr(inputs), autocast,
             getattr(loss_fn, "__qualname__", repr(loss_fn)) if loss_fn is not None else "sum",
             routes]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _read_host_bound_records(path):
    """The file's records ({key: answer}); none where it is missing or not ours."""
    try:
        with open(path) as f:
            records = json.load(f)
    except (OSError, ValueError):
        return {}
    return records if isinstance(records, dict) else {}


def _remember_host_bound(path, key, answer):
    """Adds `answer` to the file, replaced atomically (jobs may share it); a file that cannot be
    written is a warning in the log, never an error of the job."""
    records = _read_host_bound_records(path)
    records.pop(key, None)
    records[key] = dict(answer, remembered_at=time.time())
    newest = sorted(records.items(), key=lambda item: item[1].get("remembered_at", 0))
    records = dict(newest[-HOST_BOUND_RECORDS:])
    temporary = f"{path}.tmp.{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(temporary, "w") as f:
            json.dump(records, f)
        os.replace(temporary, path)
    except OSError as e:
        _log.warning("ucudnn.torch: cannot remember the host-bound answer in %s: %s", path, e)


# A host-bound step gains nothing from PyTorch's cuDNN benchmark (the device waits for the host
# whichever algorithm runs), and its first step loses the search of every kernel. Native
# PyTorch, AMP, on an H100, each run its own process, benchmark on / off (docs/torch-models.md,
# call 75): EfficientNet-B0 (batch 128) 44.6-51.2 / 43.3-45.1 ms a step, 18.4-47.1 / 4.7-5.4 s
# from the model on the device to the first fast step; DenseNet-121 72.3-77.6 / 71.6-80.6 ms,
# 11.7-18.3 / 1.5 s; MobileNet-V3-Large 35.6-39.9 / 29.0-34.0 ms, 22.6-23.0 / 5.5-6.4 s;
# ResNeXt-50 37.9-39.9 / 36.3-37.3 ms, 8.6-13.9 / 0.9-1.1 s. prepare(host_bound_search=...).
_HOST_BOUND_SEARCHES = ("heuristics", "benchmark")
# A host-bound record's "framework_search": how the step's PyTorch convolutions choose their
# algorithms in the machine's jobs. "heuristics": the benchmark turned off, the step measured
# host-bound with the benchmark's choices (the job that measured it had run them already: PyTorch
# keeps a kernel's first choice for the process), so the next job measures it with cuDNN's
# heuristic choices; "heuristics-checked": host-bound with them too, or as fast as the recorded
# step (heuristics_keep_pace); "benchmark": neither, or a job that keeps the benchmark. A record
# without it (older) is "heuristics".
_HOST_BOUND_NONE, _HOST_BOUND_NO, _HOST_BOUND_BENCHMARK, _HOST_BOUND_UNCHECKED, \
    _HOST_BOUND_CHECKED = -1, 0, 1, 2, 3
_HOST_BOUND_CODES = {"benchmark": _HOST_BOUND_BENCHMARK, "heuristics": _HOST_BOUND_UNCHECKED,
                     "heuristics-checked": _HOST_BOUND_CHECKED}
# The benchmark flag as a prepare() found it before turning it off (None: untouched).
_benchmark_before = None


def _host_bound_code(record):
    """A remembered record (or None) as the one int rank 0 sends every rank (_HOST_BOUND_*)."""
    if record is None:
        return _HOST_BOUND_NONE
    if not record["host_bound"]:
        return _HOST_BOUND_NO
    return _HOST_BOUND_CODES.get(record.get("framework_search"), _HOST_BOUND_UNCHECKED)


def heuristics_keep_pace(step_ms, recorded_ms):
    """Whether a step taken with cuDNN's heuristic choices (`step_ms`) is as fast as the one a
    host-bound record was measured on (`recorded_ms`: with the plans, or PyTorch's benchmarked
    choices; None: unknown, so no) within HEURISTICS_MARGIN."""
    return (isinstance(recorded_ms, (int, float)) and recorded_ms > 0 and
            step_ms <= recorded_ms * (1 + HEURISTICS_MARGIN))


def _turn_off_framework_search():
    """PyTorch's cuDNN benchmark off for the process (the value before kept for
    _restore_framework_search)."""
    global _benchmark_before
    if torch.backends.cudnn.benchmark:
        if _benchmark_before is None:
            _benchmark_before = True
            _log.info("ucudnn.torch: the step is host-bound: PyTorch's cuDNN benchmark is off for "
                      "this process, cuDNN's heuristics choose (prepare(host_bound_search="
                      "'benchmark') keeps it)")
        torch.backends.cudnn.benchmark = False


def _restore_framework_search():
    """PyTorch's cuDNN benchmark as it was before a prepare() turned it off."""
    global _benchmark_before
    if _benchmark_before is not None:
        torch.backends.cudnn.benchmark = _benchmark_before
        _benchmark_before = None


def _step_host_bound(model, sample_inputs, loss_fn, search="heuristics"):
    """prepare()'s host-bound answer: remembered for this step on this machine (rank 0's record
    decides for every rank of a torch.distributed job, so that all measure or none do), else
    measured (step_is_host_bound) and remembered, unless PyTorch's allocator synchronized in the
    measured steps (a memory-bound step's answer is not kept). With `search` "heuristics" and
    PyTorch benchmarking, a host-bound step turns the benchmark off (_HOST_BOUND_CODES: the job
    after the one that measured it measures it again with cuDNN's heuristic choices, and keeps
    the benchmark where the step is neither host-bound with them nor as fast as the recorded
    one)."""
    device = next(t.device for t in sample_inputs if torch.is_tensor(t))
    path = _host_bound_records_path()
    key = _host_bound_key(model, sample_inputs, loss_fn) if path else None
    record = _read_host_bound_records(path).get(key) if key else None
    if (not isinstance(record, dict) or not isinstance(record.get("host_bound"), bool)
            or not isinstance(record.get("remembered_at"), (int, float))
            or time.time() - record["remembered_at"] > HOST_BOUND_RECORD_DAYS * 86400):
        record = None
    code = _rank0s(_host_bound_code(record), device)
    heuristics = search == "heuristics" and torch.backends.cudnn.benchmark

    def remember(answer):
        if key and not answer["allocator_syncs"] and _rank() == 0:
            _remember_host_bound(path, key, answer)
        return answer

    if code == _HOST_BOUND_UNCHECKED and heuristics:
        _turn_off_framework_search()
        bound = step_is_host_bound(model, *sample_inputs, loss_fn=loss_fn)
        if bound["host_bound"]:
            return remember(dict(bound, framework_search="heuristics-checked"))
        before = record.get("step_ms") if record else None
        if heuristics_keep_pace(bound["step_ms"], before):
            # Device-bound with the heuristics' choices, but their step is the recorded one's
            # (the plans', or PyTorch's benchmarked choices): the layers run PyTorch's own with
            # them, and no job searches (ConvNeXt-T on an H100: 51.8 ms against 52.1 with the
            # plans, docs/torch-models.md session 32).
            return remember(dict(bound, host_bound=True, framework_search="heuristics-checked",
                                 recorded_step_ms=before))
        # Slower with the heuristics' choices than the step the record was measured on: later
        # jobs keep the benchmark; this one keeps the choices made (PyTorch's, for the process).
        _restore_framework_search()
        _log.warning("ucudnn.torch: the step is not host-bound with cuDNN's heuristic choices "
                     "(%.1f ms launched in a %.1f ms step, %s ms with the recorded choices): "
                     "PyTorch's benchmark stays on in this machine's later jobs",
                     bound["host_ms"], bound["step_ms"],
                     "?" if before is None else f"{before:.1f}")
        remember(dict(record or {}, host_bound=True, framework_search="benchmark",
                      allocator_syncs=bound["allocator_syncs"]))
        return bound
    if code != _HOST_BOUND_NONE:
        if code == _HOST_BOUND_CHECKED and heuristics:
            _turn_off_framework_search()
        answer = {k: v for k, v in (record or {}).items() if k != "remembered_at"}
        return dict(answer, host_bound=code != _HOST_BOUND_NO, remembered=True)
    bound = step_is_host_bound(model, *sample_inputs, loss_fn=loss_fn)
    if bound["host_bound"]:
        if heuristics:
            _turn_off_framework_search()
        bound["framework_search"] = ("heuristics" if heuristics else "benchmark"
                                     if torch.backends.cudnn.benchmark else "heuristics-checked")
    return remember(bound)


def _distributed():
    """torch.distributed when this process is in an initialized job, else None."""
    distributed = getattr(torch, "distributed", None)
    if distributed is None or not distributed.is_available() or not distributed.is_initialized():
        return None
    return distributed


def _rank():
    """This process's rank in a torch.distributed job, 0 outside one."""
    distributed = _distributed()
    return distributed.get_rank() if distributed is not None else 0


def _rank0s(value, device):
    """`value` (an int) as rank 0 of a torch.distributed job has it, so that every rank plans
    alike; `value` itself outside such a job."""
    distributed = _distributed()
    if distributed is None:
        return value
    held = torch.tensor([value], dtype=torch.int64, device=device)
    distributed.broadcast(held, 0)
    return int(held.item())


def _allowance_limit(sample_inputs):
    """prepare(budget="allowance"): every kernel's limit, the memory the process may take
    (_memory_allowance, rank 0's) rounded down to a power of two, so that few distinct limits
    reach the planner; None (the configured limit) off CUDA."""
    allowance = _memory_allowance(sample_inputs)
    return None if not allowance else 1 << (allowance.bit_length() - 1)


def _auto_budget(model, sample_inputs):
    """prepare(budget="auto"): "liveness" when every converted layer plans per kernel and the step
    runs on CUDA (the memory profile reads PyTorch's CUDA counter), else "fixed"."""
    per_kernel = all(r.workspace_mode() == "per_kernel" for r in _runtimes(model))
    cuda = any(torch.is_tensor(t) and t.is_cuda for t in sample_inputs)
    return "liveness" if per_kernel and cuda else "fixed"


def _decide_layers(model):
    """prepare(), the plans in: each layer's decision (_Conv.decide_layer) for the ops its step
    runs, also kept on the module for torch.compile, which then traces PyTorch's own convolution
    for a layer decided so (a module attribute: dynamo guards on it)."""
    now = _monotonic()
    for module in model.modules():
        convs = [c for c in getattr(module, "_ucudnn_convs", {}).values()
                 if c is not None and c.ops]
        for conv in convs:
            conv.decide_layer(conv.ops, now)
        if convs:
            module._ucudnn_framework_layer = all(c.framework_layer for c in convs)


def _convs(model):
    """Every _Conv (a converted layer at one input signature) of `model`."""
    for module in model.modules():
        for conv in getattr(module, "_ucudnn_convs", {}).values():
            if conv is not None:
                yield conv


def _require_per_kernel(model, what):
    """ValueError unless every converted layer of `model` plans per kernel: `what` gives each
    kernel a limit of its own."""
    for runtime in _runtimes(model):
        mode = runtime.workspace_mode()
        if mode != "per_kernel":
            raise ValueError(f"ucudnn.torch.{what} gives each kernel its own limit: it needs "
                             f"workspace_mode='per_kernel', not {mode!r}")


def _liveness_budgets(model, sample_inputs, above_peak, loss_fn):
    """prepare(budget="liveness"): the _StepBudget of one profiled step, `above_peak` bytes over
    the step's peak without workspace allowed (default: the configured workspace_bytes, else
    64 MiB), within what the process may take (_memory_allowance)."""
    _require_per_kernel(model, "prepare: budget='liveness'")
    if above_peak is None:
        configured = _runtimes(model)[0].config.get("workspace_bytes")
        above_peak = parse_bytes(configured) if configured is not None else 64 << 20
    above_peak = parse_bytes(above_peak, "above_peak")
    profile = memory_profile(model, *sample_inputs, loss_fn=loss_fn)
    devices = [t.device for t in sample_inputs if torch.is_tensor(t)]
    return _StepBudget(profile, above_peak, _memory_allowance(sample_inputs), devices[0])


class _StepBudget:
    """prepare(budget="liveness")'s budgets, kept so that the job's first steps correct them.
    The profiled step runs before the optimizer's first step, whose state (SGD's momentum, Adam's
    moments) the job holds through every step after it: a step's in-use memory is then the
    profile's plus that, everywhere (VGG-16 fp32: 527 MiB, traced op by op; docs/step-memory.md,
    session 29). Each kernel's headroom below the peak stays; what the process may take above
    the peak (its allowance) shrinks by as much, and with it `above_peak` and the framework
    fit's ceiling. So the model's forward pre-hook (_check_step_budget) reads the memory in use
    at the start of its first CHECKS forwards, and where it has grown past the profile's by more
    than TOLERANCE, the kernels whose limits change are planned again (check())."""

    # The forwards after prepare() that are read: the optimizer's state comes with its first
    # step (the second forward), later where gradients accumulate over several forwards.
    CHECKS = 16
    # A growth below this is the allocator's rounding, not worth new plans.
    TOLERANCE = 16 << 20

    def __init__(self, profile, above_peak, allowance, device):
        self.profile = profile
        self.requested = above_peak
        self.allowance = allowance  # None: no bound (off CUDA)
        self.device = device
        self.shift = 0  # bytes the job's steps hold beyond the profiled step's
        self.raised = {}  # shape key -> PyTorch's workspace (the framework fit)
        self.checks_left = self.CHECKS
        self.wait_ms = 0

    def __reduce__(self):
        return (type(None), ())  # a copy or a pickle of the model leaves it behind

    def _allowance(self):
        return None if self.allowance is None else self.allowance - self.shift

    def above_peak(self):
        """The bytes above the step's peak without workspace the kernels may take."""
        return _curve.above_peak_within(self.profile, self.requested, self._allowance())

    def ceiling(self):
        """The most the process may take above that peak (the framework fit's ceiling)."""
        return _curve.above_peak_within(self.profile, _curve.UNLIMITED_BYTES, self._allowance())

    def limits(self):
        """{shape key: limit}: each kernel's liveness limit, or PyTorch's workspace where the
        framework fit raised it and it stays within the ceiling."""
        limits = liveness_limits(self.profile, self.above_peak())
        ceiling = self.ceiling()
        for key, workspace in self.raised.items():
            if limits.get(key, 0) < workspace <= ceiling:
                limits[key] = workspace
        return limits

    def check(self, model, in_use):
        """A forward of `model` starts with `in_use` bytes allocated: where that is more than
        TOLERANCE over the profile's start, and the limits change with it, every kernel is
        declared again at its new limit and its plans are waited for (up to prepare()'s
        wait_ms; a kernel without its plan meanwhile runs PyTorch's own). Whether they
        changed."""
        self.checks_left -= 1
        shift = in_use - self.profile["base"]
        if shift < self.shift + self.TOLERANCE:
            return False
        before = self.limits()
        self.shift = shift
        limits = self.limits()
        if limits == before:
            return False
        _log.info("ucudnn.torch: the step holds %d MiB more than the profiled one (the "
                  "optimizer's state): %d kernels planned again within %d MiB above the peak",
                  shift >> 20, sum(limits[k] != before.get(k) for k in limits),
                  self.above_peak() >> 20)
        shapes = [_lib.ConvShape(*key) for key in limits]
        runtimes = _runtimes(model)
        runtimes[0].budget_replans += 1  # once for the model: stats() sums its runtimes
        for runtime in runtimes:
            runtime.kernel_limits = limits
            context = runtime.context(self.device)
            if context is not None:
                _declare_at_limits(runtime, context, shapes)
                if self.wait_ms > 0:
                    context.wait_for_plans(self.wait_ms)
        for conv in _convs(model):
            conv.forget_kernels()  # their kernels found again at the new limits
        return True


def _check_step_budget(module, args):
    """A prepared model's forward pre-hook: its first forwards correct prepare()'s liveness
    budgets by the memory the job's steps hold (_StepBudget; rank 0's in a torch.distributed
    job, whose ranks run their forwards in step). Nothing under torch.compile."""
    if _is_compiling():
        return None
    budget = module.__dict__.get("_ucudnn_step_budget")
    if budget is not None:
        if budget.checks_left <= 0:
            module.__dict__.pop("_ucudnn_step_budget", None)
        elif budget.device.type == "cuda":
            # Rank 0's reading in a torch.distributed job: every rank plans alike.
            budget.check(module, _rank0s(torch.cuda.memory_allocated(budget.device),
                                         budget.device))
        else:
            budget.check(module, budget.profile["base"])
    return None


# Of the memory the process may take, the share that liveness budgets count on: the rest is left
# to the caching allocator's rounding (what the job holds beyond the profiled step, such as the
# optimizer's state, _StepBudget reads from its steps).
_ALLOWANCE_SHARE = 0.98


def _memory_allowance(sample_inputs):
    """The bytes PyTorch's allocator may hold at most on the CUDA device of `sample_inputs`: what
    it holds plus what the device has free, and no more than the process's cap
    (set_per_process_memory_fraction, where PyTorch reads it back); times _ALLOWANCE_SHARE; rank
    0's in a torch.distributed job. None without a CUDA input."""
    devices = [t.device for t in sample_inputs if torch.is_tensor(t) and t.is_cuda]
    if not devices:
        return None
    index = devices[0].index if devices[0].index is not None else torch.cuda.current_device()
    free, total = torch.cuda.mem_get_info(index)
    allowance = free + torch.cuda.memory_reserved(index)
    get_fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    if get_fraction is not None:
        allowance = min(allowance, int(total * get_fraction(index)))
    # Rank 0's: the budgets it gives (liveness, allowance) are then every rank's.
    return _rank0s(int(allowance * _ALLOWANCE_SHARE), devices[0])


def _kernel_infos(runtime, context, shapes):
    """Context.kernel_info() of each of `shapes` at its limit (Runtime.limit_of)."""
    return [context.kernel_info(context.kernel(shape, runtime.limit_of(shape)))
            for shape in shapes]


# How often _wait_planned() looks at the kernels' states: a missing plan's answer comes from the
# session's retries (no kernel waits meanwhile), not from one wait.
_PLANNED_POLL_S = 0.1


def _wait_planned(runtime, context, shapes, timeout_ms):
    """Waits up to `timeout_ms` until no kernel of `shapes` waits for the server's answer or for
    its problem's benchmark ("missing"): then none of their problems is being benchmarked.
    Whether that came."""
    deadline = _monotonic() + timeout_ms / 1e3
    while True:
        if not any(info["state"] in ("waiting", "missing")
                   for info in _kernel_infos(runtime, context, shapes)):
            return True
        left = deadline - _monotonic()
        if left <= 0:
            return False
        context.wait_for_plans(int(min(left, _PLANNED_POLL_S) * 1e3))
        time.sleep(min(max(0.0, deadline - _monotonic()), _PLANNED_POLL_S))


def _measure_framework(runtime, context, device, shapes, share=True):
    """Measures PyTorch's own time and workspace for the kernels whose plan does not know them
    and, with `share`, submits them (their plans are made again: PyTorch's own is a candidate
    only where its workspace fits the kernel's limit). (shared, [(shape, framework ms,
    workspace bytes)]), or None: nothing to do."""
    unknown = [shape for shape, info in zip(shapes, _kernel_infos(runtime, context, shapes))
               if info["framework_ms"] <= 0]
    if not unknown:
        return None
    timings = [_time_framework(shape, device, workspace=True) for shape in unknown]
    shared = share
    if share:
        try:
            context.submit_framework_timings(unknown, [t[0] for t in timings],
                                             [t[1] for t in timings], [t[2] for t in timings])
        except _lib.ShapeError:
            shared = False  # no server or token: this process decides alone (_decide_locally)
    return shared, [(shape, t[0], t[2]) for shape, t in zip(unknown, timings)]


def _framework_fit_limit(limit, info, benchmarks, ceiling=None):
    """Under liveness budgets, the limit a kernel gets so that PyTorch's own fits it, or None
    where its limit stays: where its plan (`info`, Context.kernel_info() at `limit`) is slower
    than PyTorch's own (_beats_framework) and PyTorch's workspace is known and exceeds the limit.
    Native's step takes that workspace at the same point of the step, so the converted step's
    peak stays within native's there, and the layer is never slower than native for want of the
    memory native uses (VGG-16 fp32's backward-filter 512x14x14: PyTorch's own 0.654 ms with
    115 MiB, the plan within its 42 MiB liveness limit 0.852 ms; docs/torch-models.md). Never
    above `ceiling`, the bytes the process may take above the step's peak without workspace:
    under a memory cap native's own cannot take its unlimited workspace either, and the
    profiled step's headroom is not the job's to the byte (the optimizer's state comes after
    it), so only memory the process has beyond that peak is given."""
    workspace = info.get("framework_workspace_bytes", 0)
    if (info["state"] != "planned" or info["framework_ms"] <= 0 or workspace <= limit or
            (ceiling is not None and workspace > ceiling) or
            _beats_framework(info["predicted_ms"], info["framework_ms"], benchmarks)):
        return None
    return workspace


def _fit_framework(runtime, context, shapes, ceiling):
    """prepare(budget="liveness"): each kernel's limit raised to _framework_fit_limit() where it
    applies, within `ceiling` (_StepBudget.ceiling(); rank 0's allowance) (in the runtime's
    kernel_limits, which every rank computes alike from the cluster's timings) and those kernels
    asked for again; {shape key: raised limit}."""
    raised = {}
    for shape in shapes:
        limit = runtime.limit_of(shape)
        fitted = _framework_fit_limit(limit, context.kernel_info(context.kernel(shape, limit)),
                                      runtime.framework_benchmarks, ceiling)
        if fitted is not None:
            runtime.kernel_limits[_shape_key(shape)] = raised[_shape_key(shape)] = fitted
    _declare_at_limits(runtime, context, [s for s in shapes if _shape_key(s) in raised])
    return raised


def _declare_at_limits(runtime, context, shapes):
    """Declares `shapes` in `context`, each at its limit (runtime.limit_of), one request per
    distinct limit."""
    by_limit = {}
    for shape in shapes:
        by_limit.setdefault(runtime.limit_of(shape), []).append(shape)
    for limit, group in sorted(by_limit.items()):
        context.prepare(group, limit)


def _decide_locally(runtime, context, measured):
    """PyTorch's own convolution for the kernels whose plan does not beat the measured time
    (_beats_framework: by FRAMEWORK_MARGIN, or within it where ties go to ucudnn and the plan
    needs no more workspace than PyTorch's own), where PyTorch's workspace fits the kernel's
    limit: the planner's rule, applied in this process alone (a plan that comes later runs: its
    problem was being benchmarked, and PyTorch's time then was the shared device's)."""
    for shape, framework_ms, workspace in measured:
        limit = runtime.limit_of(shape)
        if limit and workspace > limit:
            continue
        kernel = context.kernel(shape, limit)
        info = context.kernel_info(kernel)
        benchmarks = runtime.framework_benchmarks
        if benchmarks and not _beats_framework(info["predicted_ms"], framework_ms) and (
                (context.kernel_workspace_size(kernel) or 0) > workspace):
            benchmarks = False  # a tie goes to ucudnn only within PyTorch's own workspace
        # A kernel without a plan runs PyTorch's own until one comes, which then runs.
        if info["state"] == "planned" and not _beats_framework(info["predicted_ms"],
                                                               framework_ms, benchmarks):
            runtime.local_framework.add(_shape_key(shape))


# ---- measuring PyTorch's own convolution ------------------------------------------------------------
def _operands(shape, device):
    """Random (not zero) operands of `shape`: x, w, dy in its dtype and layout."""
    dtype = _TORCH_DTYPES[shape.data_type]
    memory_format = _CHANNELS_LAST if shape.layout == _lib.NHWC else torch.contiguous_format
    dims = (shape.n, shape.c, shape.h, shape.w, shape.k, shape.r, shape.s)
    stride, padding, dilation = ((shape.stride_h, shape.stride_w), (shape.pad_h, shape.pad_w),
                                 (shape.dilation_h, shape.dilation_w))
    out = _output_size(dims, stride, padding, dilation)

    def rand(*size):
        return torch.randn(*size, device=device, dtype=dtype).contiguous(
            memory_format=memory_format)

    x = rand(shape.n, shape.c, shape.h, shape.w)
    w = rand(shape.k, shape.c // shape.groups, shape.r, shape.s)
    dy = rand(*out)
    return x, w, dy, (stride, padding, dilation, shape.groups)


def _framework_call(shape, x, w, dy, geometry):
    """PyTorch's own op of `shape` as a closure."""
    stride, padding, dilation, groups = geometry
    op = shape.op
    if op == _lib.FORWARD:
        return lambda: F.conv2d(x, w, None, stride, padding, dilation, groups)
    mask = [op == _lib.BACKWARD_DATA, op == _lib.BACKWARD_FILTER, False]
    return lambda: torch.ops.aten.convolution_backward(
        dy, x, w, None, list(stride), list(padding), list(dilation), False, [0, 0], groups, mask)


def _framework_output(shape, operands):
    """PyTorch's own result of `shape` on `operands`: y, dx or dw."""
    x, w, dy, geometry = operands
    result = _framework_call(shape, x, w, dy, geometry)()
    if shape.op == _lib.FORWARD:
        return result
    return result[0] if shape.op == _lib.BACKWARD_DATA else result[1]


def _relative_error(got, expected):
    """||got - expected|| / ||expected||, in fp32."""
    expected = expected.float()
    return float((got.float() - expected).norm() / expected.norm().clamp_min(1e-30))


class _TF32:
    """PyTorch's cuDNN TF32 switch as the shape's math mode says, for a measurement."""

    def __init__(self, shape):
        self.allow = shape.math != _lib.MATH_FMA

    def __enter__(self):
        self.saved = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = self.allow

    def __exit__(self, *exc):
        torch.backends.cudnn.allow_tf32 = self.saved


# How long _hold_device() keeps the device busy: the host issues a measurement's calls meanwhile.
_HOLD_MS = 20.0
_sleep_cycles_per_ms = {}


def _hold_device(device):
    """Queues a kernel that keeps `device` busy for about _HOLD_MS (torch.cuda._sleep; nothing
    where the PyTorch has none)."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:
        return
    index = device.index if device.index is not None else torch.cuda.current_device()
    cycles = _sleep_cycles_per_ms.get(index)
    if cycles is None:
        # The clock rate in kHz is cycles per ms; 1.5 GHz where the property is missing.
        properties = torch.cuda.get_device_properties(index)
        cycles = _sleep_cycles_per_ms[index] = getattr(properties, "clock_rate", 0) or 1_500_000
    sleep(int(cycles * _HOLD_MS))


def _time_call(call, device, repeats, flush=None):
    """(median ms, interquartile spread ms) of `call` alone, after warm-up (which includes
    PyTorch's own cuDNN benchmark at the first call). With `flush` (_l2_flusher()), the device's
    L2 is overwritten before each timed call, untimed: its operands come from memory, as a
    step's do where they were written long before."""
    for _ in range(3):
        call()
    samples = []
    if device.type == "cuda":
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(repeats)]
        # Device time, as the worker measures a plan's: the calls queue up behind a sleeping
        # kernel while the host issues them, so the device runs them back to back and a small
        # kernel's time is not the host's time to launch it.
        _hold_device(device)
        for start, end in events:
            if flush is not None:
                flush.zero_()
            start.record()
            call()
            end.record()
        torch.cuda.synchronize(device)
        samples = sorted(start.elapsed_time(end) for start, end in events)
    else:
        for _ in range(repeats):
            begin = time.perf_counter()
            call()
            samples.append((time.perf_counter() - begin) * 1e3)
        samples.sort()
    quarter = len(samples) // 4
    return samples[len(samples) // 2], samples[-1 - quarter] - samples[quarter]


def _time_framework(shape, device, repeats=15, operands=None, workspace=False, flush=None):
    """PyTorch's own time for `shape` at its full batch: (median ms, spread ms), and with
    `workspace` its workspace bytes third; on `operands` (_operands()) or new ones; `flush` as
    _time_call's."""
    x, w, dy, geometry = operands or _operands(shape, device)
    call = _framework_call(shape, x, w, dy, geometry)
    with _TF32(shape), torch.no_grad():
        ms, spread = _time_call(call, device, repeats, flush)
        return (ms, spread, _framework_workspace(call, device)) if workspace else (ms, spread)


def _framework_workspace(call, device):
    """The bytes one call of PyTorch's own (after its benchmark) takes from the caching allocator
    beyond its results: cuDNN's workspace. 0 off CUDA. Resets the device's peak counter."""
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    results = call()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    results = results if isinstance(results, (tuple, list)) else (results,)
    kept = sum(t.numel() * t.element_size() for t in results if torch.is_tensor(t))
    return max(0, peak - before - kept)


def _l2_flusher(device):
    """A buffer twice the size of the device's L2 cache, which _time_call zeroes before each timed
    call; None off CUDA or where this PyTorch does not report the L2's size."""
    if device.type != "cuda":
        return None
    size = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
    return torch.empty(2 * size, dtype=torch.uint8, device=device) if size else None


def compare_kernels(model, *sample_inputs, repeats=10, autocast=None, device_type="cuda",
                    flush_l2=False):
    """Where the time goes: every kernel of a step of `model`, PyTorch's own op against the
    library's plan, each timed alone at the full batch (after prepare()). With `flush_l2`, the
    L2 is overwritten before each timed call (a kernel timed back to back finds its operands
    there; in a step, a backward's were written long before). A list of dicts, each with
    "calls": how many times the step runs the kernel, and "l2_flushed": whether the L2 was
    flushed (never off CUDA)."""
    rows = []
    if autocast is not None:
        with torch.autocast(device_type, dtype=autocast):
            recorded = kernels(model, *sample_inputs)
    else:
        recorded = kernels(model, *sample_inputs)
    for (runtime, device), shapes in recorded.items():
        context = runtime.context(device)
        flush = _l2_flusher(device) if flush_l2 else None
        calls = collections.Counter(_shape_key(shape) for shape in shapes)
        for shape in _unique(shapes):
            kernel = context.kernel(shape, runtime.limit_of(shape))
            operands = _operands(shape, device)
            x, w, dy, _ = operands
            a, b, out = {_lib.FORWARD: (x, w, torch.empty_like(dy)),
                         _lib.BACKWARD_DATA: (dy, w, torch.empty_like(x)),
                         _lib.BACKWARD_FILTER: (x, dy, torch.empty_like(w))}[shape.op]
            framework_ms, framework_spread = _time_framework(shape, device, repeats, operands,
                                                             flush=flush)
            info = context.kernel_info(kernel)
            needed = context.kernel_workspace_size(kernel)
            plan_ms = first_error = plan_error = None
            expected = _framework_output(shape, operands)
            if needed is not None:
                workspace = torch.empty(max(needed, 1), dtype=torch.uint8, device=device)
                stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" \
                    else None

                def plan_call():
                    status = runtime.library.ShapeKernelRun(
                        kernel, a.data_ptr(), b.data_ptr(), out.data_ptr(), stream,
                        workspace.data_ptr(), needed)
                    if status != _SUCCESS:
                        raise _lib.ShapeError("ucudnnShapeKernelRun", status, "")

                try:
                    # The first call runs through every check, later ones on the bound plan:
                    # each one's output against PyTorch's own.
                    plan_call()
                    first_error = _relative_error(out, expected)
                    plan_ms, _ = _time_call(plan_call, device, repeats, flush)
                    plan_call()
                    plan_error = _relative_error(out, expected)
                except _lib.ShapeError:
                    plan_ms = None
            rows.append({
                "shape": dict(zip([n for n, _ in _lib.ConvShape._fields_], _shape_key(shape))),
                "framework_ms": framework_ms, "framework_spread_ms": framework_spread,
                "plan_ms": plan_ms, "plan_workspace_bytes": needed,
                "plan_first_call_rel_error": first_error, "plan_rel_error": plan_error,
                "calls": calls[_shape_key(shape)], "l2_flushed": flush is not None, **{
                    f"info_{k}": v for k, v in info.items()},
            })
    return rows


# ---- the step's memory: per-kernel budgets from liveness (issue 21) ---------------------------------
class _Profile:
    """What memory_profile() records: per convolution op, in the order the step runs them, the
    memory in use at its start and the bytes of its output."""

    def __init__(self, reader):
        self.reader = reader
        self.calls = []  # (shape key, in use bytes, output bytes)

    def add(self, conv, op, in_use, output_bytes):
        self.calls.append((_shape_key(conv.shape(op)), in_use, output_bytes))


def _bytes(t):
    return t.numel() * t.element_size()


def _zero_output(profile, conv, x, weight):
    """A zero tensor shaped, typed and laid out as the convolution's output: what a pass that
    needs the step's shapes and memory, not its values, takes for the convolution. With
    `profile`, the forward op is recorded (the memory in use at its start, the output's bytes)."""
    in_use = profile.reader() if profile is not None else 0
    y = torch.empty(conv.out_size, dtype=x.dtype, device=x.device,
                    memory_format=_op_memory_format(x, weight)).zero_()
    if profile is not None:
        profile.add(conv, _lib.FORWARD, in_use, _bytes(y))
    return y


class _ShapeOnlyConv2dFunction(torch.autograd.Function):
    """A convolution that computes nothing: zero outputs and zero gradients of the real ones'
    shapes, layouts and dtypes (kernels()' and memory_profile()'s passes, which need the step's
    shapes and memory). So no cuDNN call runs in them: PyTorch's benchmark, which keeps the
    first algorithm it finds for a kernel for the whole process, is left to the layers that run
    PyTorch's own in the job. With `profile`, the memory in use is recorded at each op's start."""

    @staticmethod
    def forward(ctx, x, weight, conv, profile):
        ctx.conv, ctx.profile = conv, profile
        ctx.save_for_backward(x, weight)
        return _zero_output(profile, conv, x, weight)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[:2]
        profile = ctx.profile
        if profile is not None:
            in_use = profile.reader()
            if need_x:
                profile.add(ctx.conv, _lib.BACKWARD_DATA, in_use, _bytes(x))
                # Backward-filter runs after it (_backward), its gradient of x still held: what
                # its workspace may take is that much less (VGG-16 fp32's 512x28x28: 196 MiB,
                # traced; docs/step-memory.md, session 29).
                in_use += _bytes(x)
            if need_w:
                profile.add(ctx.conv, _lib.BACKWARD_FILTER, in_use, _bytes(weight))
        grad_x = torch.zeros_like(x) if need_x else None
        grad_w = torch.zeros_like(weight) if need_w else None
        return grad_x, grad_w, None, None


def _shape_only_conv(profile, conv, input, weight, bias):
    """The layer's output from _ShapeOnlyConv2dFunction (the operands already cast)."""
    grad = torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad)
    if not grad:
        y = _zero_output(profile, conv, input, weight)
    else:
        y = _ShapeOnlyConv2dFunction.apply(input, weight, conv, profile)
    return y if bias is None else y + bias.view(1, -1, 1, 1)


def memory_profile(model, *sample_inputs, loss_fn=None, reader=None):
    """One training step of `model` on `sample_inputs` (forward, `loss_fn(output)` or the output's
    sum, backward), every converted convolution computing nothing (zero outputs and gradients of
    the real ones' shapes, _ShapeOnlyConv2dFunction: the memory is the step's, with no
    workspace and no PyTorch benchmark), recording for each convolution op the device memory in
    use at its start (PyTorch's counter: `reader`, default torch.cuda.memory_allocated) and its
    output's bytes. A model whose control flow reads its activations' values is profiled on
    zeros. The model is left as it was (gradients
    and buffers restored). {"calls": [(shape key, in use, output bytes), ...], "base": in use
    before the step}, in the order the step runs them; deterministic for a model, batch and
    precision, so every rank computes the same budgets."""
    runtimes = _runtimes(model)
    if reader is None:
        if not any(t.is_cuda for t in sample_inputs if torch.is_tensor(t)):
            raise ValueError("ucudnn.torch.memory_profile: the step's memory is a CUDA device's; "
                             "give CUDA inputs (or a reader)")
        reader = torch.cuda.memory_allocated
    profile = _Profile(reader)
    for runtime in runtimes:
        runtime.restore_native()
        runtime.profiling = profile
    try:
        with _model_kept(model):
            base = reader()
            _training_pass(model, sample_inputs, loss_fn)
    finally:
        for runtime in runtimes:
            runtime.profiling = None
    return {"calls": profile.calls, "base": base}


@contextlib.contextmanager
def trace_memory(model, reader=None):
    """Within the block, each op that a converted layer of `model` runs through the library
    records the memory in use at its start (`reader`, default torch.cuda.memory_allocated): the
    job's own steps, to hold against memory_profile()'s, from which liveness limits are
    computed (ops on PyTorch's own route are not asked, so not recorded). Yields {"calls":
    [(shape key, in use, 0), ...]}, memory_profile()'s form, filled as the block runs."""
    profile = _Profile(reader or torch.cuda.memory_allocated)
    runtimes = _runtimes(model)
    for runtime in runtimes:
        runtime.tracing = profile
    traced = {"calls": profile.calls}
    try:
        yield traced
    finally:
        for runtime in runtimes:
            runtime.tracing = None


@contextlib.contextmanager
def _model_kept(model):
    """The block's training passes leave `model` as it was: its gradients and its buffers
    (batch-norm statistics)."""
    grads = [(p, p.grad) for p in model.parameters()]
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, saved in buffers:
                buffer.copy_(saved)
        for p, grad in grads:
            p.grad = grad


def _training_pass(model, sample_inputs, loss_fn):
    """One step's forward, loss (`loss_fn(output)`, else the output's sum) and backward, from
    no gradients (those of the pass before are dropped first)."""
    for p in model.parameters():
        p.grad = None
    with torch.enable_grad():
        output = model(*sample_inputs)
        loss = loss_fn(output) if loss_fn is not None else output.float().sum()
        loss.backward()


# The one home of the limits is the pure module; ucudnn.torch.liveness_limits stays its name here.
liveness_limits = _curve.liveness_limits


def step_curve(model, *sample_inputs, budgets=None, wait_ms=30000, loss_fn=None, profile=None,
               native=None):
    """The step's time-memory curve (issue 21): for each budget above the step's peak without
    workspace (bytes; default curve.DEFAULT_BUDGETS, None is unlimited), each kernel's liveness
    limit (liveness_limits), its plan at that limit (asked for here, waiting up to wait_ms), and
    the step's predicted convolution time and peak (curve.curve_points). `profile`:
    memory_profile()'s, taken here when None. `native`: {"peak_bytes", "conv_ms"} of the native
    step when known, marked by curve.format_table and curve.format_svg. Returns
    {"base_peak_bytes", "points", "native"}."""
    _require_per_kernel(model, "step_curve")
    runtime = _runtimes(model)[0]
    budgets = _curve.checked_budgets(budgets, "ucudnn.torch.step_curve")
    devices = [t.device for t in sample_inputs if torch.is_tensor(t)]
    if not devices:
        raise ValueError("ucudnn.torch.step_curve: give the step's sample inputs")
    if profile is None:
        profile = memory_profile(model, *sample_inputs, loss_fn=loss_fn)
    context = runtime.context(devices[0])
    if context is None:
        raise ValueError(f"ucudnn.torch.step_curve: no backend for {devices[0]}")
    return _profile.plan_curve(context, profile, budgets, wait_ms, native)


def wait_for_plans(model, timeout_ms):
    """Waits up to timeout_ms for the server's answers for every kernel seen; True when none is
    still waiting. For setup and tests, not inside a training step."""
    answered = True
    for runtime in _runtimes(model):
        for context in runtime.contexts():
            answered = context.wait_for_plans(timeout_ms) and answered
    return answered


def stats(model):
    """The library's counters (ucudnn::ClientStats) summed over the model's contexts, with the
    calls the adapter sent to PyTorch's own convolution without asking the library (the route
    was known) added to fallback_calls (no plan) and framework_calls (the plan chose it), and
    "native_route_layers": how many layers are on the native route now (Runtime.route_native;
    their calls there are nn.Conv2d's own and counted nowhere), "workspace_out_of_memory":
    the calls whose plan's workspace did not fit (each ran PyTorch's own; _Conv.run), and
    "budget_replans": the times the job's steps changed prepare()'s liveness budgets
    (_StepBudget)."""
    total = {name: 0 for name in _lib.STATS_FIELDS}
    total.setdefault("framework_calls", 0)
    total["native_route_layers"] = 0
    total["workspace_out_of_memory"] = 0
    total["budget_replans"] = 0
    for runtime in _runtimes(model):
        for context in runtime.contexts():
            for name, value in context.stats().items():
                total[name] += value
        total["fallback_calls"] += runtime.skipped[0]
        total["framework_calls"] += runtime.skipped[1]
        total["native_route_layers"] += sum(type(m) is _NativeRoutedConv2d
                                            for m in runtime.native_routed)
        total["workspace_out_of_memory"] += runtime.workspace_out_of_memory
        total["budget_replans"] += runtime.budget_replans
    return total


def report(model):
    """Per kernel seen: its op and shape, and what the library knows of it (state, predicted and
    framework time); for benchmarks and debugging."""
    rows = []
    for module in model.modules():
        if not isinstance(module, UcudnnConv2d):
            continue
        for conv in module._ucudnn_convs.values():
            if conv is None:
                continue
            for op, kernel in enumerate(conv.kernels):
                if kernel is None:
                    continue
                rows.append({"op": op, "dims": conv.dims, "groups": conv.groups,
                             "route": "framework_layer" if conv.framework_layer else (
                                 "ask", "plan", "no_plan", "framework")[conv.routes[op]],
                             **conv.context.kernel_info(kernel)})
    return rows
