"""The training loop and its intervals, for either trainer; handed its parts, it builds none.

After orbit's Controller, which is given its trainer, evaluator, checkpoint manager,
summary writer and actions: ours is given (by train/driver.py, or a test's fakes)

- a Trainer (train/trainer.py), which runs steps and reports what finished;
- a checkpointer, already restored: `save(step) -> path`, `saved_step`, `latest`;
- the Schedule: the last step, the progress-line and checkpoint intervals, the time
  budget (`train.max_minutes`: the step reached then is treated as the last), the
  limit of skipped steps in a row, and images per step (for the rates);
- a summary writer and the run's stats.jsonl (train/run_files.py);
- further Actions on intervals of their own (sample grids, evaluations);
- for MultiWorkerMirrored runs, TensorFlow's preemption handler (train/preemption.py);
- what to do with the finished run's result (`on_end`: the final files).

It owns the loop: `trainer.train(n)` with n never past the next interval boundary.
At a boundary, in this order: the progress line (TensorBoard scalars, a stats.jsonl
record, then `trainer.end_window()`), the actions that run before the checkpoint
(sample grids), the checkpoint, and the actions that read a checkpoint of this step
(an evaluation keeps the best checkpoint by copying it). The rates and the ETA:
`perf/images_per_sec` and the ETA from wall time between progress lines (checkpoints,
samples and evaluations included: what a user waits for), `perf/step_images_per_sec`
and `perf/input_wait_frac` from the trainer's compute and input-wait seconds; the
first call, which traces, is left out.

Two step counts: `scheduled`, the steps handed to the trainer (intervals are
multiples of it), and `finished`, the steps the trainer reports done. They are equal
for the synchronous trainer; the asynchronous one's rounds finish after `train`
returns, and `trainer.state()` (before a checkpoint, and once at the end) waits for
them.

SIGTERM/SIGINT: a flag checked between calls; the run then checkpoints and raises
Interrupted (a second Ctrl-C gives up at once). MultiWorkerMirrored runs leave SIGTERM
to TensorFlow's preemption handler, so every worker saves at one step. Either way a
stats.jsonl "stop" record names the step saved and when its training ended (before the
checkpoint): what a benchmark that stops runs at a deadline times them by. Divergence: a
trainer reports the steps the NaN guard skipped in a row; at the limit the controller
raises Diverged, naming the newest checkpoint (the last finite weights). The trainer
is closed on every way out (its iterators go to paragan_tf/teardown.py's PARKED:
destroying them can block for a minute).
"""

from __future__ import annotations

import dataclasses
import signal
import time
from typing import Callable, Dict, List, Optional, Sequence

from absl import logging
import numpy as np
import tensorflow as tf

from paragan_tf.errors import Diverged, Interrupted
from paragan_tf.train import preemption
from paragan_tf.train import profiling
from paragan_tf.train import run_files
from paragan_tf.train.trainer import Progress, Trainer


@dataclasses.dataclass(frozen=True)
class Schedule:
    """When the controller trains, reports, saves and stops (from train.* settings)."""

    total_steps: int
    images_per_step: int  # real images a step trains on, across replicas
    log_every: int
    checkpoint_every: int = 0  # 0: only at the end
    max_minutes: float = 0.0  # 0: no time budget
    max_consecutive_skips: int = 10


@dataclasses.dataclass
class Action:
    """Work the controller does every `every` steps (and after the last); 0: never.

    `run(step)` may return metrics for the run's result (an evaluation's). An action
    `on_checkpoint` runs after the checkpoint, as `run(step, path)` of a checkpoint of
    that step (saved first when there is none).
    """

    name: str
    every: int
    run: Callable[..., Optional[Dict[str, float]]]
    on_checkpoint: bool = False

    def due(self, step: int, last: int) -> bool:
        return bool(self.every) and (step % self.every == 0 or step == last)


