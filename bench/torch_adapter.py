#!/usr/bin/env python3
"""ucudnn.torch on a GPU: ResNet-50 (defined here, no downloads) training steps, native PyTorch
against the adapter, each configuration in a process of its own (cuDNN reads
CUDNN_CONV_WSCAP_DBG at start, and time to the first fast step counts from a new process).

    torch_adapter.py run   --device cuda --mode native|ucudnn [--amp] [--channels-last] ...
        one configuration; its JSON (losses, step times, time to the first fast step, the
        library's counters, the adapter's host time) to --json-out or stdout.
    torch_adapter.py suite --server HOST:PORT --out DIR [--batch 256 --steps 20]
        every configuration, compared: fp32 and AMP fp16 channels-last, native vs ucudnn at a
        64 MiB cap (losses must agree), native with CUDNN_CONV_WSCAP_DBG=64, native uncapped,
        ucudnn with undivided plans (the adapter's own overhead). DIR/torch_adapter.json; exit 1
        when a run failed or losses disagree.

scripts/gpu_torch.sh runs the suite from the bundle on the GPU machine with a warm database.
"""

import time

PROCESS_START = time.monotonic()  # before importing torch: time to the first fast step

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# Loss agreement, native vs converted, per step: relative to the native loss. Different cuDNN
# algorithms sum in different orders (and TF32 rounds), so trajectories drift slightly apart.
LOSS_RTOL = {"fp32": 2e-2, "amp": 5e-2}
# A step is "fast" once within this factor of the steady-state median.
FAST_FACTOR = 1.10


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="one configuration, JSON out")
    run.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    run.add_argument("--mode", default="native", choices=("native", "ucudnn"))
    run.add_argument("--batch", type=int, default=256)
    run.add_argument("--steps", type=int, default=20)
    run.add_argument("--image-size", type=int, default=224)
    run.add_argument("--amp", action="store_true", help="autocast fp16 (bf16 on cpu)")
    run.add_argument("--channels-last", action="store_true")
    run.add_argument("--benchmark", action="store_true", help="torch.backends.cudnn.benchmark")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                     help="ucudnn.torch.convert option, e.g. server=h:p (repeatable)")
    run.add_argument("--prepare-wait-s", type=float, default=0.0,
                     help="ucudnn: wait this long for plans after prepare()")
    run.add_argument("--json-out", default="")

    suite = sub.add_parser("suite", help="every configuration, compared")
    suite.add_argument("--server", required=True, help="planner HOST:PORT (warm database)")
    suite.add_argument("--out", required=True)
    suite.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    suite.add_argument("--batch", type=int, default=256)
    suite.add_argument("--steps", type=int, default=20)
    suite.add_argument("--image-size", type=int, default=224)
    suite.add_argument("--warm-wait-s", type=float, default=200.0,
                       help="first run of a precision: how long to wait for every plan (cold "
                       "kernels)")
    suite.add_argument("--run-timeout-s", type=float, default=120.0,
                       help="per run, beyond its wait for plans")
    suite.add_argument("--python", default=sys.executable)
    args = parser.parse_args(argv)
    for name in ("batch", "steps", "image_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.command == "run":
        if args.steps < 2:
            parser.error("--steps must be >= 2 (the first step is never a steady one)")
        for option in args.option:
            if "=" not in option:
                parser.error(f"--option {option!r}: expected KEY=VALUE")
    return args


# ---- ResNet-50 (torchvision's v1.5 layout: stride in the 3x3 of each bottleneck) ---------------
def resnet50(num_classes=1000):
    from torch import nn

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, inplanes, planes, stride):
            super().__init__()
            width = planes
            self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or inplanes != planes * 4:
                self.downsample = nn.Sequential(
                    nn.Conv2d(inplanes, planes * 4, 1, stride=stride, bias=False),
                    nn.BatchNorm2d(planes * 4))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + identity)

    layers = [nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64),
              nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1)]
    inplanes = 64
    for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(inplanes, planes, stride if i == 0 else 1))
            inplanes = planes * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, num_classes)]
    return nn.Sequential(*layers)


