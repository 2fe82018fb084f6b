"""What PyTorch itself runs for one convolution: its time and its device kernels.

For each --shape and op, PyTorch's own convolution (`cudnn.benchmark` on, as a user trains) is
called until its search is done, timed (median of CUDA-event pairs, L2 flushed before each run
and not), and profiled once: the names and times of the device kernels it launches. Run it under
cuDNN's API log (CUDNN_LOGLEVEL_DBG=3, CUDNN_LOGDEST_DBG=FILE) to see which engine configuration
PyTorch's search kept; scripts/gpu_conv_trace.sh does that per kernel, beside ucudnn's engine
probe on the same shapes. JSON to --out.

    python3 bench/torch_conv_trace.py --shape dw768_7:768:7:7:768:7:7:3:1:768 --op fwd \\
        --precision amp --batch 128 --out trace.json
"""

import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F

from torch_common import event_times_ms  # bench/ is the script's directory

OPS = ("fwd", "bwd_data", "bwd_filter")


def parse_shape(text):
    """NAME:C:H:W:K:R:S:PAD:STRIDE[:GROUPS], as ucudnn-engine-probe's --shape."""
    parts = text.split(":")
    if len(parts) not in (9, 10):
        raise argparse.ArgumentTypeError(
            f"--shape {text}: want NAME:C:H:W:K:R:S:PAD:STRIDE[:GROUPS]")
    try:
        values = [int(p) for p in parts[1:]]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape {text}: fields after the name are integers")
    if len(values) == 8:
        values.append(1)
    c, h, w, k, r, s, pad, stride, groups = values
    if min(c, h, w, k, r, s, stride, groups) < 1 or pad < 0 or c % groups or k % groups:
        raise argparse.ArgumentTypeError(f"--shape {text}: sizes out of range")
    return {"name": parts[0], "c": c, "h": h, "w": w, "k": k, "r": r, "s": s, "pad": pad,
            "stride": stride, "groups": groups}


def operands(shape, batch, dtype, channels_last, device):
    gen = torch.Generator(device=device).manual_seed(0)
    fmt = torch.channels_last if channels_last else torch.contiguous_format

    def rand(*size):
        return torch.randn(*size, generator=gen, device=device, dtype=dtype).to(memory_format=fmt)

    x = rand(batch, shape["c"], shape["h"], shape["w"])
    weight = rand(shape["k"], shape["c"] // shape["groups"], shape["r"], shape["s"])
    y = F.conv2d(x, weight, stride=shape["stride"], padding=shape["pad"], groups=shape["groups"])
    dy = rand(*y.shape)
    return x, weight, dy


def the_call(op, shape, x, weight, dy):
    stride, pad, groups = [shape["stride"]] * 2, [shape["pad"]] * 2, shape["groups"]
    if op == "fwd":
        return lambda: F.conv2d(x, weight, stride=stride, padding=pad, groups=groups)
    mask = [op == "bwd_data", op == "bwd_filter", False]
    return lambda: torch.ops.aten.convolution_backward(
        dy, x, weight, None, stride, pad, [1, 1], False, [0, 0], groups, mask)


def median_ms(call, repeats, flush=None):
    before = flush.zero_ if flush is not None else None
    return statistics.median(event_times_ms(call, repeats, before))


def device_kernels(call, runs=3):
    """The device kernels of `runs` calls: name, count and mean microseconds each."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            call()
        torch.cuda.synchronize()
    kernels = []
    for event in prof.key_averages():
        device_us = getattr(event, "device_time_total", None)
        if device_us is None:
            device_us = getattr(event, "cuda_time_total", 0)
        if device_us <= 0:
            continue
        kernels.append({"name": event.key, "count": event.count,
                        "us_per_call": device_us / runs})
    return sorted(kernels, key=lambda k: -k["us_per_call"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", type=parse_shape, action="append", required=True)
    parser.add_argument("--op", choices=OPS, action="append")
    parser.add_argument("--precision", choices=("amp", "fp32"), default="amp",
                        help="amp: fp16 channels-last; fp32: fp32 NCHW with TF32")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("torch_conv_trace.py: needs a CUDA device")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = True
    device = torch.device("cuda")
    amp = args.precision == "amp"
    dtype = torch.float16 if amp else torch.float32
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=device)  # twice an H200's L2
    rows = []
    for shape in args.shape:
        x, weight, dy = operands(shape, args.batch, dtype, amp, device)
        for op in args.op or OPS:
            call = the_call(op, shape, x, weight, dy)
            for _ in range(3):  # the search, then steady calls
                call()
            torch.cuda.synchronize()
            row = {"shape": shape, "op": op, "precision": args.precision, "batch": args.batch,
                   "ms": median_ms(call, args.repeats),
                   "ms_l2_flushed": median_ms(call, args.repeats, flush),
                   "kernels": device_kernels(call)}
            print(f"{shape['name']} {op}: {row['ms']:.4f} ms ({row['ms_l2_flushed']:.4f} flushed); "
                  + "; ".join(f"{k['name'][:90]} {k['us_per_call']:.1f} us"
                              for k in row["kernels"][:3]), flush=True)
            rows.append(row)
    with open(args.out, "w") as f:
        json.dump({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                   "device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
