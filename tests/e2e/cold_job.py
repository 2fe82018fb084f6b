"""A converted PyTorch job on a cold cluster (tests/e2e/python_job_test.cc): prepare() against a
planner whose database has none of the model's timings and no worker yet, then training steps
while the test starts a worker. Prints one JSON line per phase; the test asserts on them.

Usage: cold_job.py SERVER TOKEN [--steps-limit-s S]"""

import argparse
import json
import time

import torch
from torch import nn

import ucudnn.torch as ut


def job(server, token):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(8, 8, 3, padding=1))
    x = torch.randn(4, 3, 12, 12)
    return ut.convert(model, server=server, token=token, cache_path="off"), x


def say(phase, **fields):
    print(json.dumps({"phase": phase, **fields}), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("server")
    parser.add_argument("token")
    parser.add_argument("--steps-limit-s", type=float, default=90.0)
    args = parser.parse_args()

    # The first job: prepare() as the README's recipe has it (route="measure": the CPU backend
    # measures as CUDA would). PyTorch's own is not timed per kernel: on the CPU it beats every
    # plan, and the planner would then answer PyTorch's own for each kernel, leaving no step to
    # measure.
    model, x = job(args.server, args.token)
    started = time.monotonic()
    prepared = ut.prepare(model, x, wait_ms=30000, route="measure", measure_framework=False)
    say("prepared", seconds=time.monotonic() - started, route=prepared["route"],
        stats=ut.stats(model))

    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    planned_while_pending = 0
    steps = 0
    deadline = time.monotonic() + args.steps_limit_s
    while time.monotonic() < deadline:
        before = ut.stats(model)
        optimizer.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        optimizer.step()
        steps += 1
        after = ut.stats(model)
        if after["route"]["source"] != "plans missing":
            break
        planned_while_pending += after["planned_calls"] - before["planned_calls"]
        time.sleep(0.01)
    say("switched", steps=steps, planned_while_pending=planned_while_pending,
        route=ut.stats(model)["route"], layer_routes=ut.stats(model)["layer_routes"],
        layers=ut.routes(model), report=ut.report(model))

    # The next job of the same step takes the recorded route at once, with nothing pending.
    again, x = job(args.server, args.token)
    prepared = ut.prepare(again, x, wait_ms=30000, route="measure", measure_framework=False)
    say("next_job", route=prepared["route"], stats_route=ut.stats(again)["route"])


if __name__ == "__main__":
    main()
