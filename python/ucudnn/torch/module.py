"""UcudnnConv2d, its Runtime (the library's contexts of one convert()), convert() and
unconvert()."""

import logging
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
from .conv import (ConvCache, LayerConv, allow_tf32_now, channels_last_call, math_mode,
                   shape_key, torch_convolution)
from .autograd import (ConvFunction, autocast_dtype, autocast_lowers, bias_view, cast_operands,
                       conv_forward, same_pad_list, same_padding)
from .custom_ops import (custom_ops_available, in_call_layout, is_compiling, module_key,
                         op_channels_last)
from .recording import shape_only_conv

_log = logging.getLogger("ucudnn.torch")


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
        # kernels() of a torch.compile'd model: the calls laid out as its custom op lays them out
        # (op_channels_last), not as eager calls are (channels_last_call).
        self.compiled_layouts = False
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
        # prepare()'s route for the step (route.py: "plans" or "native"), how it was decided
        # (route.decide's "source") and why; None before.
        self.decided_route = None
        self.decided_source = None
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
        """`module`'s calls run torch.nn's own forward, unasked and uncounted, until `until`
        (the step's root hook or restore_native() brings it back): a layer whose every op runs
        PyTorch's own then costs a host-bound step exactly what it costs unconverted."""
        module.__class__ = NATIVE_OF_CONVERTED[type(module)]
        self.native_routed.append(module)
        self.native_until = min(self.native_until, until)

    def restore_native(self):
        """Every layer on the native route back on the adapter's, which asks the library again
        at its next call (at the routes' recheck; before prepare() records or profiles a step)."""
        for module in self.native_routed:
            leave_native_route(module)
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


