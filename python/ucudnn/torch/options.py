"""convert()'s options: their names, checks and the library's option block; data types."""

import re

import torch

from .. import _lib


# Keyword arguments of convert() and the variables they set (ClientConfig's names).
CONFIG_KEYS = ("server", "token", "tls", "ca_file", "policy", "workspace_mode", "workspace_bytes",
               "algorithms", "cache_path", "compiled_plan_cache", "deadline_ms", "server_wait_ms",
               "contribute", "log_level", "disable", "framework")


# Options that a checkpoint (torch.save of a converted model) does not carry: a bearer token is a
# secret, and a server and CA file belong to the cluster that loads it, not the one that saved it.
# A loaded model takes them from the loading process's UCUDNN_* environment.
NOT_PICKLED = ("token", "server", "ca_file", "tls")


DATA_TYPES = {torch.float32: _lib.FLOAT, torch.float16: _lib.HALF, torch.bfloat16: _lib.BFLOAT16}


TORCH_DTYPES = {value: key for key, value in DATA_TYPES.items()}


_CHOICES = {
    "policy": ("undivided", "power_of_two", "all"),
    "workspace_mode": ("per_kernel", "total", "total_shared", "total_sum"),
    "log_level": ("trace", "debug", "info", "warn", "warning", "error", "critical", "off"),
    "algorithms": ("all", "legacy", "engines"),
}


_BOOLEANS = ("tls", "contribute", "disable")


# The library's ranges (client/src/config.cc).
_MILLISECONDS = {"deadline_ms": (1, 3600000), "server_wait_ms": (0, 600000)}


_MAX_WORKSPACE_BYTES = 1 << 40


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B|[KMGT])?\s*$", re.IGNORECASE)


_SIZE_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KIB": 1 << 10, "KB": 1000, "M": 1 << 20,
               "MIB": 1 << 20, "MB": 1000**2, "G": 1 << 30, "GIB": 1 << 30, "GB": 1000**3,
               "T": 1 << 40, "TIB": 1 << 40, "TB": 1000**4}


def parse_bytes(value, what="workspace_bytes"):
    """64 * 2**20 from 64 * 2**20, "64MiB", "64M" or "67108864"; ValueError naming `what`."""
    if isinstance(value, bool):
        raise ValueError(f"ucudnn.torch: {what} must be a byte count, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"ucudnn.torch: {what} must be >= 0, got {value}")
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"ucudnn.torch: {what}={value!r} is not a size (e.g. 67108864, "
                         "'64MiB', '1GiB')")
    unit = (match.group(2) or "").upper()
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def check_option(key, value):
    """The option's text as the library reads it; ValueError naming what is wrong."""
    if key in _BOOLEANS:
        if isinstance(value, bool):
            return "1" if value else "0"
        if str(value).lower() in ("0", "1", "true", "false", "yes", "no", "on", "off"):
            return str(value)
        raise ValueError(f"ucudnn.torch: option '{key}' must be a bool, got {value!r}")
    text = str(value)
    if ";" in text or "\n" in text or "\r" in text:
        raise ValueError(f"ucudnn.torch: option '{key}' must not contain ';' or a line break")
    if key in _CHOICES and text.lower() not in _CHOICES[key]:
        raise ValueError(f"ucudnn.torch: {key}={value!r} is not one of "
                         f"{', '.join(_CHOICES[key])}")
    if key == "workspace_bytes":
        size = parse_bytes(value)
        if size > _MAX_WORKSPACE_BYTES:
            raise ValueError(f"ucudnn.torch: workspace_bytes={value!r} is over 1 TiB")
        return str(size)
    if key in _MILLISECONDS:
        low, high = _MILLISECONDS[key]
        try:
            milliseconds = int(text)
        except ValueError:
            milliseconds = low - 1
        if not low <= milliseconds <= high:
            raise ValueError(f"ucudnn.torch: {key} must be an int in [{low}, {high}], got "
                             f"{value!r}")
    if key == "framework" and (not text or len(text) > 128 or
                               any(not " " <= ch <= "~" for ch in text)):
        raise ValueError(f"ucudnn.torch: framework must be 1 to 128 printable ASCII characters, "
                         f"got {value!r}")
    return text


def library_options(config):
    """'UCUDNN_X=v;...' from keyword arguments; a clear error for an unknown or bad one."""
    entries = []
    for key, value in sorted(config.items()):
        if key not in CONFIG_KEYS:
            raise TypeError(f"ucudnn.torch: unknown option '{key}' "
                            f"(known: {', '.join(CONFIG_KEYS)})")
        entries.append(f"UCUDNN_{key.upper()}={check_option(key, value)}")
    return ";".join(entries)


def framework_identity():
    """This process's PyTorch as the planner knows it: its version and whether cuDNN benchmarks
    (what it chooses depends on it). Timings of PyTorch's own convolution are shared by every job
    with the same identity on the same device (the device fingerprint holds the cuDNN version)."""
    mode = "benchmark" if torch.backends.cudnn.benchmark else "heuristic"
    if torch.backends.cudnn.deterministic:
        mode += "-deterministic"
    return f"torch-{torch.__version__}/{mode}"


INFINITY = float("inf")


# prepare()'s budgets (its docstring says what each is).
BUDGETS = ("auto", "fixed", "liveness", "allowance")
