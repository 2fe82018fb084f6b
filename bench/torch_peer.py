#!/usr/bin/env python3
"""The peer a PyTorch user already has: a network's convolutions (forward, backward-data and
backward-filter of every layer, as ucudnn-example-train-step runs them) through PyTorch with
torch.backends.cudnn.benchmark = True, timed with CUDA events.

Two ways to cap PyTorch's workspace, both recorded in the result:
- cuDNN's environment variable CUDNN_CONV_WSCAP_DBG (MiB), read by cuDNN when it loads (set it
  in the environment of this process, not after import). Measured on the H100 with PyTorch 2.11
  and cuDNN 9.19, it does not bind the graph-API engines PyTorch's benchmark mode picks.
- --memory-headroom-mib X: the process may hold at most its tensors, the largest output one
  kernel allocates, and X MiB more (torch.cuda.set_per_process_memory_fraction; expandable
  segments, so that the cap is not lost to fragmentation). PyTorch's
  benchmark mode drops the engines whose workspace it cannot allocate, so this is the cap a
  memory-bound PyTorch job really runs under (its workspace may still reuse memory that another
  layer's freed output left in the caching allocator).
Either way the workspace each kernel really took is measured after the timed steps (peak
allocation during the call less its outputs): `workspace_mib` per kernel and the maximum.

  CUDNN_CONV_WSCAP_DBG=64 python3 bench/torch_peer.py --network resnet50 --batch 256 \
      --dtype fp32 --layout nchw --json out.json
  python3 bench/torch_peer.py --network resnet50 --memory-headroom-mib 64 --json out.json

Layer shapes come from networks/NAME.csv (the same tables the planner uses). Activations are
shared buffers of random data sized for the largest layer (values are never zero; what the
kernels compute is not checked here, only timed), filters are per layer. One step = every
layer's forward in order, then every layer's backward-data and backward-filter in reverse
order; the median of --steps steps after --warmup steps (the first of which runs cuDNN's
benchmark search). --per-kernel also times each kernel alone (median of 5 runs) for the
per-kernel comparison.
"""
import argparse
import csv
import json
import os
import statistics
import sys

import torch

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def read_network(path):
    layers = []
    with open(path) as f:
        rows = [line for line in f if not line.startswith("#")]
    for row in csv.DictReader(rows):
        layers.append({k: (v if k == "layer" else int(v)) for k, v in row.items()})
    return layers


