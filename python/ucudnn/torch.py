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
    """The contexts of one convert() call: one per device, made at its first convolution."""

    def __init__(self, options, workspace_limit=0):
        self.options = options
        self.workspace_limit = workspace_limit
        self.library = _lib.load()
        self._contexts = {}
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

    # A converted model copied shares its runtime (the library's sessions are per process), and
    # one pickled whole (torch.save(model)) gets a new runtime with the same options when loaded.
    def __deepcopy__(self, memo):
        return self

    def __getstate__(self):
        return {"options": self.options, "workspace_limit": self.workspace_limit}

    def __setstate__(self, state):
        self.__init__(state["options"], state["workspace_limit"])


def _is_channels_last(t):
    return t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(
        memory_format=torch.channels_last)


def _math_mode(dtype, device):
    if dtype != torch.float32:
        return _lib.MATH_TENSOR_OP
    # PyTorch's cuDNN math for fp32: TF32 allowed (default math) or strict fp32 (FMA).
    if device.type == "cuda" and not torch.backends.cudnn.allow_tf32:
        return _lib.MATH_FMA
    return _lib.MATH_DEFAULT


class _Conv:
    """One convolution's geometry (padding already symmetric) and how to run its three ops."""

    __slots__ = ("stride", "padding", "dilation", "groups", "runtime")

    def __init__(self, stride, padding, dilation, groups, runtime):
        self.stride, self.padding, self.dilation = stride, padding, dilation
        self.groups, self.runtime = groups, runtime

    def shape(self, op, x, weight, layout):
        """The ucudnnConvShape_t of `op`, or None when the library has no words for it."""
        data_type = _DATA_TYPES.get(x.dtype)
        if data_type is None or weight.dtype != x.dtype:
            return None
        n, c, h, w = x.shape
        k, _, r, s = weight.shape
        return _lib.ConvShape(op, n, c, h, w, k, r, s, self.padding[0], self.padding[1],
                              self.stride[0], self.stride[1], self.dilation[0], self.dilation[1],
                              self.groups, data_type, layout, _math_mode(x.dtype, x.device))

    def run(self, op, x, weight, a, b, out, fmt):
        """Runs `op` through the library into `out` (every operand dense in `fmt`); False when
        the caller must run its own convolution."""
        runtime = self.runtime
        if runtime.recording is not None:
            return False
        context = runtime.context(x.device)
        if context is None:
            return False
        shape = self.shape(op, x, weight, _layout(fmt))
        if shape is None:
            return False
        needed = context.workspace_size(shape, runtime.workspace_limit)
        if needed is None:
            return False
        workspace = None
        if needed > 0:
            workspace = torch.empty(needed, dtype=torch.uint8, device=x.device)
        pointers = (a.data_ptr(), b.data_ptr(), out.data_ptr())
        workspace_pointer = workspace.data_ptr() if workspace is not None else None
        if x.device.type != "cuda":
            return context.convolution(shape, *pointers, None, workspace_pointer, needed)
        stream = torch.cuda.current_stream(x.device).cuda_stream
        if torch.cuda.current_device() == x.device.index:
            return context.convolution(shape, *pointers, stream, workspace_pointer, needed)
        # cuDNN runs on the current device: the context's (the tensors') for the call.
        with torch.cuda.device(x.device):
            return context.convolution(shape, *pointers, stream, workspace_pointer, needed)

    def record(self, x, weight, fmt, needs_input_grad):
        """prepare(): the kernels this convolution will run in a training step."""
        ops = [_lib.FORWARD]
        if needs_input_grad[0]:
            ops.append(_lib.BACKWARD_DATA)
        if needs_input_grad[1]:
            ops.append(_lib.BACKWARD_FILTER)
        for op in ops:
            shape = self.shape(op, x, weight, _layout(fmt))
            if shape is not None:
                self.runtime.recording.setdefault(x.device, []).append(shape)

    def output_size(self, x, weight):
        n, _, h, w = x.shape
        sizes = [n, weight.shape[0]]
        for i, extent in enumerate((h, w)):
            span = self.dilation[i] * (weight.shape[2 + i] - 1) + 1
            sizes.append((extent + 2 * self.padding[i] - span) // self.stride[i] + 1)
        return sizes


def _layout(fmt):
    return _lib.NHWC if fmt == torch.channels_last else _lib.NCHW


def _memory_format(x, weight):
    # As PyTorch's cuDNN convolution chooses: channels-last when either operand is.
    if _is_channels_last(x) or _is_channels_last(weight):
        return torch.channels_last
    return torch.contiguous_format


class _Conv2dFunction(torch.autograd.Function):
    """conv2d without bias; forward, backward-data and backward-filter through the library."""

    @staticmethod
    def forward(ctx, x, weight, conv):
        fmt = _memory_format(x, weight)
        x = x.contiguous(memory_format=fmt)
        weight = weight.contiguous(memory_format=fmt)
        if conv.runtime.recording is not None:
            conv.record(x, weight, fmt, ctx.needs_input_grad)
        ctx.conv = conv
        ctx.save_for_backward(x, weight)
        y = torch.empty(conv.output_size(x, weight), dtype=x.dtype, device=x.device,
                        memory_format=fmt)
        if not conv.run(_lib.FORWARD, x, weight, x, weight, y, fmt):
            y = F.conv2d(x, weight, None, conv.stride, conv.padding, conv.dilation, conv.groups)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        conv = ctx.conv
        fmt = _memory_format(x, weight)
        grad_y = grad_y.contiguous(memory_format=fmt)
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.empty_like(x, memory_format=fmt)
            if not conv.run(_lib.BACKWARD_DATA, x, weight, grad_y, weight, grad_x, fmt):
                grad_x = None
        if ctx.needs_input_grad[1]:
            grad_w = torch.empty_like(weight, memory_format=fmt)
            if not conv.run(_lib.BACKWARD_FILTER, x, weight, x, grad_y, grad_w, fmt):
                grad_w = None
        own_x = ctx.needs_input_grad[0] and grad_x is None
        own_w = ctx.needs_input_grad[1] and grad_w is None
        if own_x or own_w:
            fallback_x, fallback_w = _torch_backward(conv, x, weight, grad_y, own_x, own_w)
            grad_x = fallback_x if own_x else grad_x
            grad_w = fallback_w if own_w else grad_w
        return grad_x, grad_w, None


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


def _autocast_dtype(device):
    """The dtype autocast casts a convolution to on `device`, or None when it is off there."""
    if device.type not in ("cuda", "cpu"):
        return None
    if hasattr(torch, "get_autocast_dtype"):  # PyTorch >= 2.4: one API for every device type
        if not torch.is_autocast_enabled(device.type):
            return None
        return torch.get_autocast_dtype(device.type)
    if device.type == "cuda":
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
    Conv2d (its class is swapped in place), so parameters and state_dict keys are the same."""

    def _conv_forward(self, input, weight, bias):
        unbatched = input.dim() == 3
        if unbatched:
            input = input.unsqueeze(0)
        if input.dim() != 4:
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
            padding = tuple(self.padding)
        cast = _autocast_dtype(input.device)
        if cast is not None and input.is_floating_point() and input.dtype != torch.float64:
            # What autocast does for F.conv2d: its floating operands (not float64) in the
            # autocast dtype.
            input, weight = input.to(cast), weight.to(cast)
            bias = bias.to(cast) if bias is not None else None
        conv = _Conv(tuple(self.stride), padding, tuple(self.dilation), self.groups,
                     self._ucudnn_runtime)
        output = _Conv2dFunction.apply(input, weight, conv)
        if bias is not None:
            output = output + bias.view(1, -1, 1, 1)
        return output.squeeze(0) if unbatched else output


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
            module._ucudnn_runtime = runtime
        elif isinstance(module, UcudnnConv2d):
            module._ucudnn_runtime = runtime
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
