"""Ending a process without tf.data's iterator teardown (paragan_tf/teardown.py): what is parked
outlives its owner, and exit_now ends the process with its output flushed and no exit
handler or destructor run."""

from __future__ import annotations

import os
import subprocess
import weakref

from paragan_tf import teardown
from tests.helpers.repo import PYTHON, REPO


def test_parked_objects_outlive_their_owner():
    class Iterator:  # stands in for a distributed iterator a trainer gives up
        pass
    iterator = Iterator()
    alive = weakref.ref(iterator)
    teardown.park(iterator, None)
    del iterator  # its last reference but the parked one: CPython frees it here otherwise
    try:
        assert alive() is not None and None not in teardown.PARKED
    finally:
        teardown.PARKED.remove(alive())


def test_exit_now_flushes_what_was_written_and_runs_no_exit_handler():
    # Standard output to a pipe is block-buffered (PYTHONUNBUFFERED left out): only a flush
    # gets "written" out before os._exit, which runs no atexit handler. The before-exit
    # work runs, also when a thread other than the main one exits (the watchdog's case).
    code = ("import atexit, sys, threading\n"
            "from paragan_tf import teardown\n"
            "atexit.register(lambda: print('an exit handler ran'))\n"
            "teardown.before_exit(lambda: print(' the lock released', end='', file=sys.stderr))\n"
            "print('written', end='')\n"
            "sys.stderr.write('and to stderr')\n"
            "exiting = threading.Thread(target=teardown.exit_now, args=(7,))\n"
            "exiting.start()\n"
            "exiting.join()\n"
            "print('after exit_now')\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.run([PYTHON, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 7, proc.stderr[-2000:]
    assert proc.stdout == "written"
    assert proc.stderr.endswith("and to stderr the lock released")
