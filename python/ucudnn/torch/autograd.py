"""The autograd Function of a converted layer: forward, backward-data and backward-filter through
the library or PyTorch."""

import torch
import torch.nn.functional as F

from .. import _lib


def conv_forward(x, weight, conv):
    """y = conv(x, weight) without bias (a transposed layer's conv_transpose): the plan's, or
    PyTorch's own; the operands made dense in the call's layout for the call only."""
    memory_format = conv.memory_format
    x = x.contiguous(memory_format=memory_format)
    weight = weight.contiguous(memory_format=memory_format)
    op = conv.passes[0]
    if not conv.framework_now(op):
        # The cheapest allocation calls: no keyword to parse (strides of the layout, LayerConv's).
        y = x.new_empty(conv.out_size) if conv.layout == _lib.NCHW else x.new_empty_strided(
            conv.out_size, conv.out_strides)
        if conv.run(op, x, weight, y):
            return y
    y = conv.torch_forward(x, weight)
    # Same strides as the plan's output (and the fake op's under torch.compile).
    return y if y.is_contiguous(memory_format=memory_format) else y.contiguous(
        memory_format=memory_format)


def conv_backward(conv, x, weight, grad_y, need_x, need_w):
    """(grad_x, grad_w), each None when not needed: the plans', PyTorch's own for the rest. A
    transposed layer's gradient of x is its forward problem's forward (of grad_y), and that of
    its weight the problem's backward-filter with grad_y as the problem's input. x and weight as
    the forward pass got them: made dense in the call's layout here, as PyTorch's own backward
    does, so that no dense copy is held from the forward pass to this one."""
    memory_format = conv.memory_format
    grad_y = grad_y.contiguous(memory_format=memory_format)
    weight = weight.contiguous(memory_format=memory_format)
    if need_w:
        x = x.contiguous(memory_format=memory_format)
    grad_x = grad_w = None
    _, op_x, op_w = conv.passes
    if need_x and not conv.framework_now(op_x):
        grad_x = grad_y.new_empty_strided(conv.in_size, conv.in_strides)
        if not conv.run(op_x, grad_y, weight, grad_x):
            grad_x = None
    if need_w and not conv.framework_now(op_w):
        grad_w = torch.empty_like(weight)
        problem_x, problem_dy = (grad_y, x) if conv.transposed else (x, grad_y)
        if not conv.run(op_w, problem_x, problem_dy, grad_w):
            grad_w = None
    own_x = need_x and grad_x is None
    own_w = need_w and grad_w is None
    if own_x or own_w:
        fallback_x, fallback_w = torch_backward(conv, x.contiguous(memory_format=memory_format),
                                                weight, grad_y, own_x, own_w)
        grad_x = fallback_x if own_x else grad_x
        grad_w = fallback_w if own_w else grad_w
    return grad_x, grad_w


def torch_backward(conv, x, weight, grad_y, need_x, need_w):
    """PyTorch's own convolution backward for the gradients the library did not compute."""
    grad_x, grad_w, _ = torch.ops.aten.convolution_backward(
        grad_y, x, weight, None, list(conv.stride), list(conv.padding), list(conv.dilation),
        conv.transposed, list(conv.output_padding), conv.groups, [need_x, need_w, False])
    return grad_x, grad_w


class ConvFunction(torch.autograd.Function):
    """A convolution (1-D, 2-D, 3-D, or transposed) without bias (the bias is added by PyTorch
    outside): its passes through the library, PyTorch's own for an op the library declines."""

    @staticmethod
    def forward(ctx, x, weight, conv):
        # The operands as the layer got them are saved (what PyTorch's own saves): a dense copy
        # of another layout lives for this call only, not until the backward pass (an NCDHW
        # input of a channels-last 3-D layer held twice: +1.1 GiB at nnU-Net's peak, measured).
        ctx.conv = conv
        ctx.save_for_backward(x, weight)
        return conv_forward(x, weight, conv)

    @staticmethod
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        need_x, need_w, _ = ctx.needs_input_grad
        conv = ctx.conv
        if torch.is_grad_enabled():
            # backward(create_graph=True) (a gradient penalty, MAML): PyTorch's own backward on
            # the autograd graph, whose own derivative PyTorch has; the library's ops have none.
            memory_format = conv.memory_format
            grad_x, grad_w = torch_backward(conv, x.contiguous(memory_format=memory_format),
                                            weight.contiguous(memory_format=memory_format),
                                            grad_y.contiguous(memory_format=memory_format),
                                            need_x, need_w)
        else:
            grad_x, grad_w = conv_backward(conv, x, weight, grad_y, need_x, need_w)
        return grad_x, grad_w, None


if hasattr(torch, "get_autocast_dtype"):  # PyTorch >= 2.4: one API for every device type
    def autocast_dtype(is_cuda):
        """The dtype autocast casts a convolution to on the device, or None when it is off."""
        kind = "cuda" if is_cuda else "cpu"
        return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None
else:
    def autocast_dtype(is_cuda):
        if is_cuda:
            return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None
        return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None


# (device type, spatial dims, transposed, dtype) -> whether autocast runs that convolution in the
# dtype: autocast's op lists differ by device and version (PyTorch 1.13's CPU autocast leaves
# transposed convolutions in fp32, and its bf16 transposed backward has no CPU kernel).
_autocast_lowers = {}


def autocast_lowers(device, spatial, transposed, cast, probe=True):
    """Whether autocast, as it is now, runs PyTorch's own convolution of this kind in `cast` on
    `device`: read from one tiny call of it per process and kind (`probe` False, under tracing:
    the answer known, else True, what autocast does for every convolution on CUDA)."""
    key = (device.type, spatial, transposed, cast)
    known = _autocast_lowers.get(key)
    if known is None:
        if not probe:
            return True
        functions = ((F.conv1d, F.conv2d, F.conv3d) if not transposed else
                     (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d))
        shape = (1, 1) + (1,) * spatial
        try:
            with torch.no_grad():
                y = functions[spatial - 1](torch.ones(shape, device=device),
                                           torch.ones(shape, device=device))
            known = y.dtype == cast
        except RuntimeError:  # no kernel for the probe here: cast, as before the probe
            known = True
        _autocast_lowers[key] = known
    return known


def cast_operands(cast, input, weight, bias):
    """What autocast does for F.conv2d, done here for the library's path: the floating operands in
    the autocast dtype `cast` (None: as they are)."""
    if cast is None:
        return input, weight, bias
    # An operand already in the dtype is not passed through .to(): even a cast that does nothing
    # is a dispatched op, microseconds of a host-bound step (the input, mostly: the previous
    # layer's output is in the autocast dtype already).
    return (input if input.dtype == cast else input.to(cast),
            weight if weight.dtype == cast else weight.to(cast),
            bias if bias is None or bias.dtype == cast else bias.to(cast))


def same_padding(kernel, dilation):
    """padding='same' as PyTorch does it: the symmetric part per dimension, and the extra row or
    column (when the total is odd) that goes at the end through F.pad (same_pad_list)."""
    symmetric, extra = [], []
    for size, dil in zip(kernel, dilation):
        total = dil * (size - 1)
        symmetric.append(total // 2)
        extra.append(total - 2 * (total // 2))
    return tuple(symmetric), extra


def same_pad_list(extra):
    """F.pad's list for same_padding's extra ends: the last axis first, each (before, after)."""
    pads = []
    for end in reversed(extra):
        pads += [0, end]
    return pads


def bias_view(bias, spatial):
    """The bias broadcast over an output of `spatial` axes."""
    return bias.view((1, -1) + (1,) * spatial)