# ---- one configuration ---------------------------------------------------------------------------
def first_fast_step(step_ms, ends):
    """(index, seconds since process start) of the first step within FAST_FACTOR of the median of
    the second half of the steps."""
    steady = statistics.median(step_ms[len(step_ms) // 2:])
    for i, ms in enumerate(step_ms):
        if ms <= FAST_FACTOR * steady:
            return i, ends[i] - PROCESS_START
    return len(step_ms) - 1, ends[-1] - PROCESS_START


def run_one(args):
    import torch
    import torch.nn.functional as F

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch_adapter.py: --device cuda but torch.cuda.is_available() is False")
    torch.backends.cudnn.benchmark = args.benchmark
    torch.manual_seed(args.seed)
    model = resnet50().to(device)
    generator = torch.Generator().manual_seed(args.seed + 1)
    data = torch.randn(args.batch, 3, args.image_size, args.image_size, generator=generator)
    labels = torch.randint(0, 1000, (args.batch,), generator=generator)
    data, labels = data.to(device), labels.to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
        data = data.contiguous(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    scaling = args.amp and device.type == "cuda"
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):  # PyTorch >= 2.3
        scaler = torch.amp.GradScaler("cuda", enabled=scaling)
    else:
        scaler = torch.cuda.amp.GradScaler(enabled=scaling)

    host = {"seconds": 0.0, "calls": 0}
    ut = None
    if args.mode == "ucudnn":
        sys.path.insert(0, os.path.join(REPO, "python"))
        import ucudnn.torch as ut

        options = dict(option.split("=", 1) for option in args.option)
        ut.convert(model, **options)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=args.amp):
            ut.prepare(model, data, wait_ms=int(args.prepare_wait_s * 1000))
        # The adapter's own host time from here on: every call into it (the library's work on
        # the stream included, which is issued asynchronously).
        original_run = ut._Conv.run

        def timed_run(self, *a):
            start = time.perf_counter()
            try:
                return original_run(self, *a)
            finally:
                host["seconds"] += time.perf_counter() - start
                host["calls"] += 1

        ut._Conv.run = timed_run

    losses, step_ms, ends, host_ms = [], [], [], []
    for _ in range(args.steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        host_before = host["seconds"]
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=args.amp):
            loss = F.cross_entropy(model(data), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())  # synchronizes
        if device.type == "cuda":
            torch.cuda.synchronize()
        end = time.perf_counter()
        step_ms.append((end - start) * 1e3)
        ends.append(time.monotonic())
        host_ms.append((host["seconds"] - host_before) * 1e3)
    fast_index, fast_s = first_fast_step(step_ms, ends)
    steady = step_ms[len(step_ms) // 2:]
    result = {
        "config": {k: v for k, v in vars(args).items() if k not in ("command", "json_out")},
        "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "cudnn_version": torch.backends.cudnn.version() if device.type == "cuda" else None,
        "cudnn_wscap_dbg": os.environ.get("CUDNN_CONV_WSCAP_DBG", ""),
        "losses": losses,
        "step_ms": step_ms,
        "median_step_ms": statistics.median(steady),
        "first_fast_step": fast_index,
        "time_to_first_fast_step_s": fast_s,
    }
    if ut is not None:
        result["stats"] = ut.stats(model)
        result["adapter_host_ms_per_step"] = statistics.median(host_ms[len(host_ms) // 2:])
        result["adapter_calls"] = host["calls"]
    if device.type == "cuda":
        result["max_memory_allocated_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    return result


# ---- the suite -----------------------------------------------------------------------------------
def suite_configs(args):
    """(name, run arguments, extra environment) of every configuration, in run order. The first
    ucudnn runs wait for every plan (their kernels may be cold in the database)."""
    server = f"server={args.server}"
    cap = [f"--option={server}", "--option=workspace_bytes=64MiB", "--option=cache_path=off"]
    common = ["--device", args.device, "--batch", str(args.batch), "--steps", str(args.steps),
              "--image-size", str(args.image_size)]
    # The server holds a request while its worker benchmarks what is missing (cold kernels).
    wait_ms = int(args.warm_wait_s * 1000)
    wait = ["--prepare-wait-s", str(args.warm_wait_s), f"--option=server_wait_ms={wait_ms}",
            f"--option=deadline_ms={wait_ms + 30000}"]
    warmup_steps = ["--steps", "2"]
    configs = []
    for precision, flags in (("fp32", []), ("amp", ["--amp", "--channels-last"])):
        configs += [
            (f"{precision}_ucudnn_warmup",
             common + flags + ["--mode", "ucudnn"] + cap + wait + warmup_steps, {}),
            (f"{precision}_ucudnn_64mib", common + flags + ["--mode", "ucudnn"] + cap, {}),
            (f"{precision}_native_benchmark", common + flags + ["--benchmark"], {}),
            (f"{precision}_native_wscap64", common + flags + ["--benchmark"],
             {"CUDNN_CONV_WSCAP_DBG": "64"}),
        ]
    configs.append(("fp32_ucudnn_undivided", common + ["--mode", "ucudnn"] + cap +
                    ["--option=policy=undivided"] + wait, {}))
    return configs


def run_config(args, name, run_args, env_extra, out_dir):
    timeout = args.run_timeout_s + (args.warm_wait_s if "--prepare-wait-s" in run_args else 0)
    json_path = os.path.join(out_dir, f"{name}.json")
    log_path = os.path.join(out_dir, f"{name}.log")
    env = dict(os.environ, **env_extra)
    command = [args.python, os.path.abspath(__file__), "run", "--json-out", json_path] + run_args
    print(f"[torch_adapter] {name}: {' '.join(command)}", file=sys.stderr, flush=True)
    with open(log_path, "w") as log:
        try:
            rc = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout} s (see {log_path})"}
    if rc != 0 or not os.path.exists(json_path):
        with open(log_path) as log:
            tail = log.read()[-2000:]
        return {"error": f"exit {rc}; last output:\n{tail}"}
    with open(json_path) as f:
        return json.load(f)


def args_device(result):
    return result.get("config", {}).get("device", "cuda")


def compare(results):
    """The report's verdicts: loss agreement, speedups, overhead. (report, failures)."""
    report, failures = {}, []
    for name, result in results.items():
        if "error" in result:
            failures.append(f"{name}: {result['error']}")
    for precision in ("fp32", "amp"):
        native = results.get(f"{precision}_native_benchmark", {})
        mine = results.get(f"{precision}_ucudnn_64mib", {})
        capped = results.get(f"{precision}_native_wscap64", {})
        if "losses" not in native or "losses" not in mine:
            continue
        if args_device(mine) == "cuda" and mine["stats"]["kernels_planned"] == 0:
            failures.append(f"{precision}: no kernel has a plan (is the worker's device "
                            "fingerprint, cuDNN version included, the training process's? see "
                            "stack.log and the worker's log in logs.txt)")
        worst = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(mine["losses"], native["losses"]))
        ok = worst <= LOSS_RTOL[precision]
        if not ok:
            failures.append(f"{precision}: losses differ by {worst:.3g} relative "
                            f"(> {LOSS_RTOL[precision]})")
        entry = {
            "loss_max_rel_diff": worst,
            "losses_agree": ok,
            "step_ms": {"ucudnn_64mib": mine["median_step_ms"],
                        "native_uncapped": native["median_step_ms"],
                        "native_wscap64": capped.get("median_step_ms")},
            "planned_calls_per_step": mine["stats"]["planned_calls"] / max(1, len(mine["losses"])),
            "fallback_calls": mine["stats"]["fallback_calls"],
            "kernels_planned": f"{mine['stats']['kernels_planned']}/{mine['stats']['kernels']}",
            "time_to_first_fast_step_s": {
                "ucudnn_warm_database": mine["time_to_first_fast_step_s"],
                "native_cudnn_benchmark": native["time_to_first_fast_step_s"]},
        }
        if capped.get("median_step_ms"):
            entry["speedup_vs_wscap64"] = capped["median_step_ms"] / mine["median_step_ms"]
        entry["speedup_vs_uncapped"] = native["median_step_ms"] / mine["median_step_ms"]
        report[precision] = entry
    undivided = results.get("fp32_ucudnn_undivided", {})
    if "median_step_ms" in undivided:
        report["adapter_overhead_undivided"] = {
            "host_ms_per_step": undivided["adapter_host_ms_per_step"],
            "step_ms": undivided["median_step_ms"],
            "host_share_of_step": undivided["adapter_host_ms_per_step"] /
            undivided["median_step_ms"],
            "calls_per_step": undivided["adapter_calls"] / max(1, len(undivided["losses"])),
        }
    return report, failures


def run_suite(args):
    os.makedirs(args.out, exist_ok=True)
    results = {}
    for name, run_args, env_extra in suite_configs(args):
        results[name] = run_config(args, name, run_args, env_extra, args.out)
    report, failures = compare(results)
    summary = {"report": report, "failures": failures, "runs": results}
    with open(os.path.join(args.out, "torch_adapter.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(report, indent=2))
    for failure in failures:
        print(f"[torch_adapter] FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "suite":
        return run_suite(args)
    result = run_one(args)
    text = json.dumps(result, indent=2)
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
