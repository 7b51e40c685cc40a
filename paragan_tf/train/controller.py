"""One controller for both trainers: the loop, its intervals as a table of actions, stopping.

After orbit's Controller: a Trainer (train/trainer.py) runs steps; the
Controller owns everything around them:

- the loop: `trainer.train(n)` with n never past the next interval boundary, to
  `train.total_steps`, or until `train.max_minutes` of training have passed (the
  step reached then is treated as the last);
- the actions, each run on exact multiples of its interval and at the end: a
  progress line with TensorBoard scalars and a `stats.jsonl` record (`log`,
  every `train.log_every`), sample grids (`samples`, `train.sample_every`),
  checkpoints (`checkpoint`, `train.checkpoint_every`) and evaluations
  (`evaluation`, `eval.every_steps`);
- the rates and the ETA: `perf/images_per_sec` and the ETA from wall time between
  progress lines (checkpoints, samples and evaluations included: what a user waits
  for), `perf/step_images_per_sec` and `perf/input_wait_frac` from the trainer's
  compute and input-wait seconds; the first call, which traces, is left out;
- SIGTERM/SIGINT (train/preemption.py): a flag checked between calls; the run then
  checkpoints and raises Interrupted (a second Ctrl-C gives up at once).
  MultiWorkerMirrored runs leave SIGTERM to TensorFlow's preemption handler, so
  every worker saves at one step;
- the run's files (train/records.py) and the summary writer; only the chief
  writes, the other workers of a multi-worker run still join the collective work.

The trainer owns its input iterators and cluster handles and gives them up in
`close()`, which the controller calls on every way out (into train/teardown.py's
PARKED: destroying them can block for a minute).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from typing import Callable, Dict, List

from absl import logging
import numpy as np
import tensorflow as tf

from paragan_tf.data import class_list
from paragan_tf.errors import ConfigError, Diverged
from paragan_tf.eval import evaluator as evaluator_lib
from paragan_tf.generate import sampling
from paragan_tf.train import checkpoints
from paragan_tf.train import experiment as experiment_lib
from paragan_tf.train import model_dir as model_dir_lib
from paragan_tf.train import preemption
from paragan_tf.train import profiling
from paragan_tf.train import records
from paragan_tf.train.trainer import LEVELS, Progress, Trainer

Interrupted = preemption.Interrupted


@dataclasses.dataclass
class Action:
    """Work the controller does every `every` steps (and after the last); 0: never."""

    name: str
    every: int
    run: Callable[[int], None]  # called with the step the run has reached

    def due(self, step: int, last: int) -> bool:
        return bool(self.every) and (step % self.every == 0 or step == last)


class Window:
    """What happened since the previous progress line: steps, their metrics and times."""

    def __init__(self):
        self.steps = 0
        self._means: Dict[str, List[tuple]] = {}
        self._levels: Dict[str, float] = {}
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
            if key.startswith(LEVELS):
                self._levels[key] = value
            elif not key.endswith("_seconds") and progress.steps:
                self._means.setdefault(key, []).append((value, progress.steps))

    def metrics(self, images_per_step: int) -> Dict[str, float]:
        """Means over the window's steps, levels as they are now, and the window's rates
        (the tracing call left out unless it is all there is)."""
        out = dict(self._levels)
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
    """Trains `trainer` in `model_dir` until train.total_steps; resumes from its newest checkpoint."""

    def __init__(self, exp: experiment_lib.Experiment, model_dir: str, trainer: Trainer):
        self.exp, self.trainer = exp, trainer
        self.model_dir = model_dir_lib.resolve(model_dir)

    def run(self) -> Dict[str, float]:
        """Returns the last logged metrics plus `step` and `wall_seconds`.

        Raises Interrupted after saving when SIGTERM or SIGINT arrives.
        """
        try:
            return self._run()
        finally:
            self.trainer.close()

    def _setup(self) -> None:
        exp, trainer, model_dir = self.exp, self.trainer, self.model_dir
        multi_worker = isinstance(exp.strategy, tf.distribute.MultiWorkerMirroredStrategy)
        if multi_worker and exp.config.max_minutes:
            raise ConfigError(f"train.max_minutes={exp.config.max_minutes} is not available "
                              f"under strategy.kind='multi_worker_mirrored': each worker's "
                              f"clock would pick its own last step; use train.total_steps")
        is_chief = trainer.is_chief
        tf.io.gfile.makedirs(model_dir)
        logging.info("%s", class_list.describe(exp.source.class_names))
        class_list.keep_or_check(model_dir, exp.source.class_names, exp.data.name,
                                 write=is_chief)
        self.ckpt = checkpoints.Checkpointer(model_dir, exp.config.max_to_keep, is_chief,
                                             trainer.task_id, **exp.trackables())
        # Multi-worker mirrored: SIGTERM is TensorFlow's handler's business, so that every
        # worker saves at the same step; this process then only handles SIGINT.
        self.handler = None
        if multi_worker:
            self.handler = preemption.MultiWorkerPreemption(
                exp.strategy, self.ckpt, exp.config.max_to_keep,
                lambda: int(exp.step.numpy()))
        restored = self.ckpt.restore_latest()
        self.writer = tf.summary.create_file_writer(
            model_dir if is_chief else os.path.join(model_dir, ".workers", str(trainer.task_id)))
        self.stats = records.Stats(model_dir, write=is_chief)
        if is_chief:
            records.write_config(model_dir, exp.operative_config, self.writer)
        if restored:
            logging.info("resumed from %s at %s %d, weights digest %s", restored, trainer.unit,
                         int(exp.step.numpy()), experiment_lib.weights_digest(exp))
        # Every worker evaluates (generation runs collectives); the chief writes.
        self.evaluator = (evaluator_lib.Evaluator(exp, model_dir, write=is_chief)
                          if exp.eval_config.every_steps else None)

    def _run(self) -> Dict[str, float]:
        self._setup()
        exp, trainer, cfg = self.exp, self.trainer, self.exp.config
        total = cfg.total_steps
        self.step = self.scheduled = int(exp.step.numpy())
        self.window, self.metrics = Window(), {}
        profiler = profiling.StepProfiler(cfg.profile_steps if trainer.is_chief else 0,
                                          self.model_dir)
        actions = [Action("log", cfg.log_every, self._log),
                   Action("samples", cfg.sample_every, self._samples),
                   Action("checkpoint", cfg.checkpoint_every, self._checkpoint),
                   Action("evaluation", exp.eval_config.every_steps, self._evaluate)]
        begun, calls = time.perf_counter(), 0
        budget = cfg.max_minutes * 60.0
        signals = (signal.SIGINT,) if self.handler else (signal.SIGTERM, signal.SIGINT)
        with preemption.SignalFlag(signals) as flag:
            while self.scheduled < total and flag.signum is None:
                boundary = min([total] + [self.scheduled - self.scheduled % a.every + a.every
                                          for a in actions if a.every])
                n = min(trainer.steps_per_call, boundary - self.scheduled)
                profiler.before_call(self.scheduled, logged=bool(self.metrics))
                progress = self._guarded(trainer.train, n)
                self.scheduled += n
                if budget and time.perf_counter() - begun >= budget and self.scheduled < total:
                    logging.info("train.max_minutes=%g reached at %s %d: this is the last",
                                 cfg.max_minutes, trainer.unit, self.scheduled)
                    total = self.scheduled
                profiler.after_call(self.scheduled)
                self._add(progress, timed=calls > 0)
                if self.scheduled == total:  # the last progress line counts every step
                    self._add(self._guarded(trainer.state))
                if calls == 0:  # the first call traced: the wall-clock rate begins after it
                    self.window.restart_clock()
                calls += 1
                for action in actions:
                    if action.due(self.scheduled, total):
                        began = time.perf_counter()
                        action.run(self.scheduled)
                        if action.name != "log":
                            self.window.host_seconds += time.perf_counter() - began
                if self.handler:
                    self.handler.check(self.step)
            profiler.stop(self.scheduled)
            if flag.signum is not None:
                self._add(self._guarded(trainer.state))
                if self.ckpt.saved_step != self.step:
                    self._save()
                self.writer.flush()
                raise Interrupted(flag.signum, self.step)
        self.writer.flush()
        self._add(self._guarded(trainer.state))
        if self.ckpt.saved_step != self.step:
            self._save()
        # Replicas must hold identical weights; the digest lets anyone compare workers' logs.
        logging.info("final weights digest %s", experiment_lib.weights_digest(exp))
        self.metrics.update(step=self.step, wall_seconds=time.perf_counter() - begun)
        self.stats.append("end", self.step, {})
        if trainer.is_chief:
            records.write_result(self.model_dir, self.metrics,
                                 self.evaluator.describe() if self.evaluator else None)
        return self.metrics

    def _guarded(self, call, *args) -> Progress:
        """A trainer call; the NaN guard's error names the checkpoint to go back to."""
        try:
            return call(*args)
        except Diverged as e:
            raise Diverged(f"{e}; the newest checkpoint ({self.ckpt.latest}) holds the last "
                           f"finite weights: lower the learning rates or check the input "
                           f"data") from None

    def _add(self, progress: Progress, timed: bool = True) -> None:
        self.step = progress.step
        self.window.add(progress, timed)

    def _save(self) -> str:
        self._add(self._guarded(self.trainer.state))
        return self.ckpt.save(self.step)

    def _log(self, scheduled: int) -> None:
        exp, cfg = self.exp, self.exp.config
        del scheduled  # the line reports the steps that finished
        metrics = self.window.metrics(cfg.real_images_per_step)
        metrics.setdefault("health/skipped_steps", float(exp.health.skipped.numpy()))
        if exp.source.corrupt is not None:
            metrics["health/corrupt_images"] = float(exp.source.corrupt.count)
        metrics["lr/G"] = float(tf.convert_to_tensor(exp.g_optimizer.learning_rate))
        metrics["lr/D"] = float(tf.convert_to_tensor(exp.d_optimizer.learning_rate))
        with self.writer.as_default():
            for key, value in metrics.items():
                tf.summary.scalar(key, value, step=self.step)
        self.stats.append("log", self.step, dict(total_steps=cfg.total_steps, **metrics))
        logging.info("%s", progress_line(self.trainer.unit, self.step, cfg.total_steps, metrics,
                                         cfg.real_images_per_step))
        if not all(np.isfinite(v) for v in metrics.values()):
            logging.warning("non-finite metrics at step %d: %s", self.step, metrics)
        self.metrics = metrics
        self.window = Window()

    def _samples(self, scheduled: int) -> None:
        del scheduled
        path = sampling.write_grid(self.exp, self.model_dir, self.step, self.writer,
                                   self.trainer.is_chief)
        if self.trainer.is_chief:
            logging.info("samples: %s", path)

    def _checkpoint(self, scheduled: int) -> None:
        del scheduled
        logging.info("checkpoint: %s", self._save())

    def _evaluate(self, scheduled: int) -> None:
        # The best checkpoint is kept by copying it: evaluate saved weights only.
        path = self.ckpt.latest if self.ckpt.saved_step == scheduled else self._save()
        result = self.evaluator.evaluate(self.step, path, self.writer)
        self.metrics.update(result)
        self.stats.append("eval", self.step, dict(protocol=self.evaluator.protocol["name"],
                                                  **result, **self.evaluator.timings))
