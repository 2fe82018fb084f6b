#!/usr/bin/env python3
"""Every binary's --help lists every flag, with help text, and every environment variable.

Usage: help_test.py BINARY   (tests/tools.cmake adds one test per binary)

Runs `BINARY [SUBCOMMAND] --help` for each command listed below and checks, from the help
CLI11 prints: it exits 0; its flags are exactly the ones listed here (a flag added to the
binary but not here fails, so does one listed here that the help lost); every flag has help
text; a flag listed as --flag=VARIABLE shows (Env:VARIABLE), and no other flag shows one; the
variables the binary reads outside its flags appear in the text; a binary with subcommands
lists exactly the subcommands below.
"""
import os
import re
import subprocess
import sys

# ---- what each binary documents ------------------------------------------------------------------
# Per binary: {subcommand ("" for the binary itself): [flags]}; "--flag=VARIABLE" for a flag with an
# environment variable, a bare name for a positional. --help is always expected and not listed.
# "environment": variables read without a flag, named somewhere in the binary's own --help.

NETWORK = ["--network", "--batch", "--dtype", "--layout", "--math"]
SERVER = ["--server=UCUDNN_SERVER", "--tls-ca=UCUDNN_CA_FILE", "--token=UCUDNN_TOKEN",
          "--token-file", "--deadline-ms"]
PLAN = SERVER + NETWORK + ["--backend", "--device", "--policy", "--workspace", "--algorithms",
                           "--mode", "--json"]
DATABASE = ["--database-url=UCUDNN_DATABASE_URL"]

EXPECTED = {
    "ucudnn": {
        "": ["--version", "--log-level=UCUDNN_LOG_LEVEL"],
        "networks": ["--json"],
        "problem": NETWORK + ["--unique", "--json"],
        "gpus": ["--json"],
        "cpu-bench": NETWORK + ["--policy", "--workspace", "--output", "--threads"],
        "migrate": DATABASE + ["--to-version"],
        "import": ["file"] + DATABASE,
        "health": SERVER + ["--json"],
        "devices": SERVER + ["--json"],
        "workers": SERVER + ["--alive", "--json"],
        "jobs": SERVER + ["--state", "--limit", "--retry", "--cancel", "--all-queued", "--device",
                          "--json"],
        "plan": PLAN + ["--wait", "--total"],
        "explain": PLAN,
        "timings": PLAN + ["--wrong-results"],
        "curve": PLAN + ["--max-workspace", "--svg"],
        "environment": ["UCUDNN_TOKEN_FILE", "UCUDNN_TLS_CA"],
    },
    "ucudnn-worker": {
        "": ["--version"] + DATABASE + [
            "--backend=UCUDNN_WORKER_BACKEND", "--gpus=UCUDNN_WORKER_GPUS",
            "--compiled-plan-cache=UCUDNN_COMPILED_PLAN_CACHE",
            "--lease-seconds=UCUDNN_WORKER_LEASE_SECONDS",
            "--heartbeat-seconds=UCUDNN_WORKER_HEARTBEAT_SECONDS",
            "--poll-seconds=UCUDNN_WORKER_POLL_SECONDS",
            "--drain-seconds=UCUDNN_WORKER_DRAIN_SECONDS",
            "--max-attempts=UCUDNN_WORKER_MAX_ATTEMPTS", "--once",
            "--worker-id-prefix=UCUDNN_WORKER_ID_PREFIX",
            "--metrics-port=UCUDNN_WORKER_METRICS_PORT",
            "--metrics-host=UCUDNN_WORKER_METRICS_HOST",
            "--workspace-cap=UCUDNN_WORKER_WORKSPACE_CAP",
            "--warmup-runs=UCUDNN_WORKER_WARMUP_RUNS", "--min-runs=UCUDNN_WORKER_MIN_RUNS",
            "--max-runs=UCUDNN_WORKER_MAX_RUNS",
            "--config-budget-ms=UCUDNN_WORKER_CONFIG_BUDGET_MS",
            "--prune-margin=UCUDNN_WORKER_PRUNE_MARGIN",
            "--skip-factor=UCUDNN_WORKER_SKIP_FACTOR",
            "--split-skip-factor=UCUDNN_WORKER_SPLIT_SKIP_FACTOR",
            "--usable-margin=UCUDNN_WORKER_USABLE_MARGIN",
            "--probe-batch-ms=UCUDNN_WORKER_PROBE_BATCH_MS",
            "--prepare-threads=UCUDNN_WORKER_PREPARE_THREADS",
            "--compile-processes=UCUDNN_WORKER_COMPILE_PROCESSES",
            "--short-run-us=UCUDNN_WORKER_SHORT_RUN_US",
            "--short-runs-device-time-only=UCUDNN_WORKER_SHORT_RUNS_DEVICE_TIME_ONLY",
            "--exhaustive=UCUDNN_WORKER_EXHAUSTIVE", "--no-result-check",
            "--idle-gate=UCUDNN_WORKER_IDLE_GATE",
            "--idle-max-utilization=UCUDNN_WORKER_IDLE_MAX_UTILIZATION",
            "--idle-poll-seconds=UCUDNN_WORKER_IDLE_POLL_SECONDS",
            "--idle-max-pause-seconds=UCUDNN_WORKER_IDLE_MAX_PAUSE_SECONDS",
            "--contended-spread=UCUDNN_WORKER_CONTENDED_SPREAD",
            "--offline", "--network", "--batch", "--policy", "--dtype", "--layout", "--output",
            "--log-level=UCUDNN_LOG_LEVEL"],
        "environment": ["NVIDIA_TF32_OVERRIDE"],
    },
    "ucudnn-bench-engine": {
        "": ["--json", "--backend", "--device", "--repeat", "--layers", "--problem", "--ops",
             "--dtype", "--batch", "--policy", "--workspace-cap", "--warmup", "--min-runs",
             "--max-runs", "--budget-ms", "--prune-margin", "--skip-factor", "--split-skip-factor",
             "--usable-margin", "--probe-batch-ms", "--prepare-threads", "--short-run-us",
             "--device-time-only", "--data-dir", "--replay-pruning", "--replay-sizes",
             "--probe-noise", "--log-level"],
    },
    "ucudnn-bench-planner": {
        "": ["--json", "--data", "--repeat", "--gap", "--network"],
        "environment": ["SPDLOG_LEVEL"],
    },
    "ucudnn-engine-probe": {
        "": ["--out", "--exhaustive", "--quick", "--shape", "--precision", "--op", "--batch",
             "--max-per-engine", "--exhaustive-s", "--no-host-overhead", "--kernel-cache"],
    },
    "ucudnn-example-train-step": {
        "": ["--backend", "--network", "--batch", "--dtype", "--layout", "--math", "--limits-mib",
             "--total-budget-mib", "--total-mode", "--policy", "--algorithms", "--server",
             "--offline-timings", "--measure", "--measure-runs", "--measure-warmup",
             "--plan-wait-s", "--steps", "--warmup", "--find-baseline", "--per-kernel", "--json"],
        "environment": ["UCUDNN_LOG_LEVEL"],
    },
}