class Window:
    """What happened since the previous progress line: steps, their metrics and times."""

    def __init__(self):
        self.steps = 0
        self._means: Dict[str, List[tuple]] = {}
        self._sums = {"all": {}, "timed": {}}  # seconds of every call / of traced-out ones
        self._steps = {"all": 0, "timed": 0}
        self.restart_clock()

    def restart_clock(self) -> None:
        """The wall-clock rate counts from here (after the call that traced)."""
        self.wall_start, self.clock_steps = time.perf_counter(), 0
        self.host_seconds = 0.0  # on checkpoints, samples and evaluations

    def add(self, progress: Progress, timed: bool) -> None:
        self.steps += progress.steps
        self.clock_steps += progress.steps
        for which in ("all", "timed") if timed else ("all",):
            self._steps[which] += progress.steps
            for key, value in progress.metrics.items():
                if key.endswith("_seconds"):
                    self._sums[which][key] = self._sums[which].get(key, 0.0) + value
        for key, value in progress.metrics.items():
            if not key.endswith("_seconds") and progress.steps:
                self._means.setdefault(key, []).append((value, progress.steps))

    def metrics(self, images_per_step: int) -> Dict[str, float]:
        """Means over the window's steps and the window's rates (the tracing call left
        out unless it is all there is)."""
        out = {}
        for key, pairs in self._means.items():
            values, weights = np.array(pairs, dtype=np.float64).T
            finite = np.isfinite(values)  # a step the NaN guard skipped has no losses
            out[key] = (float(np.average(values[finite], weights=weights[finite]))
                        if finite.any() else float("nan"))
        which = "timed" if self._steps["timed"] else "all"
        sums, steps = self._sums[which], self._steps[which]
        compute = sums.get("perf/compute_seconds")
        wall = time.perf_counter() - self.wall_start
        if compute:
            out["perf/step_images_per_sec"] = steps * images_per_step / compute
            out["perf/input_wait_frac"] = sums.get("perf/input_wait_seconds", 0.0) / compute
        elif self.clock_steps:
            out["perf/step_images_per_sec"] = (self.clock_steps * images_per_step
                                               / max(wall - self.host_seconds, 1e-9))
        out["perf/images_per_sec"] = (self.clock_steps * images_per_step / wall
                                      if self.clock_steps
                                      else out.get("perf/step_images_per_sec", 0.0))
        return out


