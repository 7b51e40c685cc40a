"""The per-machine cache of measured layouts (measure/tuning.py writes it).

A readable JSON file (PARAGAN_TF_LAYOUT_CACHE, default
~/.cache/paragan_tf/layouts.json): one entry per key, the key a hash of the facts
the entry also holds in plain view: the schema, the hardware signature, TensorFlow's
version, the step's shape and what the run pinned; beside them the choice, its seconds
per step and FLOPs per step, the date, and every candidate's timings. The scale plan
reads it too, with the step rates bin/plan.py --calibrate leaves in it (entries of kind
"step_rate": scale/measured.py).

The cache never stops a run: a file or an entry that is not what this module writes,
or a path that cannot be written, is one warning line, and the run goes on with what
it measured. Readers take no lock (a write replaces the file whole); writers and
measurements each hold one, so that two first runs of one step measure one at a time
(the second then finds the first's entry).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from typing import Callable, Dict, Iterator, List, Optional

from absl import logging

# Joins every key (measure/tuning.py): an entry written under another schema is
# never read as one of this schema. 2: the pins joined the key.
SCHEMA = 2


def path() -> str:
    default = os.path.join(os.environ.get("XDG_CACHE_HOME") or
                           os.path.join(os.path.expanduser("~"), ".cache"),
                           "paragan_tf", "layouts.json")
    return os.environ.get("PARAGAN_TF_LAYOUT_CACHE") or default


_warned = set()


def warn_once(message: str) -> None:
    """A warning line, once per process: a run reads the cache several times."""
    if message not in _warned:
        _warned.add(message)
        logging.warning("%s", message)


def _read(file: str) -> Optional[Dict[str, dict]]:
    """The file's entries; None (after one warning line) when it is not ours to read."""
    try:
        with open(file) as f:
            entries = json.load(f)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return {}  # no file there: a path that cannot be written says so on writing
    except (OSError, ValueError) as e:
        warn_once(f"layout cache {file} unreadable ({e}): ignored")
        return None
    if not isinstance(entries, dict):
        warn_once(f"layout cache {file} holds a JSON {type(entries).__name__}, not an object "
                  f"of entries: ignored")
        return None
    return entries


def read_all() -> Dict[str, dict]:
    """Every entry of the file, whatever its kind (read-only; {} when unreadable)."""
    return _read(path()) or {}


def read(key: str) -> Optional[dict]:
    """The entry under `key`, or None: none there, or the file is not readable."""
    entries = _read(path()) or {}
    return entries.get(key)


def write(key: str, entry: dict) -> Optional[str]:
    """Stores `entry` under `key`; None when written, else why not (one warning line
    already logged). A file that was not ours to read is kept beside, as .unreadable."""
    file = path()
    tmp = file + f".tmp{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(file) or ".", exist_ok=True)
        with open(file + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            entries = _read(file)
            if entries is None and os.path.isfile(file):
                os.replace(file, file + ".unreadable")
            entries = entries or {}
            entries[key] = entry
            with open(tmp, "w") as f:
                json.dump(entries, f, indent=1, sort_keys=True)
            os.replace(tmp, file)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        warn_once(f"layout cache {file} not written ({e}): the measured layout holds for "
                  f"this run only")
        return str(e)
    return None


@contextlib.contextmanager
def measuring(progress: Callable[[str], None]) -> Iterator[None]:
    """Held while this process measures: one measurement at a time per cache (two at once
    would time each other's load). Waits, saying so, for one under way elsewhere."""
    file = path() + ".measuring"
    try:
        os.makedirs(os.path.dirname(file) or ".", exist_ok=True)
        lock = open(file, "a+")
    except OSError:
        yield  # no lock where nothing can be written: write() says so in its one line
        return
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            progress(f"layout: waiting for {holder}, which is measuring a layout on this "
                     f"machine ({file})")
            fcntl.flock(lock, fcntl.LOCK_EX)
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()}\n")
        lock.flush()
        yield


def entries_for(signature: dict) -> List[dict]:
    """The entries of this schema measured on hardware of this signature, newest first
    (read-only)."""
    same = [e for e in (_read(path()) or {}).values()
            if isinstance(e, dict) and e.get("schema") == SCHEMA and
            e.get("hardware") == signature and isinstance(e.get("choice"), dict) and
            isinstance(e.get("step"), dict)]
    return sorted(same, key=lambda e: str(e.get("date", "")), reverse=True)