def out_size(n, r, pad, stride, dil):
    return (n + 2 * pad - dil * (r - 1) - 1) // stride + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--network", default="resnet50")
    ap.add_argument("--networks-dir", default=os.path.join(os.path.dirname(__file__), "..", "networks"))
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    ap.add_argument("--layout", choices=["nchw", "nhwc"], default="nchw")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--per-kernel", action="store_true")
    ap.add_argument("--no-tf32", action="store_true", help="strict fp32 (cudnn.allow_tf32 = False)")
    ap.add_argument("--memory-headroom-mib", type=int, default=None,
                    help="cap the process's GPU memory at its tensors + the largest output + this")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    if args.memory_headroom_mib is not None:
        # Before the first CUDA allocation: under a memory cap the default allocator's fixed
        # segments fragment (an output that fits the free total fails to find one free block).
        os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    if not torch.cuda.is_available():
        sys.exit("torch_peer.py: no CUDA device")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = not args.no_tf32
    dtype = DTYPES[args.dtype]
    fmt = torch.channels_last if args.layout == "nhwc" else torch.contiguous_format
    dev = torch.device("cuda")
    layers = read_network(os.path.join(args.networks_dir, args.network + ".csv"))
    n = args.batch
    g = torch.Generator(device=dev).manual_seed(1)

    def rand(shape):
        # Uniform in [-1, 1): never all zeros, finite in every dtype.
        t = torch.rand(shape, generator=g, device=dev, dtype=torch.float32) * 2 - 1
        return t.to(dtype).contiguous(memory_format=fmt) if len(shape) == 4 else t.to(dtype)

    max_in = max(L["c"] * L["h"] * L["w"] for L in layers)
    max_out = 0
    for L in layers:
        oh = out_size(L["h"], L["r"], L["pad_h"], L["stride_h"], L["dilation_h"])
        ow = out_size(L["w"], L["s"], L["pad_w"], L["stride_w"], L["dilation_w"])
        L["oh"], L["ow"] = oh, ow
        max_out = max(max_out, L["k"] * oh * ow)
    pool = {name: rand((n * size,)) for name, size in
            (("x", max_in), ("dx", max_in), ("y", max_out), ("dy", max_out))}

    def view(buf, c, h, w):
        t = pool[buf][: n * c * h * w]
        if args.layout == "nhwc":
            return t.view(n, h, w, c).permute(0, 3, 1, 2)
        return t.view(n, c, h, w)

    for L in layers:
        L["weight"] = rand((L["k"], L["c"] // L["groups"], L["r"], L["s"]))

    elem = torch.tensor([], dtype=dtype).element_size()
    # The most one kernel's outputs take at once: y (forward), or dx and dw (backward).
    largest_output = max(max(n * L["k"] * L["oh"] * L["ow"],
                             n * L["c"] * L["h"] * L["w"] + L["weight"].numel())
                         for L in layers) * elem
    memory_cap = None
    if args.memory_headroom_mib is not None:
        if args.memory_headroom_mib < 0:
            sys.exit("torch_peer.py: --memory-headroom-mib must be >= 0")
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # no cached block larger than the cap allows stays around
        total = torch.cuda.get_device_properties(dev).total_memory
        memory_cap = (torch.cuda.memory_allocated() + largest_output
                      + args.memory_headroom_mib * 2**20)
        torch.cuda.set_per_process_memory_fraction(min(1.0, memory_cap / total))

    def conv_args(L):
        return dict(stride=(L["stride_h"], L["stride_w"]), padding=(L["pad_h"], L["pad_w"]),
                    dilation=(L["dilation_h"], L["dilation_w"]), groups=L["groups"])

    def fwd(L):
        x = view("x", L["c"], L["h"], L["w"])
        return torch.nn.functional.conv2d(x, L["weight"], None, **conv_args(L))

    def bwd(L, mask):
        a = conv_args(L)
        x = view("x", L["c"], L["h"], L["w"])
        dy = view("dy", L["k"], L["oh"], L["ow"])
        return torch.ops.aten.convolution_backward(
            dy, x, L["weight"], None, list(a["stride"]), list(a["padding"]), list(a["dilation"]),
            False, [0, 0], a["groups"], mask)

    def step():
        for L in layers:
            fwd(L)
        for L in reversed(layers):
            bwd(L, [True, True, False])

    def timed(fn, reps):
        times = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        return times

    with torch.no_grad():
        for _ in range(args.warmup):
            step()
        torch.cuda.synchronize()
        # What the steps allocate beyond the tensors above: cuDNN's workspaces (and outputs of
        # one layer at a time): shows whether the cap bound the engines PyTorch chose.
        torch.cuda.reset_peak_memory_stats()
        resident = torch.cuda.memory_allocated()
        steps = timed(step, args.steps)
        peak_extra_mib = (torch.cuda.max_memory_allocated() - resident) / 2**20
        # The workspace each kernel took (plans are cached by now: each call allocates its
        # plan's workspace from the caching allocator), outside the timed steps.
        workspace = []
        for L in layers:
            for op, fn in (("fwd", lambda: fwd(L)),
                           ("bwd_data", lambda: bwd(L, [True, False, False])),
                           ("bwd_filter", lambda: bwd(L, [False, True, False]))):
                torch.cuda.synchronize()
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                out = fn()
                torch.cuda.synchronize()
                outs = out if isinstance(out, (tuple, list)) else (out,)
                out_bytes = sum(t.numel() * t.element_size() for t in outs if t is not None)
                used = torch.cuda.max_memory_allocated() - base - out_bytes
                workspace.append({"layer": L["layer"], "op": op,
                                  "workspace_mib": max(0, used) / 2**20})
                del out, outs
        per_kernel = []
        if args.per_kernel:
            for L in layers:
                for op, fn in (("fwd", lambda: fwd(L)),
                               ("bwd_data", lambda: bwd(L, [True, False, False])),
                               ("bwd_filter", lambda: bwd(L, [False, True, False]))):
                    fn()
                    per_kernel.append({"layer": L["layer"], "op": op,
                                       "ms": statistics.median(timed(fn, 5))})
    result = {
        "peer": "pytorch cudnn.benchmark",
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "gpu": torch.cuda.get_device_name(),
        "wscap_mib": os.environ.get("CUDNN_CONV_WSCAP_DBG", "unlimited"),
        "network": args.network, "batch": n, "dtype": args.dtype, "layout": args.layout,
        "tf32": torch.backends.cudnn.allow_tf32, "kernels": 3 * len(layers),
        "step_ms_median": statistics.median(steps), "step_ms": steps,
        "peak_extra_mib_during_steps": peak_extra_mib,
        "memory_headroom_mib": args.memory_headroom_mib,
        "memory_cap_mib": None if memory_cap is None else memory_cap / 2**20,
        "max_kernel_workspace_mib": max(w["workspace_mib"] for w in workspace),
        "kernels_over_64mib": sum(w["workspace_mib"] > 64 for w in workspace),
        "kernels_over_256mib": sum(w["workspace_mib"] > 256 for w in workspace),
        "workspace": workspace,
        "per_kernel": per_kernel,
    }
    print(json.dumps({k: v for k, v in result.items()
                      if k not in ("per_kernel", "step_ms", "workspace")}))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