class UcudnnConvolution:
    """What every converted convolution layer has: its convolution through ucudnn. Mixed into a
    subclass of each torch.nn convolution (UcudnnConv1d ... UcudnnConvTranspose3d), made by
    convert() from an existing layer (its class is swapped in place), so parameters and
    state_dict keys are the same. Its stride, padding, dilation and groups are read at an input
    signature's first call."""

    _ucudnn_transposed = False

    def _ucudnn_batched(self, input):
        """(input with a batch axis, whether it had none), as torch.nn takes unbatched input."""
        spatial = self._ucudnn_spatial
        if input.dim() == spatial + 1:
            return input.unsqueeze(0), True
        if input.dim() != spatial + 2:
            raise ValueError(f"{type(self).__name__}: expected a {spatial + 1}-D or "
                             f"{spatial + 2}-D input, got {input.dim()}-D")
        return input, False

    def _ucudnn_torch(self, input, weight, bias, padding, output_padding):
        """PyTorch's own convolution of the layer, as unconverted."""
        return torch_convolution(input, weight, bias, self.stride, padding, self.dilation,
                                 self.groups, self._ucudnn_transposed, output_padding)

    def _ucudnn_conv(self, input, weight, bias, padding, output_padding=None):
        is_cuda = input.is_cuda
        if not is_cuda and not input.is_cpu:
            # A device the library has no backend for.
            return self._ucudnn_torch(input, weight, bias, padding, output_padding)
        spatial = self._ucudnn_spatial
        output_padding = tuple(output_padding) if output_padding is not None else (0,) * spatial
        cast = autocast_dtype(is_cuda)
        if cast is not None and not (input.is_floating_point() and input.dtype != torch.float64):
            cast = None  # autocast leaves it as it is
        if is_compiling():
            if custom_ops_available() and not self._ucudnn_framework_layer:
                if cast is not None and not autocast_lowers(
                        input.device, spatial, self._ucudnn_transposed, cast, probe=False):
                    cast = None  # autocast leaves this kind of convolution in its dtype here
                input, weight, bias = cast_operands(cast, input, weight, bias)
                input, weight = in_call_layout(input, weight)
                y = torch.ops.ucudnn.convolution(input, weight, list(self.stride), list(padding),
                                                 list(self.dilation), self._ucudnn_transposed,
                                                 list(output_padding), self.groups,
                                                 self._ucudnn_key)
                return y if bias is None else y + bias_view(bias, spatial)
            return self._ucudnn_torch(input, weight, bias, padding, output_padding)
        runtime = self._ucudnn_runtime
        conv = self._ucudnn_conv_of(input, weight, padding, cast, output_padding)
        if conv is not None and runtime.recording is not None:
            grad = torch.is_grad_enabled()
            conv.record(grad and input.requires_grad, grad and weight.requires_grad)
            input, weight, bias = cast_operands(conv.cast, input, weight, bias)
            return shape_only_conv(None, conv, input, weight, bias)
        # PyTorch's own on the operands as given: autocast casts them inside F.conv2d as for an
        # unconverted layer (in C++, its weight cast cached for the autocast region), which a
        # cast here in Python would cost a host-bound step several microseconds per operand.
        if conv is None:
            return self._ucudnn_torch(input, weight, bias, padding, output_padding)
        grad = torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad)
        need_x = grad and input.requires_grad
        need_w = grad and weight.requires_grad
        if runtime.profiling is None:
            until = conv.framework_until(need_x, need_w)
            if until:
                # Every op of the call runs PyTorch's own: the unconverted layer's path, and
                # torch.nn's own forward for the layer's next calls till then (route_native).
                runtime.route_native(self, until)
                return self._ucudnn_torch(input, weight, bias, padding, output_padding)
        input, weight, bias = cast_operands(conv.cast, input, weight, bias)
        if runtime.profiling is not None:
            return shape_only_conv(runtime.profiling, conv, input, weight, bias)
        # The operands made dense in the call's layout inside (conv_forward), not saved so.
        y = ConvFunction.apply(input, weight, conv) if grad else conv_forward(input, weight, conv)
        # In place: the op's output is not saved for its backward.
        return y if bias is None else y.add_(bias_view(bias, spatial))

    def _ucudnn_conv_of(self, input, weight, padding, cast, output_padding, channels_last=None):
        """The LayerConv of the call's signature (under autocast's `cast` when set: the operands'
        dtype that, where autocast lowers this kind of convolution), made at its first sight; None
        when the library has no words for it (a dtype it does not plan, operands of two dtypes,
        no context, a shape outside its limits). `channels_last`: the call's layout where the
        caller decided it (the custom op), else by the eager rule (channels_last_call), or the
        custom op's while kernels() declares a compiled model's (Runtime.compiled_layouts)."""
        if channels_last is None:
            rule = op_channels_last if self._ucudnn_runtime.compiled_layouts else channels_last_call
            channels_last = rule(input, weight)
        allow_tf32 = allow_tf32_now()
        dtype, weight_dtype = (cast, cast) if cast is not None else (input.dtype, weight.dtype)
        signature = (input.shape, dtype, input.device, weight.shape, weight_dtype, channels_last,
                     allow_tf32, padding, output_padding)
        convs = self._ucudnn_convs
        conv = convs.get(signature, False)
        if conv is False:
            if len(convs) >= ConvCache.MAX_SIGNATURES:
                convs.clear()
            if cast is not None and not autocast_lowers(input.device, self._ucudnn_spatial,
                                                        self._ucudnn_transposed, cast):
                # Autocast leaves this kind of convolution in its dtype here: so does the layer.
                cast, dtype, weight_dtype = None, input.dtype, weight.dtype
            conv = None
            if dtype in DATA_TYPES and weight_dtype == dtype:
                conv = self._ucudnn_make_conv(input, weight, padding, output_padding,
                                              channels_last, allow_tf32, dtype, cast)
            convs[signature] = conv
        return conv

    def _ucudnn_make_conv(self, input, weight, padding, output_padding, channels_last,
                          allow_tf32, dtype, cast):
        runtime = self._ucudnn_runtime
        context = runtime.context(input.device)
        if context is None:
            return None
        geometry = (tuple(self.stride), tuple(padding), tuple(self.dilation), self.groups,
                    output_padding)
        math = math_mode(dtype, input.is_cuda, allow_tf32)
        conv = LayerConv(runtime, context, input, weight, dtype, geometry, channels_last, math,
                         self._ucudnn_transposed, cast)
        refused = runtime.library.refusal(conv.shape(conv.passes[0]))
        if refused:
            # Outside the library's limits: PyTorch's own for this signature, as unconverted. An
            # empty batch is routine (a detection head with no region), anything else is said.
            log = _log.debug if input.shape[0] == 0 else _log.info
            log("%s: PyTorch's own for input %s: %s", type(self).__name__, tuple(input.shape),
                refused)
            return None
        return conv

    def __reduce_ex__(self, protocol):
        # A class made for a subclass (converted_class) has no importable name: pickled as its
        # subclass, made again when loaded.
        cls = type(self)
        converted = CONVERTED_OF_NATIVE.get(cls, cls)
        original = TORCH_OF_CONVERTED.get(converted)
        if original is None or CONVERTED_OF_TORCH.get(original) is converted:
            return super().__reduce_ex__(protocol)
        state = self.__getstate__() if hasattr(self, "__getstate__") else self.__dict__
        return (rebuild_converted, (original, cls is not converted), state)

    def __setstate__(self, state):
        super().__setstate__(state)
        if "_ucudnn_runtime" in state:  # unpickled or copied: a key of this process, nothing
            self._ucudnn_runtime.conv_caches[id(self._ucudnn_convs)] = self._ucudnn_convs
            self._ucudnn_key = module_key(self)  # decided, the adapter's route
            self._ucudnn_framework_layer = False
            leave_native_route(self)


