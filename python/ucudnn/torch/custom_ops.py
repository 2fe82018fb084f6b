"""The torch.library custom ops (ucudnn::convolution and its backward) that torch.compile traces,
and the registry of converted modules they find."""

import weakref

import torch

from .conv import (channels_last_call, memory_format_of, output_size, pytorch_layout_call,
                   torch_convolution)
from .autograd import conv_backward, conv_forward


# Converted modules by key, for the custom op's implementation to find its module's signature
# cache (an op's arguments are tensors and numbers).
MODULES = weakref.WeakValueDictionary()


_next_key = [0]


def module_key(module):
    key = _next_key[0] = _next_key[0] + 1
    MODULES[key] = module
    return key


_custom_ops = None  # not tried yet; then torch.ops.ucudnn, or False (this PyTorch has none)


def register_custom_ops():
    """ucudnn::convolution and ucudnn::convolution_backward (every rank, transposed or not) with
    fake implementations and autograd; None where this PyTorch has no
    torch.library.register_fake / register_autograd (before 2.4)."""
    library = torch.library
    if not (hasattr(library, "register_fake") and hasattr(library, "register_autograd")):
        return None
    lib = library.Library("ucudnn", "FRAGMENT")
    geometry = ("int[] stride, int[] padding, int[] dilation, bool transposed, "
                "int[] output_padding, int groups, int key")
    lib.define(f"convolution(Tensor x, Tensor weight, {geometry}) -> Tensor", tags=STRIDE_TAGS)
    lib.define(f"convolution_backward(Tensor grad_y, Tensor x, Tensor weight, {geometry}, "
               "bool need_x, bool need_w) -> (Tensor, Tensor)", tags=STRIDE_TAGS)

    def conv_of(x, weight, padding, output_padding, key):
        module = MODULES.get(key)
        # The op's operands are cast already (the caller casts for autocast): no cast here.
        return None if module is None else module._ucudnn_conv_of(
            x, weight, tuple(padding), None, tuple(output_padding),
            channels_last=op_channels_last(x, weight))

    def convolution(x, weight, stride, padding, dilation, transposed, output_padding, groups,
                    key):
        conv = conv_of(x, weight, padding, output_padding, key)
        if conv is None:
            y = torch_convolution(x, weight, None, stride, padding, dilation, groups, transposed,
                                  output_padding)
            return y.contiguous(memory_format=op_memory_format(x, weight))
        return conv_forward(x, weight, conv)

    def convolution_backward(grad_y, x, weight, stride, padding, dilation, transposed,
                             output_padding, groups, key, need_x, need_w):
        conv = conv_of(x, weight, padding, output_padding, key)
        memory_format = op_memory_format(x, weight)
        x = x.contiguous(memory_format=memory_format)
        weight = weight.contiguous(memory_format=memory_format)
        if conv is None:
            grad_x, grad_w, _ = torch.ops.aten.convolution_backward(
                grad_y, x, weight, None, stride, padding, dilation, transposed, output_padding,
                groups, [need_x, need_w, False])
        else:
            grad_x, grad_w = conv_backward(conv, x, weight, grad_y, need_x, need_w)
        return (or_empty(grad_x, x, memory_format), or_empty(grad_w, weight, memory_format))

    for device in ("CPU", "CUDA"):
        lib.impl("convolution", convolution, device)
        lib.impl("convolution_backward", convolution_backward, device)

    @library.register_fake("ucudnn::convolution", lib=lib)
    def convolution_fake(x, weight, stride, padding, dilation, transposed, output_padding, groups,
                         key):
        size = output_size(x.shape, weight.shape, stride, padding, dilation, groups, transposed,
                           output_padding)
        return x.new_empty(size).contiguous(memory_format=op_memory_format(x, weight))

    @library.register_fake("ucudnn::convolution_backward", lib=lib)
    def convolution_backward_fake(grad_y, x, weight, stride, padding, dilation, transposed,
                                  output_padding, groups, key, need_x, need_w):
        memory_format = op_memory_format(x, weight)
        grad_x = torch.empty_like(x, memory_format=memory_format) if need_x else x.new_empty(0)
        grad_w = (torch.empty_like(weight, memory_format=memory_format) if need_w else
                  weight.new_empty(0))
        return grad_x, grad_w

    def setup_context(ctx, inputs, output):
        x, weight = inputs[:2]
        ctx.save_for_backward(x, weight)
        ctx.geometry = inputs[2:]

    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[:2]
        x, weight, grad_y = in_call_layout(x, weight, grad_y)
        grad_x, grad_w = torch.ops.ucudnn.convolution_backward(grad_y, x, weight, *ctx.geometry,
                                                               need_x, need_w)
        return (grad_x if need_x else None, grad_w if need_w else None) + (None,) * len(
            ctx.geometry)

    library.register_autograd("ucudnn::convolution", backward, setup_context=setup_context,
                              lib=lib)
    register_custom_ops.lib = lib  # the registrations live as long as the library object
    return torch.ops.ucudnn


# Inductor passes the ops' operands with the strides they were traced with (the default for
# custom ops since PyTorch 2.8, said explicitly where the tag exists): PyTorch's layout rule
# (pytorch_layout_call) reads the strides of size-1 dimensions, which a fixed stride order, the
# default before, leaves to inductor, and the fake implementations predict the outputs' layout
# from the traced strides.
EXACT_STRIDES = getattr(getattr(torch, "Tag", None), "needs_exact_strides", None)
STRIDE_TAGS = (EXACT_STRIDES,) if EXACT_STRIDES is not None else ()


def op_channels_last(x, weight):
    """The layout of the op's call: PyTorch's (pytorch_layout_call) where the operands keep their
    traced strides; without that guarantee, the eager rule (channels_last_call), which the
    strides of size-1 dimensions cannot move, so that the traced layout and the run one agree."""
    if EXACT_STRIDES is not None:
        return pytorch_layout_call(x, weight)
    return channels_last_call(x, weight)


def in_call_layout(x, weight, *others):
    """x, weight and `others` in the layout of the op's call on x and weight, converted in the
    traced graph: inductor then writes them so from the kernels that make them (as its layout
    optimization does for PyTorch's own convolutions) instead of the op copying them (the
    compiled U-Net, bf16 on an H200: 27 copies in the forward and 54 in the backward, its inputs
    again and their gradients, 13 ms of a 38 ms step, became 2). A tensor in that layout already
    is not copied (Tensor.contiguous)."""
    memory_format = op_memory_format(x, weight)
    return tuple(t.contiguous(memory_format=memory_format) for t in (x, weight) + others)


def op_memory_format(x, weight):
    """The memory format of the op's outputs (op_channels_last)."""
    return memory_format_of(x.dim(), op_channels_last(x, weight))


def or_empty(tensor, like, memory_format):
    if tensor is None:
        return like.new_empty(0)
    return tensor.contiguous(memory_format=memory_format)


is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)


def custom_ops_available():
    """Whether converted layers are custom ops under torch.compile (PyTorch >= 2.4)."""
    global _custom_ops
    if _custom_ops is None:
        try:
            _custom_ops = register_custom_ops() or False
        except RuntimeError:  # registered already by another copy of this module
            _custom_ops = torch.ops.ucudnn
    return bool(_custom_ops)
