"""A training pass run by prepare()'s measurements, and the model kept as it was around it."""

import contextlib

import torch

from .outputs import default_loss


@contextlib.contextmanager
def model_kept(model):
    """The block's training passes leave `model` as it was: its gradients and its buffers
    (batch-norm statistics)."""
    grads = [(p, p.grad) for p in model.parameters()]
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, saved in buffers:
                buffer.copy_(saved)
        for p, grad in grads:
            p.grad = grad


def training_pass(model, sample_inputs, loss_fn):
    """One step's forward, loss (`loss_fn(output)`, else the sum of the output's tensors:
    outputs.default_loss) and backward, from no gradients (those of the pass before are dropped
    first)."""
    for p in model.parameters():
        p.grad = None
    with torch.enable_grad():
        output = model(*sample_inputs)
        loss = loss_fn(output) if loss_fn is not None else default_loss(output)
        loss.backward()