class UcudnnConvNd(UcudnnConvolution):
    """A converted convolution (not transposed): torch.nn's _conv_forward through ucudnn."""

    def _conv_forward(self, input, weight, bias):
        input, unbatched = self._ucudnn_batched(input)
        if self.padding_mode != "zeros":
            # As torch.nn: explicit padding of the mode, then a convolution without padding.
            input = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            padding = (0,) * self._ucudnn_spatial
        elif self.padding == "valid":
            padding = (0,) * self._ucudnn_spatial
        elif self.padding == "same":
            padding, extra = same_padding(self.kernel_size, self.dilation)
            if any(extra):
                input = F.pad(input, same_pad_list(extra))
        else:
            padding = self.padding
        output = self._ucudnn_conv(input, weight, bias, tuple(padding))
        return output.squeeze(0) if unbatched else output


class UcudnnConvTransposeNd(UcudnnConvolution):
    """A converted transposed convolution: torch.nn's forward through ucudnn, planned as the
    backward-data of its forward problem."""

    _ucudnn_transposed = True

    def forward(self, input, output_size=None):
        if self.padding_mode != "zeros":
            raise ValueError(f"Only \"zeros\" padding mode is supported for "
                             f"{type(self).__name__}")
        input, unbatched = self._ucudnn_batched(input)
        if output_size is not None and len(output_size) == self._ucudnn_spatial + 1:
            output_size = [input.shape[0]] + list(output_size)  # an unbatched call's
        output_padding = self._output_padding(input, output_size, self.stride, self.padding,
                                              self.kernel_size, self._ucudnn_spatial,
                                              self.dilation)
        output = self._ucudnn_conv(input, self.weight, self.bias, tuple(self.padding),
                                   tuple(output_padding))
        return output.squeeze(0) if unbatched else output


class UcudnnConv1d(UcudnnConvNd, nn.Conv1d):
    """A torch.nn.Conv1d through ucudnn (planned as a 2-D convolution of height 1)."""
    _ucudnn_spatial = 1


class UcudnnConv2d(UcudnnConvNd, nn.Conv2d):
    """A torch.nn.Conv2d through ucudnn."""
    _ucudnn_spatial = 2


class UcudnnConv3d(UcudnnConvNd, nn.Conv3d):
    """A torch.nn.Conv3d through ucudnn."""
    _ucudnn_spatial = 3


class UcudnnConvTranspose1d(UcudnnConvTransposeNd, nn.ConvTranspose1d):
    """A torch.nn.ConvTranspose1d through ucudnn."""
    _ucudnn_spatial = 1


