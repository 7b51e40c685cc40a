"""The run's folder: where it is, which checkpoints it names, checked, locked, a full disk named.

`resolve` is the one spelling of a run's folder: every binary and library entry
point passes `--model_dir` through it, so a folder typed relative (`runs/default`,
`./runs/default/`) means the same folder to every process, whatever its working
directory. `checkpoint_paths` is the one reader of the folder's `checkpoint`
state file: resume, evaluation, sampling, export and sweeps all take their
checkpoint paths from it.

`check` runs before the experiment is built, so a model_dir that is a file (or
cannot be created) fails in one line instead of a traceback minutes later.

`Lock` keeps two trainings out of one folder: the chief process (the only
writer; other workers of a multi-worker run take no lock) holds an exclusive
`flock` on `model_dir/.lock` for the run. A run that ends (normally, on SIGTERM
or Ctrl-C, or on an error) releases it and clears its record; the kernel
releases the flock of a killed process too (SIGKILL, a crash), whose record is
left, so the next run takes the lock over with a log line naming that process. The file holds the holder's pid, host and
command, so a refused second run can say who holds the folder.
Only local folders are locked; a remote one (gs://...) is used unlocked, with a
warning.

`DiskFull` is the one-line error for a checkpoint that did not fit: it names
the folder, the bytes the checkpoint needs and those free. TensorFlow names a
new checkpoint as the newest only after its files are complete, so the
previous checkpoint stays the newest and loadable; the partial files are
removed.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import sys
import time
from typing import List, Optional

from absl import logging

from paragan_tf.errors import ConfigError

# TensorFlow is imported where it is used: the launcher resolves run folders with this
# module and starts in a fraction of a second without it.

LOCK_FILE = ".lock"
# How long a refused run waits for the holder's record, written just after its lock.
HOLDER_WAIT_SECONDS = 2.0


def is_local(path: str) -> bool:
    return "://" not in path


def resolve(path: str) -> str:
    """The one spelling of a run folder (or checkpoint prefix) that every process uses.

    A local path becomes absolute and normalised (`runs/x`, `./runs/x/` and `~/x`
    alike; a symlink stays as typed, so the run follows the link). A tf.io.gfile URL
    (`gs://bucket/run/`) is not a local path: it keeps its scheme and only loses a
    trailing slash.
    """
    if not path:
        raise ConfigError("--model_dir is empty; name a folder (it is created if missing)")
    if not is_local(path):
        return path.rstrip("/")
    return os.path.abspath(os.path.expanduser(path))


def _step(prefix: str) -> int:
    return int(prefix.rsplit("-", 1)[1])


def checkpoint_paths(model_dir: str) -> List[str]:
    """The checkpoints that model_dir's `checkpoint` state file names, newest first.

    Each entry is taken by its file name alone and joined to the resolved folder here:
    TensorFlow's reader already joins a relative entry to the folder it was given, so
    joining again (as every caller once did) doubled a relative folder
    (`runs/x/runs/x/ckpt-4`). By name, a run folder that was moved or copied also
    finds its own files rather than the ones its old absolute entries point at.
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    model_dir = resolve(model_dir)
    state = tf.train.get_checkpoint_state(model_dir)
    if state is None or not state.model_checkpoint_path:
        return []
    names = {os.path.basename(p) for p in
             [state.model_checkpoint_path, *state.all_model_checkpoint_paths]}
    return sorted((os.path.join(model_dir, name) for name in names), key=_step, reverse=True)


def latest_checkpoint(model_dir: str) -> Optional[str]:
    """The newest checkpoint model_dir names (a prefix such as /abs/run/ckpt-1200), or None."""
    paths = checkpoint_paths(model_dir)
    return paths[0] if paths else None


def check(model_dir: str) -> None:
    """Raises ConfigError unless `model_dir` is (or can become) a writable folder."""
    if not is_local(model_dir):
        return  # created by tf.io.gfile when written; nothing to check cheaply
    if os.path.exists(model_dir) and not os.path.isdir(model_dir):
        raise ConfigError(f"--model_dir={model_dir} is a file, not a folder; name a folder "
                          f"(it is created if missing)")
    try:
        os.makedirs(model_dir, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--model_dir={model_dir} cannot be created: "
                          f"{e.strerror or e}") from None
    if not os.access(model_dir, os.W_OK | os.X_OK):
        raise ConfigError(f"--model_dir={model_dir} is not writable by this user")


def _holder(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Lock:
    """An exclusive lock on a local model_dir for this process's lifetime (or `release`)."""

    def __init__(self, model_dir: str):
        self.model_dir = model_dir
        self.path = os.path.join(model_dir, LOCK_FILE)
        self._fd: Optional[int] = None

    def acquire(self) -> "Lock":
        if not is_local(self.model_dir):
            logging.warning("model_dir %s is not a local folder: it is not locked, so make "
                            "sure no other run writes to it", self.model_dir)
            return self
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        holder = self._lock_or_holder(fd)
        if holder is not None:
            os.close(fd)
            raise ConfigError(
                f"--model_dir={self.model_dir} is in use by another run (pid "
                f"{holder.get('pid', '?')} on {holder.get('host', '?')}, started "
                f"{holder.get('started', '?')}: {holder.get('command', '?')}); stop it or "
                f"choose another --model_dir") from None
        previous = _holder(self.path)
        if previous.get("pid") and previous.get("pid") != os.getpid():
            gone = (previous.get("host") == socket.gethostname()
                    and not _alive(int(previous["pid"])))
            logging.info("model_dir %s: taking over the lock left by pid %s on %s (%s)",
                         self.model_dir, previous["pid"], previous.get("host", "?"),
                         "no longer running" if gone else "its lock was released")
        record = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                  "command": " ".join(sys.argv)[:500]}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        self._fd = fd
        return self

    def _lock_or_holder(self, fd: int) -> Optional[dict]:
        """None once `fd` holds the lock, else the holder's record. A holder writes its
        record just after it takes the lock, so a record read in between is empty: the lock
        is tried and the record read again for up to HOLDER_WAIT_SECONDS."""
        give_up = time.monotonic() + HOLDER_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return None
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
            holder = _holder(self.path)
            if holder.get("pid") or time.monotonic() > give_up:
                return holder
            time.sleep(0.05)

    def release(self) -> None:
        """Unlocks and clears the holder's record: the file stays, and the next run takes it
        over without naming a previous holder (only a killed run's record is left)."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "Lock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class DiskFull(RuntimeError):
    """A checkpoint did not fit on the model_dir's device."""


def disk_full(model_dir: str, step: int, needed: int, previous: Optional[str]) -> DiskFull:
    free = shutil.disk_usage(model_dir).free if is_local(model_dir) else None
    return DiskFull(
        f"no space left for the checkpoint of step {step} in {model_dir}: it needs about "
        f"{needed:,} bytes, {'?' if free is None else f'{free:,}'} are free; the newest "
        f"checkpoint is still {previous or 'none (this was the first)'}; free space (or "
        f"lower train.max_to_keep) and relaunch to resume")


def is_disk_full(error: BaseException) -> bool:
    """A full device, as TensorFlow's file writers or Python report it."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    if isinstance(error, OSError):
        return error.errno == errno.ENOSPC
    return isinstance(error, tf.errors.ResourceExhaustedError) or (
        isinstance(error, tf.errors.OpError) and "No space left" in str(error))
