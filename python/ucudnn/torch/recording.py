"""The shape-only pass: converted layers that compute nothing while kernels() and memory_profile()
read a step's convolutions."""

import torch

from .autograd import bias_view
from .conv import shape_key


class StepProfile:
    """What memory_profile() records: per convolution op, in the order the step runs them, the
    memory in use at its start and the bytes of its output."""

    def __init__(self, reader):
        self.reader = reader
        self.calls = []  # (shape key, in use bytes, output bytes)

    def add(self, conv, op, in_use, output_bytes):
        self.calls.append((shape_key(conv.shape(op)), in_use, output_bytes))


def tensor_bytes(t):
    return t.numel() * t.element_size()


def zero_output(profile, conv, x):
    """A zero tensor shaped, typed and laid out as the convolution's output: what a pass that
    needs the step's shapes and memory, not its values, takes for the convolution. With
    `profile`, the forward op is recorded (the memory in use at its start, the output's bytes)."""
    in_use = profile.reader() if profile is not None else 0
    y = torch.empty(conv.out_size, dtype=x.dtype, device=x.device,
                    memory_format=conv.memory_format).zero_()
    if profile is not None:
        profile.add(conv, conv.passes[0], in_use, tensor_bytes(y))
    return y


class ShapeOnlyConvFunction(torch.autograd.Function):
    """A convolution that computes nothing: zero outputs and zero gradients of the real ones'
    shapes, layouts and dtypes (kernels()' and memory_profile()'s passes, which need the step's
    shapes and memory). So no cuDNN call runs in them: PyTorch's benchmark, which keeps the
    first algorithm it finds for a kernel for the whole process, is left to the layers that run
    PyTorch's own in the job. With `profile`, the memory in use is recorded at each op's start."""

    @staticmethod
    def forward(ctx, x, weight, conv, profile):
        ctx.conv, ctx.profile = conv, profile
        ctx.save_for_backward(x, weight)
        return zero_output(profile, conv, x)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[:2]
        profile = ctx.profile
        if profile is not None:
            in_use = profile.reader()
            _, op_x, op_w = ctx.conv.passes
            if need_x:
                profile.add(ctx.conv, op_x, in_use, tensor_bytes(x))
                # Backward-filter runs after it (conv_backward), its gradient of x still held: what
                # its workspace may take is that much less (VGG-16 fp32's 512x28x28: 196 MiB,
                # traced; docs/results.md).
                in_use += tensor_bytes(x)
            if need_w:
                profile.add(ctx.conv, op_w, in_use, tensor_bytes(weight))
        grad_x = torch.zeros_like(x) if need_x else None
        grad_w = torch.zeros_like(weight) if need_w else None
        return grad_x, grad_w, None, None


def shape_only_conv(profile, conv, input, weight, bias):
    """The layer's output from ShapeOnlyConvFunction (the operands already cast)."""
    grad = torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad)
    if not grad:
        y = zero_output(profile, conv, input)
    else:
        y = ShapeOnlyConvFunction.apply(input, weight, conv, profile)
    return y if bias is None else y + bias_view(bias, input.dim() - 2)
