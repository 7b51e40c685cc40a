"""Ending a process without TensorFlow's tf.data iterator teardown: the one workaround.

In TensorFlow 2.21, destroying an autotuned tf.data iterator can block for up to a
minute. Its destructor cancels the iterator and joins the thread that runs the
autotune model (`Model::OptimizeLoop`), which sleeps between optimisations for a
period that doubles up to 60 s. The cancellation's callback wakes that thread, but
the cancellation manager runs its callbacks before it marks itself cancelled, so a
thread that wakes quickly sees "not cancelled" and sleeps out its period: a lost
wake-up. Every distributed iterator has such threads (one host-side and one per
device under tf.distribute), and the longer it lived the longer the wait: 37-97 s
here for a two-replica MirroredStrategy iterator, 72 s for a MultiWorkerMirrored
worker after a normal end. benchmarks/repro/teardown_hang.py reproduces it in a few
lines; docs/upstream/tf_data_teardown.md is the report for TensorFlow.

No supported setting avoids it for every strategy: the per-device iterators take
no tf.data options, so autotune can be switched off there only by patching a
private TensorFlow function, and switching it off everywhere gives up the
autotuned parallelism the input pipeline relies on. So the trainers park the
iterators they give up here, never destroyed, and a binary that has written
everything (checkpoint, summaries, records) leaves through `exit_now`: the one way
out, which first runs what was registered with `before_exit` (a binary's model_dir
lock release, its log drains), from whichever thread calls it (the asynchronous
trainer's watchdog, when the cluster is gone).
"""

from __future__ import annotations

import os
import sys
from typing import Callable, List, NoReturn

from absl import logging

PARKED: List[object] = []  # input iterators (and their owners) of closed trainers
# Run by exit_now before the process ends (it skips Python's atexit handlers).
_BEFORE_EXIT: List[Callable[[], None]] = []


def park(*objects) -> None:
    """Keeps `objects` alive until the process ends (their destructors never run)."""
    PARKED.extend(o for o in objects if o is not None)


def before_exit(fn: Callable[[], None]) -> None:
    """Runs `fn` when the process ends through exit_now (in reverse order of calls)."""
    _BEFORE_EXIT.append(fn)


def exit_now(code: int) -> NoReturn:
    """Flushes the logs and standard streams, runs the before-exit functions, then ends
    the process without destructors."""
    logging.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    while _BEFORE_EXIT:
        try:
            _BEFORE_EXIT.pop()()
        except Exception as e:  # pylint: disable=broad-except
            logging.error("while exiting: %s", e)  # the exit itself must still happen
    for stream in (sys.stdout, sys.stderr):  # what they wrote (a drain may have closed one)
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)  # pylint: disable=protected-access
