"""A step whose plans were not all in at prepare() (a model new to the cluster, its problems still
being benchmarked): every layer runs PyTorch's own meanwhile, and the step's route is decided
between two steps once every plan is in, from the job's own batch, as prepare() would have.

Why between steps and not in prepare(): a worker takes seconds to minutes to benchmark a new
model (issue 40: 19-128 s for residual models on an H200). A job that waits for it starts later
than a native job; a job that runs PyTorch's own and switches loses nothing while it waits."""

import logging

import torch

from .custom_ops import is_compiling
from .declare import plans_coming
from .handle import every_rank
from .measure import time_framework_and_plan
from .outputs import inputs_device, inputs_signature
from . import route as step_route


_log = logging.getLogger("ucudnn.torch")

# A pending step looks at its kernels' states every this many training forwards: a count, not a
# clock, so that every rank of a torch.distributed job looks at the same step (and decides only
# once every rank has every plan: the decision's measuring rounds agree through collectives); a
# look costs one kernel_info() per kernel.
CHECK_EVERY = 16


class PendingRoute:
    """What prepare() leaves on a model whose step's route waits for its plans: the step's
    kernels [(runtime, device, shapes)], the inputs' signature the route is for, the loss, how
    long the decision may wait for the planner's answers to PyTorch's times, and whether those
    are timed. Not copied or pickled with the model (a copy decides in its own prepare())."""

    def __init__(self, step_kernels, signature, loss_fn, wait_ms, measure_framework):
        self.step_kernels = step_kernels
        self.signature = signature
        self.loss_fn = loss_fn
        self.wait_ms = wait_ms
        self.measure_framework = measure_framework
        self.forwards = 0

    def __reduce__(self):
        return (type(None), ())

    def plans_in(self):
        """Whether the planner has answered every kernel with its plan, or with no plan: none is
        waiting for an answer or for its problem's benchmark (declare.plans_coming)."""
        for runtime, device, shapes in self.step_kernels:
            context = runtime.context(device)
            if context is not None and plans_coming(runtime, context, shapes):
                return False
        return True


def wait_for_route(model, step_kernels, sample_inputs, loss_fn, wait_ms, measure_framework):
    """prepare() found plans missing: `model`'s step is decided by its training forwards
    (settle_pending_route) once every plan is in."""
    model._ucudnn_pending_route = PendingRoute(step_kernels, inputs_signature(sample_inputs),
                                               loss_fn, wait_ms, measure_framework)
    if settle_pending_route not in model._forward_pre_hooks.values():
        model.register_forward_pre_hook(settle_pending_route)


def settle_pending_route(module, args):
    """A prepared model's forward pre-hook while its step's route waits for plans (PendingRoute):
    every CHECK_EVERY training forwards of the prepared inputs' signature it looks at the
    kernels; once every plan is in, PyTorch's own is timed where the plans do not know it (as in
    prepare()), and the step's route is decided (route.decide: measured on this forward's
    inputs in alternating rounds, the model kept as it was, and recorded), before this forward
    runs on it. Nothing under torch.compile, in eval mode or without gradients."""
    pending = module.__dict__.get("_ucudnn_pending_route")
    if (pending is None or is_compiling() or not module.training
            or not torch.is_grad_enabled()):
        return None
    if inputs_signature(args) != pending.signature:
        return None  # another shape's step: it follows the step's route when one is decided
    pending.forwards += 1
    if pending.forwards % CHECK_EVERY:
        return None
    device = inputs_device(args)
    if not every_rank(pending.plans_in(), device):
        return None  # every rank decides at the same forward, each with every plan in
    del module.__dict__["_ucudnn_pending_route"]  # the rounds below run this forward again
    for runtime, kernel_device, shapes in pending.step_kernels:
        context = runtime.context(kernel_device)
        if context is not None:
            # Each kernel in its own dtype: not cast by the training loop's autocast.
            with torch.autocast(kernel_device.type, enabled=False):
                time_framework_and_plan(runtime, context, kernel_device, shapes,
                                        pending.wait_ms, pending.measure_framework)
    step_route.forget(module)  # each layer's rule, not the native route it waited on
    step_route.decide_layers(module)
    decided = step_route.decide(module, args, pending.loss_fn)
    if decided["source"] == "plans missing":  # a plan asked again meanwhile: look again later
        module._ucudnn_pending_route = pending
    else:
        _log.info("ucudnn.torch: every plan in after %d forwards: the step's route is %s",
                  pending.forwards, decided["route"])
    return None