class UcudnnConvTranspose2d(UcudnnConvTransposeNd, nn.ConvTranspose2d):
    """A torch.nn.ConvTranspose2d through ucudnn."""
    _ucudnn_spatial = 2


class UcudnnConvTranspose3d(UcudnnConvTransposeNd, nn.ConvTranspose3d):
    """A torch.nn.ConvTranspose3d through ucudnn."""
    _ucudnn_spatial = 3


# torch.nn's convolution layers and what convert() makes of each.
CONVERTED_OF_TORCH = {
    nn.Conv1d: UcudnnConv1d, nn.Conv2d: UcudnnConv2d, nn.Conv3d: UcudnnConv3d,
    nn.ConvTranspose1d: UcudnnConvTranspose1d, nn.ConvTranspose2d: UcudnnConvTranspose2d,
    nn.ConvTranspose3d: UcudnnConvTranspose3d,
}
TORCH_OF_CONVERTED = {converted: torch_class
                      for torch_class, converted in CONVERTED_OF_TORCH.items()}


def native_routed_class(converted):
    """A converted layer's class on the native route (Runtime.route_native): torch.nn's own
    forward, with nothing of the adapter's in the call."""
    torch_class = TORCH_OF_CONVERTED[converted]
    method = "forward" if converted._ucudnn_transposed else "_conv_forward"
    return type("NativeRouted" + torch_class.__name__, (converted,),
                {method: getattr(torch_class, method), "__module__": __name__,
                 "__doc__": native_routed_class.__doc__})


NATIVE_OF_CONVERTED = {converted: native_routed_class(converted)
                       for converted in TORCH_OF_CONVERTED}
CONVERTED_OF_NATIVE = {native: converted for converted, native in NATIVE_OF_CONVERTED.items()}
# Converted classes made for subclasses of torch.nn's layers (converted_class), by subclass.
CONVERTED_OF_SUBCLASS = {}


def leave_native_route(module):
    """`module` back on the adapter's route where it is on the native route (not where it was
    unconverted meanwhile)."""
    converted = CONVERTED_OF_NATIVE.get(type(module))
    if converted is not None:
        module.__class__ = converted


def converted_class(kind):
    """The class convert() gives a layer of type `kind`, or None where it leaves it as it is. A
    subclass of a torch.nn convolution that keeps torch.nn's forward (torchvision's video
    models' Conv3DSimple, which only sets its arguments) gets a class of its own that is both
    (a subclass still isinstance of itself); one whose forward does more is left as it is."""
    target = CONVERTED_OF_TORCH.get(kind) or CONVERTED_OF_NATIVE.get(kind)
    if target is not None or issubclass(kind, UcudnnConvolution):
        return target
    made = CONVERTED_OF_SUBCLASS.get(kind)
    if made is not None:
        return made
    for base, converted in CONVERTED_OF_TORCH.items():
        if not issubclass(kind, base):
            continue
        if any(getattr(kind, name, None) is not getattr(base, name, None)
               for name in ("forward", "_conv_forward")):
            return None
        # Both: converted's forward first, then the subclass's own (its constructor, helpers).
        made = type(kind.__name__, (converted, kind),
                    {"__module__": kind.__module__, "__qualname__": kind.__qualname__,
                     "__doc__": kind.__doc__})
        CONVERTED_OF_SUBCLASS[kind] = made
        TORCH_OF_CONVERTED[made] = kind
        NATIVE_OF_CONVERTED[made] = native = native_routed_class(made)
        CONVERTED_OF_NATIVE[native] = made
        return made
    return None


def rebuild_converted(original, native_routed):
    """Unpickling a converted layer of a subclass (UcudnnConvolution.__reduce_ex__): an empty
    instance of its converted class (on the native route if it was), made again in this
    process; pickle then sets its state."""
    converted = converted_class(original)
    cls = NATIVE_OF_CONVERTED[converted] if native_routed else converted
    return cls.__new__(cls)


