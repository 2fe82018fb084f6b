"""PyTorch adapter: a model's Conv2d layers run through ucudnn plans.

    import ucudnn.torch
    model = ucudnn.torch.convert(model, server="planner:50051", workspace_bytes="64MiB")
    ucudnn.torch.prepare(model, sample_input)      # optional: declare every kernel up front
    loss = loss_fn(model(x), y); loss.backward()   # convolutions run as planned micro-batches

convert() swaps each torch.nn.Conv2d for a UcudnnConv2d in place (same parameters, buffers and
state_dict keys: a converted model saves and loads like the original). Its forward, backward-data
and backward-filter call the client library's shape-level C API on PyTorch's current CUDA stream
(or, for CPU tensors, on the library's CPU backend), with the workspace a plan asks for taken from
PyTorch's caching allocator. A kernel without a plan runs PyTorch's own convolution, so a step
never fails or waits because the planner is away.

Configuration is the C++ library's: the UCUDNN_* environment, overridden by keyword arguments
(server="h:p" is UCUDNN_SERVER, workspace_mode="total" is UCUDNN_WORKSPACE_MODE, ...).
"""

import torch
import torch.nn.functional as F
from torch import nn

from . import _lib

__all__ = ["UcudnnConv2d", "convert", "kernels", "prepare", "stats", "wait_for_plans", "CONFIG_KEYS"]

# Keyword arguments of convert() and the variables they set (ClientConfig's names).
CONFIG_KEYS = ("server", "token", "tls", "ca_file", "policy", "workspace_mode", "workspace_bytes",
               "cache_path", "deadline_ms", "server_wait_ms", "contribute", "log_level",
               "disable")

_DATA_TYPES = {torch.float32: _lib.FLOAT, torch.float16: _lib.HALF, torch.bfloat16: _lib.BFLOAT16}


def _options(config):
    """'UCUDNN_X=v;...' from keyword arguments; a clear error for an unknown one."""
    entries = []
    for key, value in sorted(config.items()):
        if key not in CONFIG_KEYS:
            raise TypeError(f"ucudnn.torch: unknown option '{key}' (known: {', '.join(CONFIG_KEYS)})")
        if isinstance(value, bool):
            value = "1" if value else "0"
        value = str(value)
        if ";" in value or "\n" in value:
            raise ValueError(f"ucudnn.torch: option '{key}' must not contain ';' or a newline")
        entries.append(f"UCUDNN_{key.upper()}={value}")
    return ";".join(entries)


class Runtime:
    """The contexts of one convert() call: one per device, made at its first convolution; and the
    workspace plans run in, one per device and stream, grown to the largest a plan asked for."""

    def __init__(self, options, workspace_limit=0):
        self.options = options
        self.workspace_limit = workspace_limit
        self.library = _lib.load()
        self._contexts = {}
        # (device index, stream) -> (tensor, address, bytes). A tensor of PyTorch's caching
        # allocator, allocated on its stream and used only there, so that reusing it is ordered
        # like any other tensor of that stream.
        self.workspaces = {}
        # prepare(): convolutions are recorded, not run through the library.
        self.recording = None

    def context(self, device):
        key = (device.type, device.index)
        context = self._contexts.get(key)
        if context is None:
            if device.type == "cuda":
                with torch.cuda.device(device):
                    context = _lib.Context(self.library, "cudnn", self.options)
            elif device.type == "cpu":
                context = _lib.Context(self.library, "cpu", self.options)
            else:
                return None
            self._contexts[key] = context
        return context

    def contexts(self):
        return list(self._contexts.values())

    def grow_workspace(self, device, key, needed):
        """The workspace of `key` with at least `needed` bytes."""
        current = self.workspaces.get(key, _NO_WORKSPACE)
        if current[2] >= needed:
            return current
        if len(self.workspaces) >= _MAX_WORKSPACES:  # streams come and go: forget old ones
            self.workspaces.clear()
        tensor = torch.empty(needed, dtype=torch.uint8, device=device)
        grown = (tensor, tensor.data_ptr(), needed)
        self.workspaces[key] = grown
        return grown

    # A converted model copied shares its runtime (the library's sessions are per process), and
    # one pickled whole (torch.save(model)) gets a new runtime with the same options when loaded.
    def __deepcopy__(self, memo):
        return self

    def __getstate__(self):
        return {"options": self.options, "workspace_limit": self.workspace_limit}

    def __setstate__(self, state):
        self.__init__(state["options"], state["workspace_limit"])


_NO_WORKSPACE = (None, None, 0)
_SUCCESS = _lib.SUCCESS
_MAX_WORKSPACES = 16
_CHANNELS_LAST = torch.channels_last

