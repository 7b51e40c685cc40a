"""A straggler, simulated: one task of a local cluster paused part of the time.

The launcher (distribute/launcher.py) knows nothing of it: a benchmark hands
`throttle(name, fraction)` to `launcher.launch(..., on_started=...)`, and the
named task's process is stopped and continued (SIGSTOP/SIGCONT) `fraction` of
every 0.2 s, as a machine running at 1 - fraction of its speed would. A
restarted worker is throttled too (the task's current process is read each
period).
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Callable, List

from paragan_tf.distribute import launcher

PERIOD = 0.2  # seconds


class Throttle(threading.Thread):
    """Pauses a task (SIGSTOP/SIGCONT) `fraction` of every PERIOD: a machine that slow."""

    def __init__(self, task: launcher.Task, fraction: float):
        super().__init__(daemon=True, name=f"throttle-{task.name}")
        self.task, self.fraction = task, fraction

    def run(self):
        while True:
            process = self.task.process
            if process.poll() is None:
                try:
                    process.send_signal(signal.SIGSTOP)
                    time.sleep(PERIOD * self.fraction)
                finally:
                    process.send_signal(signal.SIGCONT)
            time.sleep(PERIOD * (1 - self.fraction))


def throttle(task_name: str, fraction: float) -> Callable[[List[launcher.Task]], None]:
    """An `on_started` hook for launcher.launch that slows task `task_name` down."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"slow_fraction={fraction} must be in [0, 1)")

    def start(tasks: List[launcher.Task]) -> None:
        slow = [t for t in tasks if t.name == task_name]
        if not slow:
            raise ValueError(f"slow task {task_name} is not one of {[t.name for t in tasks]}")
        Throttle(slow[0], fraction).start()
    return start