NativeRoutedConv2d = NATIVE_OF_CONVERTED[UcudnnConv2d]


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
    """Runs every convolution layer of `model` (the model itself included) through ucudnn:
    torch.nn's Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d and ConvTranspose3d
    (CONVERTED_OF_TORCH); the model is changed in place and returned. `config`: the library's
    options by their UCUDNN_* names in lower case without the prefix (CONFIG_KEYS), over the
    environment, checked here (ValueError or TypeError naming the bad one). `framework` defaults to
    framework_identity(). `workspace_limit`: per-kernel mode, each kernel's workspace limit in bytes
    (0: the configured UCUDNN_WORKSPACE_BYTES, else 64 MiB). `min_layer_gain_us`: where PyTorch does
    not benchmark (torch.backends.cudnn.benchmark off when converted), a layer runs the library's
    plans only where they save at least this much per step against PyTorch's own (device time, by
    the cluster's timings; default MIN_LAYER_GAIN_US, about the library's host cost per layer);
    elsewhere it runs PyTorch's own whole, as unconverted. In a host-bound step their saving counts
    as nothing (0 keeps every plan). Where PyTorch benchmarks, the planner gives a kernel's ties
    (within FRAMEWORK_MARGIN) to ucudnn, and a layer of a step that is not host-bound runs every
    plan it has (unless min_layer_gain_us is infinite): no benchmark of PyTorch's runs in the job
    for it. `cudnn_handle`: "framework" (the default) runs the plans on PyTorch's own cuDNN handle
    where it can be borrowed (framework_cudnn_handle(); else as "own"), so that the library puts no
    handle of its own on the device; "own" gives each device's context a handle of the library's. A
    subclass of those is converted where it keeps torch.nn's forward (converted_class), else left as
    it is (its forward may do more than a convolution), named in a UserWarning, as is a model with
    no convolution layer (a no-op then)."""
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
        target = converted_class(type(module))
        if target is not None:
            module.__class__ = target
        if isinstance(module, UcudnnConvolution):
            module._ucudnn_runtime = runtime
            module._ucudnn_convs = ConvCache()
            runtime.conv_caches[id(module._ucudnn_convs)] = module._ucudnn_convs
            module._ucudnn_key = module_key(module)
            module._ucudnn_framework_layer = False
            converted += 1
    left = unconverted_layers(model)
    if left or not converted:
        kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(left.items()))
        what = (f"{converted} convolution layers converted" if converted else
                "the model has no torch.nn convolution layer to convert: convert() and prepare() "
                "leave it as it is")
        rest = (f"; these convolution layers run PyTorch's own, unconverted: {kinds}" if left
                else "")
        warnings.warn(f"ucudnn.torch.convert: {what}{rest}", UserWarning, stacklevel=2)
    return model


def unconverted_layers(model):
    """{layer type name: count} of `model`'s convolution layers that convert() leaves as they are:
    subclasses of torch.nn's convolutions (their forward may do more than a convolution) and any
    other torch.nn convolution type that convert() does not know (torch.nn's _ConvNd)."""
    left = {}
    for module in model.modules():
        kind = type(module)
        if isinstance(module, nn.modules.conv._ConvNd) and not isinstance(
                module, UcudnnConvolution):
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
        if isinstance(module, UcudnnConvolution):
            module.__class__ = TORCH_OF_CONVERTED[CONVERTED_OF_NATIVE.get(type(module),
                                                                         type(module))]
            for name in ("_ucudnn_runtime", "_ucudnn_convs", "_ucudnn_key",
                         "_ucudnn_framework_layer"):
                module.__dict__.pop(name, None)
    return model


def runtimes_of(model):
    """The Runtimes of `model`'s converted layers; a model convert() found no convolution in has
    its own (no layer uses it: prepare(), stats() and the rest are no-ops on it). ValueError
    where convert() was never called."""
    seen = []
    for module in model.modules():
        runtime = getattr(module, "_ucudnn_runtime", None)
        if runtime is not None and all(runtime is not r for r in seen):
            seen.append(runtime)
    if not seen:
        root = model.__dict__.get("_ucudnn_root_runtime")
        if root is None:
            raise ValueError("ucudnn.torch: the model has no converted convolution (call "
                             "convert() first)")
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
