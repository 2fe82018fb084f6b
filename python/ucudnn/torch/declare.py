"""kernels(): the convolutions a training step runs, declared to the library at their limits."""

import contextlib

import torch
from torch import nn

from .conv import shape_key
from .module import runtimes_of
from .steps import cache_kept, model_kept


def kernels(model, *sample_inputs, compiled=None):
    """The convolutions a training step of `model` on `sample_inputs` runs through the library:
    {(runtime, device): [ConvShape, ...]} from one forward pass run by PyTorch (the backward ops
    are those the gradients need: no backward-data for a layer whose input needs no gradient).
    The converted layers compute nothing in it (zero outputs, ShapeOnlyConvFunction): no
    cuDNN call, so no PyTorch benchmark. The pass keeps no activation for a backward (none
    runs): it holds the memory of an inference forward, not of a training step, in a pool of its
    own that goes back at its end (cache_kept). A torch.compile'd model's pass runs its original
    module, its calls laid out as the compiled custom op lays them out (`compiled`: whether the
    model is compiled, where it is given as its original module)."""
    original = compiled_original(model)
    compiled = original is not None if compiled is None else compiled
    model = original or model
    runtimes = runtimes_of(model)
    for runtime in runtimes:
        runtime.restore_native()  # every call of the pass through the adapter
        runtime.recording = {}
        runtime.compiled_layouts = compiled
    try:
        # The pass leaves the model as it was (batch-norm statistics and the like), and PyTorch's
        # memory cache.
        with cache_kept(sample_inputs), model_kept(model), torch.enable_grad(), nothing_saved():
            model(*sample_inputs)
        return {(runtime, device): shapes for runtime in runtimes
                for device, shapes in runtime.recording.items()}
    finally:
        for runtime in runtimes:
            runtime.recording = None
            runtime.compiled_layouts = False


def nothing_saved():
    """Autograd keeps none of the tensors a forward saves for its backward (a pass that never
    runs one): each activation is freed once the forward is done with it, while requires_grad
    still flows as in a training step. A no-op where this PyTorch has no saved-tensor hooks."""
    hooks = getattr(getattr(torch.autograd, "graph", None), "saved_tensors_hooks", None)
    if hooks is None:
        return contextlib.nullcontext()

    def unpack(_):
        raise RuntimeError("ucudnn.torch.kernels(): its pass keeps nothing for a backward")
    return hooks(lambda _: None, unpack)


def compiled_original(model):
    """The module torch.compile wrapped when `model` is its OptimizedModule, else None."""
    original = getattr(model, "_orig_mod", None)
    return original if isinstance(original, nn.Module) else None


def unique_shapes(shapes):
    seen, unique = set(), []
    for shape in shapes:
        key = shape_key(shape)
        if key not in seen:
            seen.add(key)
            unique.append(shape)
    return unique


def kernel_infos(runtime, context, shapes):
    """Context.kernel_info() of each of `shapes` at its limit (Runtime.limit_of)."""
    return [context.kernel_info(context.kernel(shape, runtime.limit_of(shape)))
            for shape in shapes]


# Kernel states whose plans are still to come: the planner has not answered ("waiting"), or its
# answer was that the cluster is benchmarking the problem ("missing"; the session asks again).
PLANS_COMING = ("waiting", "missing")


def plans_coming(runtime, context, shapes):
    """Whether a plan of `shapes` (one context's kernels) is still to come (PLANS_COMING)."""
    return any(info["state"] in PLANS_COMING for info in kernel_infos(runtime, context, shapes))


def declare_at_limits(runtime, context, shapes):
    """Declares `shapes` in `context`, each at its limit (runtime.limit_of), one request per
    distinct limit."""
    by_limit = {}
    for shape in shapes:
        by_limit.setdefault(runtime.limit_of(shape), []).append(shape)
    for limit, group in sorted(by_limit.items()):
        context.prepare(group, limit)