# ---- reading CLI11's help ------------------------------------------------------------------------
# CLI11 prints each option as "  NAMES OPTS" padded to a column, then its description; NAMES OPTS
# longer than the column put the description on the next line, indented to the column. An option
# without a description is its padded NAMES OPTS alone.

# How OPTS go on after the column, where a long NAMES OPTS crosses it (not a description).
OPTS_CONTINUE = re.compile(r"(TEXT|INT|UINT|FLOAT|BOOLEAN|REQUIRED|\.\.\.|\(Env:|Needs:|Excludes:)")


def sections(text):
    """[(section title, [[entry line, continuation lines...], ...])] after the Usage line."""
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith("Usage:")), None)
    if start is None:
        return []
    result, current = [], None
    for line in lines[start + 1:]:
        if not line.strip():
            current = None
        elif current is None:
            if re.match(r"^\S.*:$", line):
                current = (line[:-1], [])
                result.append(current)
        elif re.match(r"^  \S", line):
            current[1].append([line])
        elif current[1]:
            current[1][-1].append(line)
    return result


def read_option(entry, column):
    """(names and opts, description) of one option's lines."""
    line, more = entry[0], entry[1:]
    if line.endswith(" "):  # padded to the column: nothing follows
        return line.strip(), " ".join(m.strip() for m in more)
    if (len(line) > column and line[column - 1] == " " and line[column] != " "
            and not OPTS_CONTINUE.match(line[column:])):
        return line[:column].strip(), " ".join([line[column:]] + [m.strip() for m in more])
    return line.strip(), " ".join(m.strip() for m in more)


def parse(text):
    """({flag or positional: (variable or None, description)}, [subcommands])."""
    found = sections(text)
    indents = [len(m) - len(m.lstrip()) for _, entries in found for e in entries for m in e[1:]]
    column = min(indents) if indents else 30
    options, subcommands = {}, []
    for title, entries in found:
        for entry in entries:
            if title == "Subcommands":
                subcommands.append(entry[0].split()[0])
                continue
            names, description = read_option(entry, column)
            first = names.split()[0]
            env = re.search(r"\(Env:(\w+)\)", names)
            keys = re.findall(r"--[\w-]+", first) if title != "Positionals" else [first]
            for key in keys[-1:]:  # the long name of "-s,--server"
                options[key] = (env.group(1) if env else None, description.strip())
    return options, subcommands


# ---- the checks ----------------------------------------------------------------------------------

def check_command(binary, subcommand, listed, problems):
    argv = [binary] + ([subcommand] if subcommand else []) + ["--help"]
    where = " ".join([os.path.basename(binary)] + argv[1:])
    run = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        problems.append(f"{where}: exited {run.returncode}, expected 0\n{run.stderr}")
        return "", []
    options, subcommands = parse(run.stdout)
    expected = {"--help": None}
    for item in listed:
        flag, _, env = item.partition("=")
        expected[flag] = env or None
    for flag, env in expected.items():
        if flag not in options:
            problems.append(f"{where}: {flag} is not listed")
            continue
        shown_env, description = options[flag]
        if not description:
            problems.append(f"{where}: {flag} has no help text")
        if shown_env != env:
            problems.append(f"{where}: {flag} shows environment variable {shown_env}, "
                            f"expected {env}")
    for flag in sorted(set(options) - set(expected)):
        problems.append(f"{where}: lists {flag}, which tests/tools/help_test.py does not know: "
                        "add it to the list (with =VARIABLE if it has one)")
    return run.stdout, subcommands


def main():
    binary = sys.argv[1]
    name = os.path.basename(binary)
    commands = dict(EXPECTED[name])
    environment = commands.pop("environment", [])
    problems = []
    text, subcommands = check_command(binary, "", commands.pop(""), problems)
    for variable in environment:
        if variable not in text:
            problems.append(f"{name} --help: does not name {variable}")
    if sorted(subcommands) != sorted(commands):
        problems.append(f"{name} --help: subcommands {sorted(subcommands)}, expected "
                        f"{sorted(commands)}")
    for subcommand, listed in commands.items():
        check_command(binary, subcommand, listed, problems)
    for p in problems:
        print("FAIL:", p)
    checked = 1 + len(commands)
    print(f"{name}: {checked} command(s) checked, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
