"""Stragglers, simulated on a local cluster whose workers own one core each.

The launcher (distribute/launcher.py) knows nothing of them: a benchmark hands
`on_started(condition, ...)` to `launcher.launch(..., on_started=...)` and adds
`bindings(condition)` to every task's gin bindings. With every worker pinned to
its own core (LaunchConfig.cores_per_task), a slowed worker's lost time is not
picked up by the others, as on a cluster of machines.

Kinds (CONDITIONS), each on worker:1:
  even        no straggler.
  slow25/50/75  slow compute: the worker's process is stopped and continued
              (SIGSTOP/SIGCONT) that percentage of every 0.2 s, a machine running
              at 75, 50 or 25 % of its speed. A restarted worker is throttled too
              (the task's current process is read each period).
  slow_input  a congested store on that worker only (benchmarks/congestion.py,
              CongestedStore.workers): every record read waits INPUT_LATENCY_MS
              and at most INPUT_READS are read at once (on every worker), a
              store serving INPUT_READS / INPUT_LATENCY_MS records per second,
              a bandwidth no read parallelism hides.
  restart     the worker is killed (SIGKILL) a third of the way into the budget.
              Under a parameter server the launcher restarts it and the
              coordinator re-admits it; a synchronous job cannot go on, so the
              benchmark kills it and relaunches the whole job from its last
              checkpoint, as a cluster manager would (benchmarks/async_quality.py).
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Callable, List

from paragan_tf.distribute import launcher

PERIOD = 0.2  # seconds
SLOW_TASK = "worker:1"
CONDITIONS = ("even", "slow25", "slow50", "slow75", "slow_input", "restart")
# worker:1's store: 4 reads at once of 140 ms each, ~29 records/s, about half of what a
# worker of one core trains on here (gin/mnist_default.gin, 2 batches of 32 per step).
INPUT_LATENCY_MS = 140.0
INPUT_READS = 4


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


def slow_fraction(condition: str) -> float:
    """The paused share of slowN (0 for the other kinds)."""
    return int(condition[4:]) / 100 if condition.startswith("slow") and \
        condition[4:].isdigit() else 0.0


def _task(tasks: List[launcher.Task], name: str) -> launcher.Task:
    found = [t for t in tasks if t.name == name]
    if not found:
        raise ValueError(f"slow task {name} is not one of {[t.name for t in tasks]}")
    return found[0]


def throttle(task_name: str, fraction: float) -> Callable[[List[launcher.Task]], None]:
    """An `on_started` hook for launcher.launch that slows task `task_name` down."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"slow_fraction={fraction} must be in [0, 1)")

    def start(tasks: List[launcher.Task]) -> None:
        Throttle(_task(tasks, task_name), fraction).start()
    return start


def check(condition: str) -> None:
    if condition not in CONDITIONS:
        raise ValueError(f"unknown straggler condition {condition!r}: one of {CONDITIONS}")


def bindings(condition: str) -> List[str]:
    """The gin bindings of `condition` for every task (slow_input's congested store, which
    slows worker:1's input pipeline only, wherever that pipeline is built)."""
    check(condition)
    if condition != "slow_input":
        return []
    index = int(SLOW_TASK.split(":")[1])
    return ["import benchmarks.congestion",
            "input_pipeline.read_hook = @CongestedStore()",
            f"CongestedStore.latency_ms = {INPUT_LATENCY_MS}",
            f"CongestedStore.workers = ({index},)",
            f"input_pipeline.read_parallelism = {INPUT_READS}",
            f"input_pipeline.max_read_parallelism = {INPUT_READS}"]


def on_started(condition: str, started: List[launcher.Task]
               ) -> Callable[[List[launcher.Task]], None]:
    """The launcher hook of `condition`: keeps the tasks in `started` (for `kill`) and
    starts the throttle of slowN."""
    check(condition)

    def start(tasks: List[launcher.Task]) -> None:
        started[:] = tasks
        if slow_fraction(condition):
            throttle(SLOW_TASK, slow_fraction(condition))(tasks)
    return start


def kill(started: List[launcher.Task]) -> None:
    """The restart condition's blow: SIGKILL to worker:1's current process."""
    _task(started, SLOW_TASK).process.kill()
