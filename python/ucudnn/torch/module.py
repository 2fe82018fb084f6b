"""UcudnnConv2d, its Runtime (the library's contexts of one convert()), convert() and
unconvert()."""

import os
import time
import warnings
import weakref

import torch
import torch.nn.functional as F
from torch import nn

from .. import _lib
from .options import DATA_TYPES, INFINITY, NOT_PICKLED, framework_identity, library_options
from .handle import CUDNN_HANDLE_CHOICES, framework_cudnn_handle, restore_framework_search
from .routing import MIN_LAYER_GAIN_US, framework_benchmarks
from .conv import ConvCache, LayerConv, allow_tf32_now, channels_last_call, math_mode, shape_key
from .autograd import Conv2dFunction, autocast_dtype, cast_operands, conv_forward, same_padding
from .custom_ops import custom_ops_available, is_compiling, module_key
from .recording import shape_only_conv


class Runtime:
    """The contexts of one convert() call: one per device, made at its first convolution."""

    def __init__(self, config, workspace_limit=0, min_layer_gain_us=None,
                 cudnn_handle="framework"):
        self.config = dict(config)
        self.options = library_options(self.config)
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
        # Limits lowered where a plan's workspace did not fit (LayerConv._workspace_out_of_memory),
        # over any budget, until the next prepare().
        self.lowered_limits = {}
        # Every converted layer's ConvCache by id: a lowered limit reaches the layers of that
        # shape (a dict is not hashable, so no WeakSet).
        self.conv_caches = weakref.WeakValueDictionary()
        # Times the job's steps changed the liveness budgets (StepBudget.check).
        self.budget_replans = 0
        # prepare(budget="allowance"): the limit of every kernel not in kernel_limits.
        self.budget_limit = None
        # prepare(): the step is host-bound (is_host_bound): a layer's plans save nothing of it.
        self.host_bound = False
        # Layers on the native route (route_native) and the earliest time one is due back.
        self.native_routed = []
        self.native_until = INFINITY
        # The clock of the layers' route rechecks (a test may give another).
        self.clock = time.monotonic
        # prepare()'s route for the step (route.py: "plans" or "native") and why; None before.
        self.decided_route = None
        self.decided_why = ""

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
        key = shape_key(shape)
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
        module.__class__ = NativeRoutedConv2d
        self.native_routed.append(module)
        self.native_until = min(self.native_until, until)

    def restore_native(self):
        """Every layer on the native route back on the adapter's, which asks the library again
        at its next call (at the routes' recheck; before prepare() records or profiles a step)."""
        for module in self.native_routed:
            if type(module) is NativeRoutedConv2d:  # not unconverted meanwhile
                module.__class__ = UcudnnConv2d
        self.native_routed = []
        self.native_until = INFINITY

    # A converted model copied shares its runtime (the library's sessions are per process), and
    # one pickled whole (torch.save(model)) gets a new runtime when loaded, without the options
    # that belong to the saving process's cluster (NOT_PICKLED).
    def __deepcopy__(self, memo):
        return self

    def __getstate__(self):
        kept = {k: v for k, v in self.config.items() if k not in NOT_PICKLED}
        return {"config": kept, "workspace_limit": self.workspace_limit,
                "min_layer_gain_us": self.min_layer_gain_us, "cudnn_handle": self.cudnn_handle}

    def __setstate__(self, state):
        self.__init__(state.get("config", {}), state["workspace_limit"],
                      state.get("min_layer_gain_us"), state.get("cudnn_handle", "framework"))


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
            padding, extra = same_padding(self.kernel_size, self.dilation)
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
        cast = autocast_dtype(is_cuda)
        if cast is not None and not (input.is_floating_point() and input.dtype != torch.float64):
            cast = None  # autocast leaves it as it is
        if is_compiling():
            if custom_ops_available() and not self._ucudnn_framework_layer:
                input, weight, bias = cast_operands(cast, input, weight, bias)
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
            input, weight, bias = cast_operands(cast, input, weight, bias)
            return shape_only_conv(None, conv, input, weight, bias)
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
        input, weight, bias = cast_operands(cast, input, weight, bias)
        if runtime.profiling is not None:
            return shape_only_conv(runtime.profiling, conv, input, weight, bias)
        memory_format = conv.memory_format
        input = input.contiguous(memory_format=memory_format)
        weight = weight.contiguous(memory_format=memory_format)
        y = Conv2dFunction.apply(input, weight, conv) if grad else conv_forward(input, weight, conv)
        # In place: the op's output is not saved for its backward.
        return y if bias is None else y.add_(bias.view(1, -1, 1, 1))

    def _ucudnn_conv_of(self, input, weight, padding, cast):
        """The LayerConv of the call's signature (the operands' dtype that of autocast's `cast` when
        set), made at its first sight; None when the library has no words for it (a dtype it does
        not plan, operands of two dtypes, no context)."""
        channels_last = channels_last_call(input, weight)
        allow_tf32 = allow_tf32_now()
        dtype, weight_dtype = (cast, cast) if cast is not None else (input.dtype, weight.dtype)
        signature = (input.shape, dtype, input.device, weight.shape, weight_dtype, channels_last,
                     allow_tf32, padding)
        convs = self._ucudnn_convs
        conv = convs.get(signature, False)
        if conv is False:
            if len(convs) >= ConvCache.MAX_SIGNATURES:
                convs.clear()
            conv = None
            if dtype in DATA_TYPES and weight_dtype == dtype:
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
        math = math_mode(dtype, input.is_cuda, allow_tf32)
        return LayerConv(runtime, context, input, weight, dtype, geometry, channels_last, math)

    def __setstate__(self, state):
        super().__setstate__(state)
        if "_ucudnn_runtime" in state:  # unpickled or copied: a key of this process, nothing
            self._ucudnn_runtime.conv_caches[id(self._ucudnn_convs)] = self._ucudnn_convs
            self._ucudnn_key = module_key(self)  # decided, the adapter's route
            self._ucudnn_framework_layer = False
            if type(self) is NativeRoutedConv2d:
                self.__class__ = UcudnnConv2d


