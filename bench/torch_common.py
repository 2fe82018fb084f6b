"""What the PyTorch benchmarks share (bench/torch_adapter.py, bench/torch_models.py): the time to
the first fast step, and writing a run's JSON."""

import json
import statistics

# A step is "fast" once within this factor of the steady-state median.
FAST_FACTOR = 1.10


def steady_steps(step_ms):
    """A run's steady steps: the second half (the first steps include PyTorch's benchmark and
    the adapter's decisions)."""
    return step_ms[len(step_ms) // 2:]


def spread(values):
    """The largest of `values` over the smallest: how far apart runs of the same thing land."""
    return max(values) / min(values)


def first_fast_step(step_ms, ends, process_start):
    """(index, seconds since `process_start`) of the first step within FAST_FACTOR of the steady
    median (steady_steps)."""
    steady = statistics.median(steady_steps(step_ms))
    for i, ms in enumerate(step_ms):
        if ms <= FAST_FACTOR * steady:
            return i, ends[i] - process_start
    return len(step_ms) - 1, ends[-1] - process_start


def emit(result, json_out, indent=2):
    """`result` as JSON into the file `json_out`, or to standard output when it is empty."""
    text = json.dumps(result, indent=indent)
    if json_out:
        with open(json_out, "w") as f:
            f.write(text)
    else:
        print(text)
