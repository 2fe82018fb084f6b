#!/usr/bin/env python3
"""Where a host-bound training step's job-to-job noise comes from (issue 37), JSON out.

A host-bound step (batch 64 on an H200) takes its time from the host, and whole jobs of one
model on one machine have differed by 0.71-1.54x with the same device work. This measures, on
the machine it runs on:

  - the CPUs' topology (which logical CPUs share a core) and the hypervisor's steal time;
  - torch_models.host_probe_ms pinned to each CPU in turn, in several sweeps: whether some CPUs
    are slow all the time (then pin jobs away from them) or all of them at times (then only
    repeats help);
  - native jobs of one model (bench/torch_models.py run, each its own process), alternating
    unpinned and pinned to --cpus: each job's steady median step and host probe, and the
    spread of the job medians on each side.

    host_noise.py [--model resnet50] [--precision amp] [--batch 64] [--steps 30] [--jobs 4]
                  [--cpus LIST] [--sweeps 3] [--python PY] [--json-out F]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_common  # noqa: E402
import torch_models  # noqa: E402  (host_probe_ms, parse_cpus; no PyTorch imported)


def read_text(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def topology():
    """Per logical CPU: the CPUs sharing its core (SMT siblings) and its package."""
    cpus = {}
    for cpu in sorted(torch_models.available_cpus()):
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        cpus[cpu] = {"siblings": read_text(f"{base}/thread_siblings_list"),
                     "core_id": read_text(f"{base}/core_id"),
                     "package": read_text(f"{base}/physical_package_id")}
    model = None
    for line in (read_text("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {"cpu_model": model, "cpus": cpus}


def steal_ticks():
    """The whole machine's steal time in clock ticks (/proc/stat's eighth field): time the
    hypervisor ran something else while this machine's CPUs wanted to run."""
    line = (read_text("/proc/stat") or "").splitlines()[0].split()
    return int(line[8]) if len(line) > 8 else None


def probe_sweeps(sweeps, repeats):
    """host_probe_ms pinned to each CPU in turn, `sweeps` times over: {cpu: [median per sweep]}."""
    original = torch_models.available_cpus()
    by_cpu = {cpu: [] for cpu in sorted(original)}
    try:
        for _ in range(sweeps):
            for cpu in by_cpu:
                os.sched_setaffinity(0, {cpu})
                by_cpu[cpu].append(torch_models.host_probe_ms(repeats))
    finally:
        os.sched_setaffinity(0, original)
    return by_cpu


def run_job(args, cpus, out_dir, index):
    path = os.path.join(out_dir, f"job{index}.json")
    command = [args.python, os.path.join(HERE, "torch_models.py"), "run", "--mode", "native",
               "--model", args.model, "--precision", args.precision, "--batch", str(args.batch),
               "--steps", str(args.steps), "--json-out", path]
    if cpus:
        command += ["--cpus", cpus]
    steal_before, start = steal_ticks(), time.monotonic()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall_s = time.monotonic() - start
    steal = None if steal_before is None else steal_ticks() - steal_before
    if done.returncode != 0 or not os.path.exists(path):
        return {"cpus": cpus or "any", "error": (done.stderr or "")[-2000:]}
    with open(path) as f:
        run = json.load(f)
    return {"cpus": cpus or "any", "median_step_ms": run["median_step_ms"],
            "steady_step_ms": torch_common.steady_steps(run["step_ms"]),
            "host_probe_ms": run["host_probe_ms"],
            "device_ms_per_step": run.get("device_ms_per_step"), "wall_s": wall_s,
            "steal_ticks": steal, "clock_ticks_per_s": os.sysconf("SC_CLK_TCK")}


def side_summary(jobs):
    medians = [j["median_step_ms"] for j in jobs if "median_step_ms" in j]
    if not medians:
        return None
    return {"job_medians_ms": medians, "median_ms": statistics.median(medians),
            # max/min of the job medians: how far apart two jobs of one side land.
            "max_over_min": torch_common.spread(medians)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50", choices=sorted(torch_models.MODELS))
    parser.add_argument("--precision", default="amp", choices=torch_models.PRECISIONS)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=4, help="jobs per side (0: no jobs)")
    parser.add_argument("--cpus", default="",
                        help="the pinned side's CPUs (default: the upper half of this machine's)")
    parser.add_argument("--sweeps", type=int, default=3, help="probe sweeps over every CPU")
    parser.add_argument("--probe-repeats", type=int, default=9)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--json-out", default="")
    args = parser.parse_args(argv)
    if args.jobs < 0 or args.sweeps < 1 or args.steps < 4:
        parser.error("--jobs must be >= 0, --sweeps >= 1, --steps >= 4")
    if not args.cpus:
        cpus = sorted(torch_models.available_cpus())
        args.cpus = torch_models.format_cpus(cpus[len(cpus) // 2:])
    try:
        pinned = torch_models.parse_cpus(args.cpus)
    except ValueError as e:
        parser.error(str(e))
    if not pinned <= torch_models.available_cpus():
        parser.error(f"--cpus {args.cpus}: this machine's CPUs are "
                     f"{torch_models.format_cpus(torch_models.available_cpus())}")

    result = {"config": vars(args), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
              "topology": topology()}
    steal_before = steal_ticks()
    result["probe_by_cpu_ms"] = probe_sweeps(args.sweeps, args.probe_repeats)
    result["probe_steal_ticks"] = (None if steal_before is None
                                   else steal_ticks() - steal_before)
    jobs = []
    with tempfile.TemporaryDirectory() as out_dir:
        for i in range(args.jobs):
            for cpus in ("", args.cpus) if i % 2 == 0 else (args.cpus, ""):
                jobs.append(run_job(args, cpus, out_dir, len(jobs)))
                print(f"[host_noise] job {len(jobs)}: {json.dumps(jobs[-1])[:200]}",
                      file=sys.stderr, flush=True)
    result["jobs"] = jobs
    result["summary"] = {
        "unpinned": side_summary([j for j in jobs if j["cpus"] == "any"]),
        "pinned": side_summary([j for j in jobs if j["cpus"] == args.cpus])}
    torch_common.emit(result, args.json_out)


if __name__ == "__main__":
    main()
