"""A training pass run by prepare()'s measurements, and the model and PyTorch's memory cache kept
as they were around its passes."""

import contextlib

import torch

from .outputs import default_loss, inputs_device, inputs_on_cuda

# PyTorch's cuBLAS workspaces (one per handle and stream, from its caching allocator, held until
# the process ends): prepare()'s passes make them at their first matrix product, before the
# step's activations, where a native job makes them during its first step, among them.
clear_cublas_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)


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


def reserved_memory(sample_inputs):
    """PyTorch's cached bytes on the device of the inputs; None off CUDA."""
    if not inputs_on_cuda(sample_inputs):
        return None
    return torch.cuda.memory_reserved(inputs_device(sample_inputs))


def release_cached_memory(sample_inputs, reserved_before):
    """prepare()'s end on CUDA, where its passes grew PyTorch's allocator cache past
    `reserved_before` (reserved_memory() at its start): the blocks they left there are released
    (torch.cuda.empty_cache; nothing in use is touched), so that the job's steps lay out their
    memory from a clean cache rather than around the blocks of the passes' layout (the profiled
    step's without workspaces, the measuring steps' first calls), and the cuBLAS workspaces the
    passes made go too, made again where native's are. Where the cache did not grow (a route
    recorded native: its one pass, kernels(), has a pool of its own) it is left as the job had
    it, as a native job's is."""
    if reserved_before is None or reserved_memory(sample_inputs) <= reserved_before:
        return
    if clear_cublas_workspaces is not None:
        clear_cublas_workspaces()
    torch.cuda.empty_cache()


@contextlib.contextmanager
def cache_kept(sample_inputs):
    """A pass that keeps nothing (kernels()'s forward) leaves PyTorch's allocator cache as it
    found it: the calling thread's allocations inside go to a memory pool of their own
    (torch.cuda.MemPool), given back at the end with the cuBLAS workspaces the pass's first
    matrix product made. A job whose prepare() runs no other pass (a route recorded native)
    then starts its steps from the cache a native job has, and should lay out the same blocks.
    On the H200, such jobs whose prepare() emptied the whole cache instead peaked 2-20 MiB over
    native's, while native's jobs peaked alike to the MiB; with this, -2 to +26 MiB
    (bench/results/h200/torch_models_wide_default_batch.json, rows and rows_session_41).
    Nothing is routed where this PyTorch has no pools or the inputs are not on CUDA; where the
    pool's memory does not go back with it, the whole cache is emptied instead."""
    make_pool = getattr(torch.cuda, "MemPool", None)
    use_pool = getattr(torch.cuda, "use_mem_pool", None)
    reserved = reserved_memory(sample_inputs)
    if make_pool is None or use_pool is None or reserved is None:
        yield
        return
    device = inputs_device(sample_inputs)
    with torch.cuda.device(device):
        pool = make_pool()
        try:
            with use_pool(pool, device):
                yield
        finally:
            if clear_cublas_workspaces is not None:
                clear_cublas_workspaces()
            del pool  # its cached blocks go back to the device with it
            if reserved_memory(sample_inputs) > reserved:
                torch.cuda.empty_cache()
