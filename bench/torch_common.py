"""What the PyTorch benchmarks share (bench/torch_adapter.py, bench/torch_models.py): the time to
the first fast step, and writing a run's JSON."""

import json
import statistics

# A step is "fast" once within this factor of the steady-state median.
FAST_FACTOR = 1.10


def first_fast_step(step_ms, ends, process_start):
    """(index, seconds since `process_start`) of the first step within FAST_FACTOR of the steady
    median (the second half of the steps)."""
    steady = statistics.median(step_ms[len(step_ms) // 2:])
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
