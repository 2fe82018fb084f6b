"""A step's memory profile (ucudnn.torch.memory_profile) as a file, and the step's time-memory
curve from a planner (issue 21): what `python -m ucudnn curve` and ucudnn.torch.step_curve share.
No torch here: an operator draws the curve of a job's recorded step on any node with the job's
GPU and cuDNN, against the cluster's planner.

The file is JSON: {"format": "ucudnn-memory-profile", "version": 1, "backend": "cudnn"|"cpu",
"framework": the framework identity whose own convolution is a candidate ("" for none),
"base": bytes in use before the step, "calls": [[shape, in use, output bytes], ...]}, a shape
the ucudnnConvShape_t fields in their order (ucudnn._lib.ConvShape), in the order the step ran."""

import json

from . import _lib
from . import curve as _curve

FORMAT = "ucudnn-memory-profile"
VERSION = 1
BACKENDS = ("cudnn", "cpu")


class ProfileError(ValueError):
    """A profile file that is not one (the message says what is wrong)."""


def save(profile, path, backend, framework=""):
    """Writes memory_profile()'s `profile` to `path`, with the backend its kernels run on and the
    framework identity (ucudnn.torch.framework_identity()) whose timings its plans may use."""
    if backend not in BACKENDS:
        raise ValueError(f"ucudnn.profile.save: backend must be one of {BACKENDS}, got "
                         f"{backend!r}")
    document = {"format": FORMAT, "version": VERSION, "backend": backend,
                "framework": framework, "base": int(profile["base"]),
                "calls": [[list(key), int(in_use), int(output)]
                          for key, in_use, output in profile["calls"]]}
    with open(path, "w") as f:
        json.dump(document, f)


def load(path):
    """(profile as memory_profile() returns it, backend, framework) from a file save() wrote;
    ProfileError naming what is wrong otherwise."""
    try:
        with open(path) as f:
            document = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ProfileError(f"{path}: not a readable JSON memory profile ({e})") from e
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ProfileError(f"{path}: not a ucudnn memory profile (\"format\" is not {FORMAT!r})")
    if document.get("version") != VERSION:
        raise ProfileError(f"{path}: version {document.get('version')!r}; this ucudnn reads "
                           f"version {VERSION}")
    backend = document.get("backend")
    if backend not in BACKENDS:
        raise ProfileError(f"{path}: \"backend\" must be one of {BACKENDS}, got {backend!r}")
    fields = len(_lib.ConvShape._fields_)
    calls = []
    for i, call in enumerate(document.get("calls") or []):
        if not (isinstance(call, list) and len(call) == 3 and isinstance(call[0], list) and
                len(call[0]) == fields and
                all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                    for v in call[0] + call[1:])):
            raise ProfileError(f"{path}: calls[{i}] is not [[{fields} shape fields], in use, "
                               f"output bytes] of integers >= 0")
        calls.append((tuple(call[0]), call[1], call[2]))
    if not calls:
        raise ProfileError(f"{path}: no convolution calls")
    base = document.get("base", 0)
    framework = document.get("framework", "")
    if not isinstance(base, int) or not isinstance(framework, str):
        raise ProfileError(f"{path}: \"base\" must be bytes and \"framework\" a string")
    return {"calls": calls, "base": base}, backend, framework


def plan_curve(context, profile, budgets, wait_ms, native=None):
    """The step's curve through `context` (a ucudnn._lib.Context on the profile's backend): each
    budget's liveness limits (curve.budget_limits), every kernel declared at each of its limits in
    one request per limit, the answers awaited up to wait_ms, then curve.curve_points. Returns
    {"base_peak_bytes", "points", "native"}."""
    limits = _curve.budget_limits(profile, budgets)
    by_limit = {}
    for per_kernel in limits.values():
        for key, limit in per_kernel.items():
            by_limit.setdefault(limit, set()).add(key)
    for limit, keys in sorted(by_limit.items()):
        context.prepare([_lib.ConvShape(*key) for key in sorted(keys)], limit)
    context.wait_for_plans(wait_ms)

    def plan_of(key, limit):
        info = context.kernel_info(context.kernel(_lib.ConvShape(*key), limit))
        return info["state"], info["predicted_ms"], info["workspace_bytes"]

    return {"base_peak_bytes": _curve.base_peak(profile),
            "points": _curve.curve_points(profile, budgets, limits.__getitem__, plan_of),
            "native": native}