class NativeRoutedConv2d(UcudnnConv2d):
    """A converted layer on the native route (Runtime.route_native): nn.Conv2d's own forward,
    with nothing of the adapter's in the call."""

    _conv_forward = nn.Conv2d._conv_forward


def recheck_native_routes(module, args):
    """The converted model's forward pre-hook: once per step, the layers on the native route
    back on the adapter's once one is due (Runtime.native_until). Nothing under torch.compile,
    which traces what each layer's route is then."""
    if is_compiling():
        return None
    runtime = module.__dict__.get("_ucudnn_root_runtime")
    if runtime is not None and runtime.clock() >= runtime.native_until:
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
    if cudnn_handle not in CUDNN_HANDLE_CHOICES:
        raise ValueError(f"ucudnn.torch.convert: cudnn_handle must be one of "
                         f"{', '.join(CUDNN_HANDLE_CHOICES)}, got {cudnn_handle!r}")
    config.setdefault("framework", framework_identity())
    runtime = Runtime(config, workspace_limit, min_layer_gain_us, cudnn_handle)
    custom_ops_available()  # registered now, not while torch.compile traces
    model._ucudnn_root_runtime = runtime
    if recheck_native_routes not in model._forward_pre_hooks.values():
        model.register_forward_pre_hook(recheck_native_routes)
    converted = 0
    for module in model.modules():
        if type(module) in (nn.Conv2d, NativeRoutedConv2d):
            module.__class__ = UcudnnConv2d
        if isinstance(module, UcudnnConv2d):
            module._ucudnn_runtime = runtime
            module._ucudnn_convs = ConvCache()
            runtime.conv_caches[id(module._ucudnn_convs)] = module._ucudnn_convs
            module._ucudnn_key = module_key(module)
            module._ucudnn_framework_layer = False
            converted += 1
    left = unconverted_layers(model)
    if left:
        kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(left.items()))
        what = ("the model has no torch.nn.Conv2d to convert: convert() and prepare() leave it "
                "as it is" if not converted else f"{converted} Conv2d layers converted")
        warnings.warn(f"ucudnn.torch.convert: {what}; these convolution layers run PyTorch's "
                      f"own, unconverted: {kinds}", UserWarning, stacklevel=2)
    return model


# The convolution layers of torch.nn that convert() does not convert (PyTorch's own runs them).
UNSUPPORTED_LAYERS = (nn.Conv1d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
                      nn.ConvTranspose3d)


def unconverted_layers(model):
    """{layer type name: count} of `model`'s convolution layers that convert() leaves as they are:
    the UNSUPPORTED_LAYERS and subclasses of Conv2d (their forward may do more than a
    convolution)."""
    left = {}
    for module in model.modules():
        kind = type(module)
        if isinstance(module, UNSUPPORTED_LAYERS) or (
                isinstance(module, nn.Conv2d) and not isinstance(module, UcudnnConv2d)):
            name = kind.__name__ if kind.__module__.startswith("torch.nn") else (
                f"{kind.__module__}.{kind.__qualname__}")
            left[name] = left.get(name, 0) + 1
    return left


def unconvert(model):
    """Undoes convert(): every UcudnnConv2d of `model` is a torch.nn.Conv2d again (the same
    parameters), with nothing of the library left on it (PyTorch's cuDNN benchmark as it was
    before a prepare() turned it off). Returns the model."""
    restore_framework_search()
    for key, hook in list(model._forward_pre_hooks.items()):
        if hook is recheck_native_routes:
            del model._forward_pre_hooks[key]
    model.__dict__.pop("_ucudnn_root_runtime", None)
    for module in model.modules():
        if isinstance(module, UcudnnConv2d):
            module.__class__ = nn.Conv2d
            for name in ("_ucudnn_runtime", "_ucudnn_convs", "_ucudnn_key",
                         "_ucudnn_framework_layer"):
                module.__dict__.pop(name, None)
    return model


def runtimes_of(model):
    """The Runtimes of `model`'s converted layers; a model convert() found no Conv2d in has its
    own (no layer uses it: prepare(), stats() and the rest are no-ops on it). ValueError where
    convert() was never called."""
    seen = []
    for module in model.modules():
        runtime = getattr(module, "_ucudnn_runtime", None)
        if runtime is not None and all(runtime is not r for r in seen):
            seen.append(runtime)
    if not seen:
        root = model.__dict__.get("_ucudnn_root_runtime")
        if root is None:
            raise ValueError("ucudnn.torch: the model has no converted Conv2d (call convert() "
                             "first)")
        seen.append(root)
    return seen


def layer_convs(model):
    """Every LayerConv (a converted layer at one input signature) of `model`."""
    for module in model.modules():
        for conv in getattr(module, "_ucudnn_convs", {}).values():
            if conv is not None:
                yield conv


def require_per_kernel(model, what):
    """ValueError unless every converted layer of `model` plans per kernel: `what` gives each
    kernel a limit of its own."""
    for runtime in runtimes_of(model):
        mode = runtime.workspace_mode()
        if mode != "per_kernel":
            raise ValueError(f"ucudnn.torch.{what} gives each kernel its own limit: it needs "
                             f"workspace_mode='per_kernel', not {mode!r}")