# What the hot path asks PyTorch, through the cheapest call each version has: these run per
# convolution call, and the public wrappers cost microseconds (torch.cuda.current_stream makes a
# Stream object, torch.backends.cudnn.allow_tf32 goes through a module property).
_allow_tf32 = getattr(torch._C, "_get_cudnn_allow_tf32", None) or (
    lambda: torch.backends.cudnn.allow_tf32)
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)
_current_device = getattr(torch._C, "_cuda_getDevice", None) or (
    lambda: torch.cuda.current_device())


def _is_channels_last(t):
    return not t.is_contiguous() and t.is_contiguous(memory_format=_CHANNELS_LAST)


def _math_mode(dtype, is_cuda, allow_tf32):
    if dtype != torch.float32:
        return _lib.MATH_TENSOR_OP
    # PyTorch's cuDNN math for fp32: TF32 allowed (default math) or strict fp32 (FMA).
    return _lib.MATH_FMA if is_cuda and not allow_tf32 else _lib.MATH_DEFAULT


class _Conv:
    """One convolution of one module at one input signature (shape, dtype, device, layout, math):
    its geometry (padding already symmetric), output size, and the library's kernel handle of each
    of its three ops, resolved at the op's first call. Made once per signature (_ConvCache), so
    that a call reads no shape and builds no ctypes structure."""

    __slots__ = ("runtime", "context", "run_kernel", "workspaces", "device", "index", "stride",
                 "padding", "dilation", "groups", "memory_format", "out_size", "dims",
                 "data_type", "layout", "math", "kernels")

    def __init__(self, runtime, context, x, weight, geometry, channels_last, math):
        self.runtime, self.context = runtime, context
        self.run_kernel = runtime.library.ShapeKernelRun
        self.workspaces = runtime.workspaces
        self.device = x.device
        self.index = x.get_device() if x.is_cuda else -1
        self.stride, self.padding, self.dilation, self.groups = geometry
        self.memory_format = _CHANNELS_LAST if channels_last else torch.contiguous_format
        self.layout = _lib.NHWC if channels_last else _lib.NCHW
        self.data_type = _DATA_TYPES[x.dtype]
        self.math = math
        n, c, h, w = x.shape
        k, _, r, s = weight.shape
        self.dims = (n, c, h, w, k, r, s)
        sizes = [n, k]
        for i, extent in enumerate((h, w)):
            span = self.dilation[i] * ((r, s)[i] - 1) + 1
            sizes.append((extent + 2 * self.padding[i] - span) // self.stride[i] + 1)
        self.out_size = sizes
        self.kernels = [None, None, None]  # by op

    def shape(self, op):
        """The ucudnnConvShape_t of `op`."""
        return _lib.ConvShape(op, *self.dims, self.padding[0], self.padding[1], self.stride[0],
                              self.stride[1], self.dilation[0], self.dilation[1], self.groups,
                              self.data_type, self.layout, self.math)

    def run(self, op, a, b, out):
        """Runs `op` through the library into `out` (every operand dense in the signature's
        layout): True when its plan ran, False when the caller must run its own convolution."""
        kernel = self.kernels[op] or self._declare(op)
        index = self.index
        stream = None
        if index >= 0:
            stream = _raw_stream(index)
            if _current_device() != index:
                # cuDNN runs on the current device: the context's (the tensors') for the call.
                with torch.cuda.device(index):
                    return self.run(op, a, b, out)
        # Held until the call returns: another thread may replace the stream's workspace.
        workspace = self.workspaces.get((index, stream), _NO_WORKSPACE)
        status = self.run_kernel(kernel, a.data_ptr(), b.data_ptr(), out.data_ptr(), stream,
                                 workspace[1], workspace[2])
        if status == _SUCCESS:
            return True
        return self._retry(status, kernel, a, b, out, stream)

    def _declare(self, op):
        kernel = self.kernels[op] = self.context.kernel(self.shape(op),
                                                        self.runtime.workspace_limit)
        return kernel

    def _retry(self, status, kernel, a, b, out, stream):
        """run() past a call that did not run the plan: once more with a workspace grown to the
        plan's need (rare: a kernel needs more than any before it on this stream)."""
        if status == _lib.WORKSPACE_TOO_SMALL:
            needed = self.context.kernel_workspace_size(kernel)
            workspace = self.runtime.grow_workspace(self.device, (self.index, stream),
                                                    needed or 0)
            status = self.run_kernel(kernel, a.data_ptr(), b.data_ptr(), out.data_ptr(), stream,
                                     workspace[1], workspace[2])
        if status == _SUCCESS:
            return True
        # WORKSPACE_TOO_SMALL again: the plan changed meanwhile (not counted as a fallback).
        if status in (_lib.NO_PLAN, _lib.WORKSPACE_TOO_SMALL):
            return False
        self.runtime.library.check("ucudnnShapeKernelRun", status)  # raises
        return False

    def record(self, needs_x, needs_w):
        """prepare(): the kernels this convolution will run in a training step."""
        ops = [_lib.FORWARD]
        if needs_x:
            ops.append(_lib.BACKWARD_DATA)
        if needs_w:
            ops.append(_lib.BACKWARD_FILTER)
        recorded = self.runtime.recording.setdefault(self.device, [])
        recorded.extend(self.shape(op) for op in ops)


class _ConvCache(dict):
    """A module's _Conv per input signature. Neither copied nor pickled (its kernel handles belong
    to this process's contexts): a copy starts empty."""

    MAX_SIGNATURES = 64  # beyond this (inputs of ever new sizes) it starts over

    def __reduce__(self):
        return (_ConvCache, ())


class _Conv2dFunction(torch.autograd.Function):
    """conv2d; forward, backward-data and backward-filter through the library, the bias added and
    its gradient summed here; PyTorch's own convolution for an op the library declines."""

    @staticmethod
    def forward(ctx, x, weight, bias, conv):
        ctx.conv = conv
        ctx.save_for_backward(x, weight)
        return _forward(x, weight, bias, conv)

    @staticmethod
    def backward(ctx, grad_y):
        if torch.is_grad_enabled():  # backward(create_graph=True): these are not differentiable
            return _once_differentiable_backward(ctx, grad_y)
        return _backward(ctx, grad_y)


def _forward(x, weight, bias, conv):
    if conv.layout == _lib.NCHW:
        y = x.new_empty(conv.out_size)  # the cheapest allocation call
    else:
        y = torch.empty(conv.out_size, dtype=x.dtype, device=conv.device,
                        memory_format=_CHANNELS_LAST)
    if not conv.run(_lib.FORWARD, x, weight, y):
        return F.conv2d(x, weight, bias, conv.stride, conv.padding, conv.dilation, conv.groups)
    if bias is not None:
        y.add_(bias.view(1, -1, 1, 1))
    return y


def _backward(ctx, grad_y):
    x, weight = ctx.saved_tensors
    conv = ctx.conv
    need_x, need_w, need_b, _ = ctx.needs_input_grad
    grad_y = grad_y.contiguous(memory_format=conv.memory_format)
    grad_x = grad_w = grad_b = None
    if need_x:
        grad_x = torch.empty_like(x)  # x is dense in the signature's layout: so is this
        if not conv.run(_lib.BACKWARD_DATA, grad_y, weight, grad_x):
            grad_x = None
    if need_w:
        grad_w = torch.empty_like(weight)
        if not conv.run(_lib.BACKWARD_FILTER, x, grad_y, grad_w):
            grad_w = None
    if need_b:
        grad_b = grad_y.sum((0, 2, 3))
    own_x = need_x and grad_x is None
    own_w = need_w and grad_w is None
    if own_x or own_w:
        fallback_x, fallback_w = _torch_backward(conv, x, weight, grad_y, own_x, own_w)
        grad_x = fallback_x if own_x else grad_x
        grad_w = fallback_w if own_w else grad_w
    return grad_x, grad_w, grad_b, None


_once_differentiable_backward = torch.autograd.function.once_differentiable(_backward)


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


def _same_padding(kernel, dilation):
    """padding='same' as PyTorch does it: the symmetric part per dimension, and the extra row or
    column (when the total is odd) that goes at the end through F.pad."""
    symmetric, extra = [], []
    for size, dil in zip(kernel, dilation):
        total = dil * (size - 1)
        symmetric.append(total // 2)
        extra.append(total - 2 * (total // 2))
    return tuple(symmetric), extra


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
        if cast is not None and input.is_floating_point() and input.dtype != torch.float64:
            # What autocast does for F.conv2d: its floating operands (not float64) in the
            # autocast dtype.
            input, weight = input.to(cast), weight.to(cast)
            bias = bias.to(cast) if bias is not None else None
        # As PyTorch's cuDNN convolution chooses: channels-last when either operand is.
        channels_last = _is_channels_last(input) or _is_channels_last(weight)
        allow_tf32 = _allow_tf32()
        signature = (input.shape, input.dtype, input.get_device() if is_cuda else -1,
                     weight.shape, weight.dtype, channels_last, allow_tf32, padding)
        convs = self._ucudnn_convs
        conv = convs.get(signature)
        if conv is None:
            if len(convs) >= _ConvCache.MAX_SIGNATURES:
                convs.clear()
            conv = convs[signature] = self._ucudnn_make_conv(input, weight, padding,
                                                              channels_last, allow_tf32)
        runtime = self._ucudnn_runtime
        if conv is not None and runtime.recording is not None:
            grad = torch.is_grad_enabled()
            conv.record(grad and input.requires_grad, grad and weight.requires_grad)
        if conv is None or runtime.recording is not None:
            return F.conv2d(input, weight, bias, self.stride, padding, self.dilation, self.groups)
        if channels_last:
            input = input.contiguous(memory_format=_CHANNELS_LAST)
            weight = weight.contiguous(memory_format=_CHANNELS_LAST)
        else:
            input, weight = input.contiguous(), weight.contiguous()
        if torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad or (
                bias is not None and bias.requires_grad)):
            return _Conv2dFunction.apply(input, weight, bias, conv)
        return _forward(input, weight, bias, conv)  # nothing to differentiate: no autograd node

    def _ucudnn_make_conv(self, input, weight, padding, channels_last, allow_tf32):
        """The _Conv of a new signature, or None when the library has no words for it (a
        dtype it does not plan, operands of two dtypes, a device without a context)."""
        data_type = _DATA_TYPES.get(input.dtype)
        if data_type is None or weight.dtype != input.dtype:
            return None
        runtime = self._ucudnn_runtime
        context = runtime.context(input.device)
        if context is None:
            return None
        geometry = (tuple(self.stride), tuple(padding), tuple(self.dilation), self.groups)
        math = _math_mode(input.dtype, input.is_cuda, allow_tf32)
        return _Conv(runtime, context, input, weight, geometry, channels_last, math)


def convert(model, workspace_limit=0, **config):
    """Runs every torch.nn.Conv2d of `model` (the model itself included) through ucudnn; the
    model is changed in place and returned. `config`: the library's options by their
    UCUDNN_* names in lower case without the prefix (CONFIG_KEYS), over the environment.
    `workspace_limit`: per-kernel mode, each kernel's workspace limit in bytes (0: the
    configured UCUDNN_WORKSPACE_BYTES, else 64 MiB). Subclasses of Conv2d are left as they are
    (their forward may do more than a convolution)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"ucudnn.torch.convert: expected a torch.nn.Module, got {type(model)}")
    if not isinstance(workspace_limit, int) or workspace_limit < 0:
        raise ValueError(f"ucudnn.torch.convert: workspace_limit must be an int >= 0, got "
                         f"{workspace_limit!r}")
    runtime = Runtime(_options(config), workspace_limit)
    for module in model.modules():
        if type(module) is nn.Conv2d:
            module.__class__ = UcudnnConv2d
        if isinstance(module, UcudnnConv2d):
            module._ucudnn_runtime = runtime
            module._ucudnn_convs = _ConvCache()
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
    are those the gradients need: no backward-data for a layer whose input needs no gradient)."""
    runtimes = _runtimes(model)
    # The pass must leave the model as it was: batch-norm statistics and the like.
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    for runtime in runtimes:
        runtime.recording = {}
    try:
        with torch.enable_grad():
            model(*sample_inputs)
        with torch.no_grad():
            for buffer, saved in buffers:
                buffer.copy_(saved)
        return {(runtime, device): shapes for runtime in runtimes
                for device, shapes in runtime.recording.items()}
    finally:
        for runtime in runtimes:
            runtime.recording = None


def prepare(model, *sample_inputs, wait_ms=0):
    """Declares every kernel of a training step (kernels()) and plans them now: in the total
    modes, the whole network under one budget. `sample_inputs` at the training batch size.
    `wait_ms`: how long to wait for the server's answers (0: plans arrive in the background)."""
    for (runtime, device), shapes in kernels(model, *sample_inputs).items():
        context = runtime.context(device)
        if context is not None:
            context.prepare(shapes, runtime.workspace_limit)
    if wait_ms > 0:
        wait_for_plans(model, wait_ms)


def wait_for_plans(model, timeout_ms):
    """Waits up to timeout_ms for the server's answers for every kernel seen; True when none is
    still waiting. For setup and tests, not inside a training step."""
    answered = True
    for runtime in _runtimes(model):
        for context in runtime.contexts():
            answered = context.wait_for_plans(timeout_ms) and answered
    return answered


def stats(model):
    """The library's counters (ucudnn::ClientStats) summed over the model's contexts."""
    total = {name: 0 for name in _lib.STATS_FIELDS}
    for runtime in _runtimes(model):
        for context in runtime.contexts():
            for name, value in context.stats().items():
                total[name] += value
    return total
