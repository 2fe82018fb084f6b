"""The tensors of any model output, and the loss prepare()'s own training passes take from it.

A model's output may be a tensor, a tuple or list (a named tuple: torchvision's GoogLeNet and
Inception in training), a dict (segmentation models' {"out", "aux"}, detection models' losses in
training), or these nested. prepare()'s passes (the memory profile, the route's measured steps)
backpropagate the sum of every floating tensor in it; a model whose output is something else (an
object of its own) needs prepare(..., loss_fn=) and gets an error that says so."""

import dataclasses

import torch


def output_tensors(output):
    """Every floating-point tensor of `output`, depth first, in the structure's order (a dict's
    by insertion). TypeError naming the type where a part is neither a tensor, a sequence, a
    mapping, a dataclass nor None (an int or a string in an output is skipped)."""
    return (t for t in _walk(output, strict=True) if t.is_floating_point())


def _walk(structure, strict):
    """The tensors of `structure` through tuples, lists, dicts and dataclasses, depth first;
    another part is skipped, or (`strict`) a TypeError unless a plain value."""
    if torch.is_tensor(structure):
        yield structure
    elif isinstance(structure, dict):
        for value in structure.values():
            yield from _walk(value, strict)
    elif isinstance(structure, (list, tuple)):
        for value in structure:
            yield from _walk(value, strict)
    elif dataclasses.is_dataclass(structure) and not isinstance(structure, type):
        for field in dataclasses.fields(structure):
            yield from _walk(getattr(structure, field.name), strict)
    elif strict and not (structure is None or
                         isinstance(structure, (bool, int, float, str, bytes))):
        raise TypeError(f"ucudnn.torch: a model output of type {type(structure).__name__} has "
                        "no tensors this adapter can find: give prepare(..., loss_fn=) a "
                        "function from the output to the scalar loss")


def default_loss(output):
    """The loss of prepare()'s training passes without a loss_fn: the sum of every floating
    tensor of the output (in float32). ValueError where the output holds none."""
    tensors = list(output_tensors(output))
    if not tensors:
        raise ValueError("ucudnn.torch: the model's output holds no floating-point tensor: give "
                         "prepare(..., loss_fn=) a function from the output to the scalar loss")
    total = tensors[0].float().sum()
    for tensor in tensors[1:]:
        total = total + tensor.float().sum()
    return total


def tensors_in(structure):
    """Every tensor of a model's inputs or outputs (any dtype), through tuples, lists, dicts and
    dataclasses, depth first: a detection model's inputs are a list of images and a list of
    dicts of targets."""
    return _walk(structure, strict=False)


def inputs_device(sample_inputs):
    """The device of the step's inputs: that of their first tensor (ValueError where they hold
    none)."""
    for tensor in tensors_in(sample_inputs):
        return tensor.device
    raise ValueError("ucudnn.torch: the sample inputs hold no tensor")


def inputs_on_cuda(sample_inputs):
    """Whether any tensor of the step's inputs is on a CUDA device."""
    return any(t.is_cuda for t in tensors_in(sample_inputs))


def inputs_signature(sample_inputs):
    """What a record of the step is keyed by: each input tensor's shape, dtype and strides, in
    the inputs' structure's order (other values by their repr)."""
    return [(tuple(t.shape), str(t.dtype), tuple(t.stride())) for t in tensors_in(sample_inputs)]
