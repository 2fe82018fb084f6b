"""What the PyTorch benchmarks share (bench/torch_adapter.py, bench/torch_models.py,
bench/torch_peer.py, bench/torch_conv_trace.py): the time to the first fast step, timing calls on
the device, and writing a run's JSON."""

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


def event_times_ms(call, repeats, before=None):
    """Milliseconds of each of `repeats` calls of `call`, between a pair of CUDA events on the
    current stream; `before` (say, an L2 flush) runs ahead of each pair, untimed."""
    import torch

    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def emit(result, json_out, indent=2):
    """`result` as JSON into the file `json_out`, or to standard output when it is empty."""
    text = json.dumps(result, indent=indent)
    if json_out:
        with open(json_out, "w") as f:
            f.write(text)
    else:
        print(text)
