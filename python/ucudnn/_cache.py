"""Where ucudnn keeps its caches on a machine: one rule for the library's (the plan cache, the
compiled plans: UserCachePath and PathSetting, core/src/files.cc) and the adapter's (prepare()'s
host-bound answers)."""

import os

OFF = ("", "off", "none", "0")


def is_off(value):
    """Whether a cache setting's value turns that cache off."""
    return value.strip().lower() in OFF


def compiled_plan_files(directory):
    """The compiled plans `directory` holds (core/include/ucudnn/core/compiled_plans.h: one
    <hash>.plan file each), [] where it is None or absent."""
    if not directory or not os.path.isdir(directory):
        return []
    return [os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".plan")]


def cache_path(variable, name):
    """The path of the cache `variable` names: its value, None where it says "off" (or "none",
    "0", empty); unset, `name` under $XDG_CACHE_HOME/ucudnn (an absolute one) or
    ~/.cache/ucudnn, None where neither is an absolute path."""
    value = os.environ.get(variable)
    if value is not None:
        return None if is_off(value) else value.strip()
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not base.startswith("/"):
        home = os.path.expanduser("~")
        if not home.startswith("/"):
            return None
        base = os.path.join(home, ".cache")
    return os.path.join(base, "ucudnn", name)
