"""What PyTorch itself runs for one convolution: its time and its device kernels.

For each --shape and op, PyTorch's own convolution (`cudnn.benchmark` on, as a user trains) is
called until its search is done, timed as ucudnn.torch.compare_kernels times it (device time,
the L2 flushed before each run and not), and profiled once: the names and times of the device
kernels it launches. Run it under cuDNN's API log (CUDNN_LOGLEVEL_DBG=3, CUDNN_LOGDEST_DBG=FILE)
to see which engine configuration PyTorch's search kept; scripts/gpu_conv_trace.sh does that per
kernel, beside ucudnn's engine probe on the same shapes. JSON to --out.

    PYTHONPATH=python python3 bench/torch_conv_trace.py \\
        --shape dw768_7:768:7:7:768:7:7:3:1:768 --op fwd --precision amp --batch 128 --out t.json
"""

import argparse
import json
import sys

import torch

# The adapter's helpers for PyTorch's own op of a kernel (python/ on the path; the library itself
# is not loaded).
from ucudnn import _lib
from ucudnn.torch import measure as ut_measure

OPS = {"fwd": _lib.FORWARD, "bwd_data": _lib.BACKWARD_DATA, "bwd_filter": _lib.BACKWARD_FILTER}


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


def conv_shape(shape, op, batch, precision):
    """The kernel as the library names it (ucudnnConvShape_t): amp is fp16 channels-last, fp32
    NCHW with TF32."""
    amp = precision == "amp"
    return _lib.ConvShape(
        op=OPS[op], n=batch, c=shape["c"], h=shape["h"], w=shape["w"], k=shape["k"],
        r=shape["r"], s=shape["s"], pad_h=shape["pad"], pad_w=shape["pad"],
        stride_h=shape["stride"], stride_w=shape["stride"], dilation_h=1, dilation_w=1,
        groups=shape["groups"], data_type=_lib.HALF if amp else _lib.FLOAT,
        layout=_lib.NHWC if amp else _lib.NCHW,
        math=_lib.MATH_TENSOR_OP if amp else _lib.MATH_DEFAULT)


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
    device = torch.device("cuda")
    flush = ut_measure.l2_flusher(device)
    rows = []
    for shape in args.shape:
        for op in args.op or OPS:
            kernel = conv_shape(shape, op, args.batch, args.precision)
            operands = ut_measure.operands_of(kernel, device)
            ms, spread = ut_measure.time_framework(kernel, device, args.repeats, operands)
            flushed, _ = ut_measure.time_framework(kernel, device, args.repeats, operands,
                                                   flush=flush)
            row = {"shape": shape, "op": op, "precision": args.precision, "batch": args.batch,
                   "ms": ms, "spread_ms": spread, "ms_l2_flushed": flushed,
                   "kernels": device_kernels(ut_measure.framework_call(kernel, *operands))}
            print(f"{shape['name']} {op}: {row['ms']:.4f} ms ({row['ms_l2_flushed']:.4f} flushed); "
                  + "; ".join(f"{k['name'][:90]} {k['us_per_call']:.1f} us"
                              for k in row["kernels"][:3]), flush=True)
            rows.append(row)
    with open(args.out, "w") as f:
        json.dump({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                   "device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
