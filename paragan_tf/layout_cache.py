"""The per-machine cache of measured layouts (train/layout_tuning.py writes it).

A readable JSON file (PARAGAN_TF_LAYOUT_CACHE, default
~/.cache/paragan_tf/layouts.json): one entry per key, the key a hash of the facts
the entry also holds in plain view: the hardware signature, TensorFlow's version
and the step's shape; beside them the choice, its seconds per step and FLOPs per
step, the date, and every candidate's timings. The scale plan reads it too
(scale/devices.py: this machine's measured efficiency).
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Dict, Iterator, List

from absl import logging


def path() -> str:
    default = os.path.join(os.environ.get("XDG_CACHE_HOME") or
                           os.path.join(os.path.expanduser("~"), ".cache"),
                           "paragan_tf", "layouts.json")
    return os.environ.get("PARAGAN_TF_LAYOUT_CACHE") or default


@contextlib.contextmanager
def locked() -> Iterator[Dict[str, dict]]:
    """The cache's entries, locked against other processes; written back if changed."""
    file = path()
    os.makedirs(os.path.dirname(file) or ".", exist_ok=True)
    with open(file + ".lock", "w") as lock:
        import fcntl  # pylint: disable=import-outside-toplevel
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries = _read(file)
        before = json.dumps(entries, sort_keys=True)
        yield entries
        if json.dumps(entries, sort_keys=True) != before:
            tmp = file + f".tmp{os.getpid()}"
            with open(tmp, "w") as f:
                json.dump(entries, f, indent=1, sort_keys=True)
            os.replace(tmp, file)


def _read(file: str) -> Dict[str, dict]:
    if not os.path.exists(file):
        return {}
    try:
        with open(file) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        logging.warning("layout cache %s unreadable (%s): measuring anew", file, e)
        return {}


def entries_for(signature: dict) -> List[dict]:
    """The entries measured on hardware of this signature, newest first (read-only)."""
    same = [e for e in _read(path()).values() if e.get("hardware") == signature]
    return sorted(same, key=lambda e: e.get("date", ""), reverse=True)
