"""The adapter's answers kept on the machine: a JSON file of records by key, shared by the
machine's jobs (prepare()'s route decisions, its host-bound answers), replaced atomically, the
newest kept. A file that cannot be read is no records; one that cannot be written is a warning,
never an error of the job."""

import json
import os


def read_records(path):
    """The file's records ({key: record}); none where it is missing or not ours."""
    try:
        with open(path) as f:
            records = json.load(f)
    except (OSError, ValueError):
        return {}
    return records if isinstance(records, dict) else {}


def keep_record(path, key, record, stamp, limit, log=None, what="record"):
    """Adds `record` (a dict whose `stamp` field orders records by age) under `key`, keeping the
    newest `limit`; True when written, else False with a warning in `log` naming `what`."""
    records = read_records(path)
    records.pop(key, None)
    records[key] = record
    newest = sorted(records.items(), key=lambda item: item[1].get(stamp, 0)
                    if isinstance(item[1], dict) else 0)
    records = dict(newest[-limit:])
    temporary = f"{path}.tmp.{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(temporary, "w") as f:
            json.dump(records, f)
        os.replace(temporary, path)
        return True
    except OSError as e:
        if log is not None:
            log.warning("ucudnn.torch: cannot keep the %s in %s: %s", what, path, e)
        return False
