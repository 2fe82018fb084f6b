"""One route per (model, batch, precision, machine), the same in every job (issue 37).

prepare() compares the step with the routes the plans give (each layer by its rule: decide_layer)
against the step with every layer on PyTorch's own, in alternating rounds, and keeps the plans'
routes only where they are faster than the noise between rounds says they could be by chance.
The answer is written on the machine (UCUDNN_ROUTE_CACHE, default ~/.cache/ucudnn/routes.json)
and every later job of the same step applies it without measuring: no job takes a route that an
earlier one measured slower, and a host-bound step, where plans save device time that does not
shorten it, stays on PyTorch's own in every job.

Why rounds and not one measurement per side: a step's time moves by several per cent between
runs on a shared host (ConvNeXt-T's host share 42 of 53 ms in one run, 25 of 51 in the next), and
one reading per side flipped the answer between consecutive jobs. Alternating rounds meet the
same machine state on both sides; the spread of each side's round medians is the noise.

Pure logic and the record file; the measuring itself is prepare()'s."""

import hashlib
import statistics
import time

from .records import keep_record


# A record is applied for this long: an answer taken on a machine that has changed since
# (drivers, a busier host) does not stand for good.
RECORD_DAYS = 7
# At most this many records are kept (the newest).
RECORDS = 256
# The plans' routes are kept only when their median step is under native's by more than the
# noise and by at least this share of native's step: below it no user would see a gain, and the
# plans' host cost and workspace are not worth it.
MIN_GAIN = 0.01
# The rounds each side is measured in, and the steps a round takes (its median is the round's).
ROUNDS = 3
STEPS_PER_ROUND = 3

PLANS = "plans"
NATIVE = "native"
RECORD_VERSION = 1


def noise_ms(rounds):
    """The spread of one side's round medians (max - min): what its step moves by between rounds
    on this machine now."""
    return max(rounds) - min(rounds) if rounds else float("inf")


def choose(plans_rounds, native_rounds, min_gain=MIN_GAIN):
    """The route from each side's round medians (ms): PLANS only where the plans' median step is
    faster than native's by more than both sides' noise together and by min_gain of native's
    step, else NATIVE (a converted model is never slower than the unconverted one). Returns
    (route, why) with the numbers in `why`."""
    if not plans_rounds or not native_rounds:
        raise ValueError("decision.choose: both sides need at least one round")
    plans = statistics.median(plans_rounds)
    native = statistics.median(native_rounds)
    noise = noise_ms(plans_rounds) + noise_ms(native_rounds)
    gain = native - plans
    numbers = (f"plans {plans:.2f} ms (spread {noise_ms(plans_rounds):.2f}), native "
               f"{native:.2f} ms (spread {noise_ms(native_rounds):.2f}) over "
               f"{len(plans_rounds)} rounds")
    if gain > noise and gain >= min_gain * native:
        return PLANS, f"{numbers}: the plans are faster beyond the noise"
    if gain > 0:
        return NATIVE, f"{numbers}: the plans' gain is within the noise or under " \
                       f"{min_gain:.0%}, PyTorch's own is kept"
    return NATIVE, f"{numbers}: PyTorch's own is as fast or faster"


def settled(plans_rounds, native_rounds, min_rounds=2):
    """Whether the rounds so far already decide for PyTorch's own, whatever further rounds show:
    after min_rounds (each order of the two sides met once), the plans' median step is slower
    than native's by more than both sides' noise together. More rounds are taken only where the
    plans could still win (choose() keeps them only when faster beyond the noise); the round a
    job skips here is six of its route measurement's twenty steps."""
    if min(len(plans_rounds), len(native_rounds)) < min_rounds:
        return False
    loss = statistics.median(plans_rounds) - statistics.median(native_rounds)
    return loss > noise_ms(plans_rounds) + noise_ms(native_rounds)


def step_key(parts):
    """The record's key: a hash of what the step's speed depends on (`parts`: strings: the host,
    the GPU, PyTorch's and cuDNN's versions, the model's structure, the inputs' shapes, dtypes
    and strides, autocast, the loss, whether PyTorch benchmarks, the library's options)."""
    return hashlib.sha256("\n".join(str(p) for p in parts).encode()).hexdigest()


def structure_hash(model):
    """A hash of the model's structure (its repr: layer types and their arguments), the same for
    the same architecture in every job whatever its weights."""
    return hashlib.sha256(repr(model).encode()).hexdigest()


def valid(record, now=None):
    """Whether `record` (read from the file) is one this version applies: well formed and not
    older than RECORD_DAYS."""
    now = time.time() if now is None else now
    return (isinstance(record, dict) and record.get("version") == RECORD_VERSION
            and record.get("route") in (PLANS, NATIVE)
            and isinstance(record.get("layers"), list)
            and isinstance(record.get("decided_at"), (int, float))
            and now - record["decided_at"] <= RECORD_DAYS * 86400)


def make_record(route, why, layers, plans_rounds, native_rounds, now=None):
    """The record prepare() writes: the route, why, each converted layer's route under it (in
    the model's module order: "plan" or "framework") and the measurements."""
    return {"version": RECORD_VERSION, "route": route, "why": why, "layers": list(layers),
            "plans_ms": list(plans_rounds), "native_ms": list(native_rounds),
            "decided_at": time.time() if now is None else now}


def write_record(path, key, record, log=None):
    """Adds `record` to the file at `path` (records.keep_record: atomically, the newest RECORDS
    kept; a file that cannot be written is a warning in `log`); whether it was written."""
    return keep_record(path, key, record, "decided_at", RECORDS, log, "route decision")
