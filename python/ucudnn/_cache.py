"""Where ucudnn keeps its caches on a machine: one rule for the client library's (the plan cache,
the compiled plans: client/src/config.cc) and the adapter's (prepare()'s host-bound answers)."""

import os

OFF = ("", "off", "none", "0")


def cache_path(variable, name):
    """The path of the cache `variable` names: its value, None where it says "off" (or "none",
    "0", empty); unset, `name` under $XDG_CACHE_HOME/ucudnn (an absolute one) or
    ~/.cache/ucudnn, None where neither is an absolute path."""
    value = os.environ.get(variable)
    if value is not None:
        value = value.strip()
        return None if value.lower() in OFF else value
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not base.startswith("/"):
        home = os.path.expanduser("~")
        if not home.startswith("/"):
            return None
        base = os.path.join(home, ".cache")
    return os.path.join(base, "ucudnn", name)