def format_eta(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s"


def progress_line(unit: str, step: int, total: int, metrics: Dict[str, float],
                  images_per_step: int) -> str:
    """The line a user reads: losses, rate, ETA, and what the trainer measured."""
    rate = metrics["perf/images_per_sec"] / images_per_step
    eta = format_eta((total - step) / rate) if rate > 0 else "?"
    parts = [f"{unit} {step}/{total}  loss/D {metrics.get('loss/D', float('nan')):.4f}  "
             f"loss/G {metrics.get('loss/G', float('nan')):.4f}  "
             f"{metrics['perf/images_per_sec']:.1f} img/s  ETA {eta}"]
    if "perf/input_wait_frac" in metrics:
        parts.append(f"input wait {100 * metrics['perf/input_wait_frac']:.1f}%")
    if "augment/p" in metrics:
        parts.append(f"ADA p {metrics['augment/p']:.3f} rt {metrics['augment/rt']:.2f}")
    if "async/sample_age" in metrics:
        parts.append(f"sample age {metrics['async/sample_age']:.1f}")
    if "async/rounds_in_flight" in metrics:
        parts.append(f"{metrics['async/rounds_in_flight']:.0f} round(s) in flight")
    return "  ".join(parts)


class Controller:
    """Trains with `trainer` until the schedule's last step; see the module doc."""

    def __init__(self, trainer: Trainer, checkpointer, schedule: Schedule, *,
                 writer=None, stats: Optional[run_files.Stats] = None,
                 actions: Sequence[Action] = (), preemption_handler=None,
                 profiler: Optional[profiling.StepProfiler] = None,
                 on_end: Optional[Callable[[Dict[str, float]], None]] = None):
        self.trainer, self.checkpointer, self.schedule = trainer, checkpointer, schedule
        self.writer = writer or tf.summary.create_noop_writer()
        self.stats = stats or run_files.Stats("", write=False)
        self.preemption_handler, self.on_end = preemption_handler, on_end
        self.profiler = profiler or profiling.StepProfiler(0, "")
        self.actions = ([Action("log", schedule.log_every, self._log)] +
                        [a for a in actions if not a.on_checkpoint] +
                        [Action("checkpoint", schedule.checkpoint_every, self._checkpoint)] +
                        [a for a in actions if a.on_checkpoint])
        self.scheduled = self.finished = 0
        self.window = Window()
        self.logged: Dict[str, float] = {}  # the last progress line's metrics
        self.evaluated: Dict[str, float] = {}  # what the actions returned, newest last
        self._settled = False  # no train call since the last trainer.state()
        self._trained_until = time.time()  # when the steps reported so far had finished

    def run(self) -> Dict[str, float]:
        """The last progress line's metrics, the newest evaluation's, `step` and
        `wall_seconds`. Raises Interrupted after saving when SIGTERM or SIGINT arrives,
        Diverged at the limit of skipped steps in a row."""
        try:
            return self._run()
        finally:
            self.trainer.close()

    def _run(self) -> Dict[str, float]:
        schedule, trainer = self.schedule, self.trainer
        self._settle()
        self.scheduled = self.finished
        total, began, calls = schedule.total_steps, time.perf_counter(), 0
        budget = schedule.max_minutes * 60.0
        signals = ((signal.SIGINT,) if self.preemption_handler
                   else (signal.SIGTERM, signal.SIGINT))
        with preemption.SignalFlag(signals) as flag:
            while self.scheduled < total and flag.signum is None:
                boundary = min([total] + [self.scheduled - self.scheduled % a.every + a.every
                                          for a in self.actions if a.every])
                n = min(trainer.steps_per_call, boundary - self.scheduled)
                self.profiler.before_call(self.scheduled, logged=bool(self.logged))
                self._report(trainer.train(n), timed=calls > 0)
                self._trained_until = time.time()  # a synchronous trainer's steps are done
                self._settled = False
                self.scheduled += n
                if budget and time.perf_counter() - began >= budget and self.scheduled < total:
                    logging.info("train.max_minutes=%g reached at %s %d: this is the last",
                                 schedule.max_minutes, trainer.unit, self.scheduled)
                    total = self.scheduled
                self.profiler.after_call(self.scheduled)
                if self.scheduled == total:  # the last progress line counts every step
                    self._settle()
                if calls == 0:  # the first call traced: the wall-clock rate begins after it
                    self.window.restart_clock()
                calls += 1
                self._run_due(total)
                if self.preemption_handler:
                    try:
                        self.preemption_handler.check(self.finished)
                    except Interrupted as stopped:
                        self._record_stop(stopped.signum)
                        raise
            self.profiler.stop(self.scheduled)
            if flag.signum is not None:
                self._save_unless_saved()
                self._record_stop(flag.signum)
                self.writer.flush()
                raise Interrupted(flag.signum, self.finished)
        self.writer.flush()
        self._save_unless_saved()
        result = dict(self.logged, **self.evaluated, step=self.finished,
                      wall_seconds=time.perf_counter() - began)
        self.stats.append("end", self.finished, {})
        if self.on_end:
            self.on_end(result)
        return result

    def _run_due(self, total: int) -> None:
        for action in self.actions:
            if not action.due(self.scheduled, total):
                continue
            began = time.perf_counter()
            if action.on_checkpoint:
                path = (self.checkpointer.latest if self.checkpointer.saved_step ==
                        self.scheduled else self._save())
                result = action.run(self.finished, path)
            else:
                result = action.run(self.finished)
            self.evaluated.update(result or {})
            if action.name != "log":
                self.window.host_seconds += time.perf_counter() - began

    def _report(self, progress: Progress, timed: bool = True) -> None:
        """Takes in what the trainer reports; stops a run that keeps skipping steps."""
        self.finished = progress.step
        self.window.add(progress, timed)
        limit, unit = self.schedule.max_consecutive_skips, self.trainer.unit
        if progress.consecutive_skips >= limit:
            raise Diverged(
                f"{progress.consecutive_skips} consecutive {unit}s (to {unit} {progress.step}) "
                f"had an update with a non-finite loss or gradient, skipped (train."
                f"max_consecutive_skips={limit}); the newest checkpoint "
                f"({self.checkpointer.latest}) holds the last finite weights: lower the "
                f"learning rates or check the input data")

    def _settle(self) -> None:
        """Every step run so far finished (trainer.state(), once after each train call)."""
        if not self._settled:
            self._report(self.trainer.state())
            self._trained_until = time.time()
            self._settled = True

    def _record_stop(self, signum: int) -> None:
        """The stats.jsonl record of a run stopped by a signal, its checkpoint saved."""
        self.stats.append("stop", self.finished, dict(
            signal=signum, trained_until=round(self._trained_until, 3)))

    def _save(self) -> str:
        self._settle()
        path = self.checkpointer.save(self.finished)
        record = self.trainer.record()
        if self.trainer.record_file and record is not None:
            self.stats.write_json(self.trainer.record_file, record)
        return path

    def _save_unless_saved(self) -> None:
        self._settle()
        if self.checkpointer.saved_step != self.finished:
            self._save()

    def _checkpoint(self, step: int) -> None:
        del step
        logging.info("checkpoint: %s", self._save())

    def _log(self, step: int) -> None:
        schedule = self.schedule
        metrics = dict(self.window.metrics(schedule.images_per_step), **self.trainer.levels())
        with self.writer.as_default():
            for key, value in metrics.items():
                tf.summary.scalar(key, value, step=step)
        self.stats.append("log", step, dict(total_steps=schedule.total_steps, **metrics))
        logging.info("%s", progress_line(self.trainer.unit, step, schedule.total_steps,
                                         metrics, schedule.images_per_step))
        if not all(np.isfinite(v) for v in metrics.values()):
            logging.warning("non-finite metrics at step %d: %s", step, metrics)
        self.logged = metrics
        self.window = Window()
        self.trainer.end_window()
