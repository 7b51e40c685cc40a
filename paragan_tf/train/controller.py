"""One controller for both trainers: intervals, progress, the run's files, stopping.

After orbit's Controller/Trainer split: a Trainer (train/loop.py's synchronous
one, train/async_loop.py's parameter-server one) says how to run the next steps,
when they have finished and what its progress line adds; the Controller owns
everything around that:

- the intervals: a progress line and scalar summaries every `train.log_every`
  steps, sample grids every `sample_every`, checkpoints every `checkpoint_every`,
  evaluations every `eval.every_steps`, each on exact multiples (a trainer call
  never runs past the next boundary), and the stop at `total_steps`;
- the rates and the ETA: `perf/images_per_sec` and the ETA from wall time
  between progress lines (checkpoints, samples and evaluations included: what a
  user waits for), the trainer's call that traced its functions left out;
- SIGTERM/SIGINT: a flag checked between calls; the run then checkpoints and
  raises Interrupted (a second Ctrl-C gives up at once). Multi-worker mirrored
  runs leave SIGTERM to TensorFlow's preemption handler, so every worker saves at
  one step (train/preemption.py);
- the checkpoint (a trainer with steps still in flight settles them first, so a
  checkpoint always holds an exact step), `operative_config.gin`, `classes.json`,
  `train_result.json`, and the summary writer; only the chief writes, the other
  workers of a multi-worker run still join the collective work.

The trainer owns its input iterators and its cluster handles, and gives them up
in `close()`, which the controller calls on every way out: into PARKED, never
destroyed (see there), so bin/train.py still ends through bin/common.exit_now.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import os
import signal
import time
from typing import Callable, Dict, Optional

from absl import logging
import gin
import tensorflow as tf

from paragan_tf import images as images_lib
from paragan_tf import sampling
from paragan_tf.data import class_list
from paragan_tf.eval import evaluator as evaluator_lib
from paragan_tf.train import checkpoints
from paragan_tf.train import experiment as experiment_lib
from paragan_tf.train import model_dir as model_dir_lib
from paragan_tf.train import preemption

Interrupted = preemption.Interrupted

# Input iterators of closed trainers, never destroyed. Destroying one can block for up to
# a minute, in TensorFlow (2.21): tf.distribute hands a worker's batches to its replicas
# through a MultiDeviceIterator whose per-device iterator has a tf.data autotune thread,
# and its destructor joins that thread, which sleeps through the cancellation until its
# next autotune period (the period doubles up to 60 s). Seen here on 2026-11-24 with gdb
# (the main thread in RootDataset::Iterator::~Iterator waiting on its model thread,
# Model::OptimizeLoop): 71.9 s for one MultiWorkerMirrored worker of two after a normal
# end, 0.3 s for the other; 29 s after a SIGTERM stop, long enough for the launcher's
# grace period to kill the worker. The input options that avoid the MultiDeviceIterator
# (InputReplicationMode.PER_REPLICA without fetch_to_device) are refused by
# MultiWorkerMirrored and OneDevice strategies; switching autotune off on the per-device
# datasets (a patched multi_device_iterator_ops._create_device_dataset) still left one
# worker 31 s in teardown (2026-11-24, 150 steps). So bin/train.py exits without
# destructors (bin/common.exit_now) once everything is written, while they sit here.
PARKED: list = []


@dataclasses.dataclass
class Window:
    """The stretch of training since the previous progress line."""

    steps: int  # steps finished in it
    wall_seconds: float  # from the previous line to this one
    host_seconds: float  # of those, spent on checkpoints, samples and evaluations


class Trainer(abc.ABC):
    """How to train: the Controller calls these, in this order, on one Experiment."""

    unit = "step"  # what the progress line counts
    is_chief = True  # writes model_dir (the other workers of a cluster do not)
    task_id = 0

    def __init__(self, exp: experiment_lib.Experiment):
        self.exp = exp

    @property
    @abc.abstractmethod
    def max_steps_per_call(self) -> int:
        """The most steps one `run` call may take."""

    def begin(self, start: int, restored: bool,
              latest_checkpoint: Callable[[], Optional[str]]) -> str:
        """Builds the input and the step functions; training resumes at step `start`.

        latest_checkpoint: the newest checkpoint's path, for error messages. Returns
        what the "resumed from" line adds.
        """
        return ""

    @abc.abstractmethod
    def run(self, n: int) -> None:
        """Runs the next `n` steps (or schedules them: see `finished`)."""

    def finished(self) -> int:
        """Steps whose updates are all applied; below the steps run while some are in flight."""
        return int(self.exp.step.numpy())

    def settle(self) -> None:
        """Waits until every step run so far has finished (before a checkpoint)."""

    def metrics(self, window: Window) -> Dict[str, float]:
        """Metrics of `window` for the progress line and the summaries."""
        return {}

    def progress(self, metrics: Dict[str, float]) -> str:
        """What the trainer adds at the end of the progress line."""
        return ""

    def after_log(self, step: int, metrics: Dict[str, float]) -> None:
        """Called after each progress line (the synchronous input tuner acts here)."""

    def before_save(self, step: int) -> None:
        """Called, settled, before each checkpoint: state beside the checkpoint's own."""

    def end(self, step: int) -> None:
        """Called once the last step has finished and its checkpoint is written."""

    def close(self) -> None:
        """Gives up the input iterators and cluster handles; called on every way out."""


class SignalFlag:
    """Turns SIGTERM/SIGINT into a flag the controller checks between calls."""

    def __init__(self, signals=(signal.SIGTERM, signal.SIGINT)):
        self.signum: Optional[int] = None
        self._signals = signals
        self._previous = {}

    def __enter__(self):
        for sig in self._signals:
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: leave signals alone
                pass
        return self

    def _handle(self, signum, frame):
        del frame
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: give up on the clean stop
        self.signum = signum
        logging.warning("signal %d received: finishing the current loop and saving", signum)

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class StepProfiler:
    """tf.profiler over `steps` train steps (whole calls), begun after the first progress line.

    The first call traces and compiles; starting after the first progress line
    keeps that and the input warm-up out of the trace. The trace lands in
    `logdir` (TensorBoard's Profile tab).
    """

    def __init__(self, steps: int, logdir: str):
        self.steps, self.logdir = steps, logdir
        self.began: Optional[int] = None  # the step the trace began at
        self.running = False

    def before_call(self, step: int, logged: bool) -> None:
        if self.steps and logged and self.began is None:
            tf.profiler.experimental.start(self.logdir)
            self.began, self.running = step, True

    def after_call(self, step: int) -> None:
        if self.running and step >= self.began + self.steps:
            self.stop(step)

    def stop(self, step: int) -> None:
        if self.running:
            tf.profiler.experimental.stop()
            self.running = False
            logging.info("profile of steps %d-%d: %s (TensorBoard's Profile tab)",
                         self.began, step, self.logdir)


def write_config(model_dir: str, writer) -> None:
    operative = gin.operative_config_str()
    with tf.io.gfile.GFile(os.path.join(model_dir, "operative_config.gin"), "w") as f:
        f.write(operative)
    with writer.as_default():
        # Markdown code block: TensorBoard's text plugin would reflow plain text.
        tf.summary.text("config/operative_gin",
                        "\n".join("    " + line for line in operative.splitlines()), step=0)


def format_eta(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s"


def write_samples(exp: experiment_lib.Experiment, model_dir: str, step: int, writer,
                  is_chief: bool = True) -> str:
    """EMA-generator grid (rows = classes) to model_dir/samples/ and TensorBoard.

    Every worker of a multi-worker run must call this: refreshing the BN
    statistics runs cross-replica (collective) ops. Only the chief writes.
    """
    # Batches no larger than training's: at 512-1024 px a batch of 64 needs many GiB.
    sampling.refresh_bn_statistics(exp.generator_ema, exp.source.num_classes,
                                   batch_size=min(64, exp.config.batch_size),
                                   classes=exp.classes)
    rows = [exp.classes[i] for i in sampling.default_classes(len(exp.classes))]
    per_class = 10 if exp.data.resolution <= 256 else 2  # one forward pass for the grid
    grid = sampling.class_grid(exp.generator_ema, rows, per_class=per_class,
                               seed=exp.config.seed)
    path = os.path.join(model_dir, "samples", f"step_{step:07d}.png")
    if not is_chief:
        return path
    images_lib.write_png(path, grid)
    with writer.as_default():
        tf.summary.image("samples/ema", grid[None], step=step)
    return path


def write_result(model_dir: str, metrics: Dict[str, float],
                 eval_protocol: Optional[str] = None) -> None:
    """The finished run's last metrics as model_dir/train_result.json (for benchmarks, sweeps).

    eval_protocol: what the evaluation metrics among them measured (Evaluator.describe).
    """
    result: Dict[str, object] = {k: float(v) for k, v in metrics.items()}
    if eval_protocol:
        result["eval_protocol"] = eval_protocol
    with tf.io.gfile.GFile(os.path.join(model_dir, "train_result.json"), "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)


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

    def _run(self) -> Dict[str, float]:
        exp, trainer, model_dir = self.exp, self.trainer, self.model_dir
        cfg, strategy = exp.config, exp.strategy
        is_chief = trainer.is_chief
        tf.io.gfile.makedirs(model_dir)
        logging.info("%s", class_list.describe(exp.source.class_names))
        class_list.keep_or_check(model_dir, exp.source.class_names, exp.data.name,
                                 write=is_chief)
        ckpt = checkpoints.Checkpointer(model_dir, cfg.max_to_keep, is_chief, trainer.task_id,
                                        **exp.trackables())
        # Multi-worker mirrored: SIGTERM is TensorFlow's handler's business, so that every
        # worker saves at the same step; this process then only handles SIGINT.
        handler = None
        if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            handler = preemption.MultiWorkerPreemption(strategy, ckpt, cfg.max_to_keep,
                                                       trainer.finished)
        restored = ckpt.restore_latest()
        start = int(exp.step.numpy())
        writer = tf.summary.create_file_writer(
            model_dir if is_chief else os.path.join(model_dir, ".workers",
                                                    str(trainer.task_id)))
        if is_chief:
            write_config(model_dir, writer)
        note = trainer.begin(start, restored is not None, lambda: ckpt.latest)
        if restored:
            logging.info("resumed from %s at %s %d%s", restored, trainer.unit, start, note)
        eval_every = evaluator_lib.eval_config().every_steps
        # Every worker evaluates (generation runs collectives); the chief writes.
        evaluator = (evaluator_lib.Evaluator(exp, model_dir, write=is_chief) if eval_every
                     else None)
        profiler = StepProfiler(cfg.profile_steps if is_chief else 0, model_dir)

        def save() -> str:
            trainer.settle()
            step = trainer.finished()
            trainer.before_save(step)
            return ckpt.save(step)

        metrics: Dict[str, float] = {}
        t_begin = time.perf_counter()
        wall_since, wall_step, host_seconds, logged = None, start, 0.0, False
        scheduled = start
        signals = (signal.SIGINT,) if handler else (signal.SIGTERM, signal.SIGINT)
        with SignalFlag(signals) as flag:
            while scheduled < cfg.total_steps and flag.signum is None:
                intervals = (cfg.log_every, cfg.checkpoint_every, cfg.sample_every) + (
                    (eval_every,) if eval_every else ())
                boundary = min(cfg.total_steps,
                               *(scheduled - scheduled % k + k for k in intervals))
                n = min(trainer.max_steps_per_call, boundary - scheduled)
                profiler.before_call(scheduled, logged)
                trainer.run(n)
                scheduled += n
                profiler.after_call(scheduled)
                if wall_since is None:  # the first call traced: the rates begin after it
                    wall_since, wall_step = time.perf_counter(), trainer.finished()
                if scheduled == cfg.total_steps:
                    trainer.settle()  # the last progress line counts every step
                if scheduled % cfg.log_every == 0 or scheduled == cfg.total_steps:
                    step, now = trainer.finished(), time.perf_counter()
                    window = Window(step - wall_step, now - wall_since, host_seconds)
                    metrics = self._log(step, window, writer)
                    wall_since, wall_step, host_seconds, logged = now, step, 0.0, True
                host_start = time.perf_counter()
                if scheduled % cfg.sample_every == 0 or scheduled == cfg.total_steps:
                    path = write_samples(exp, model_dir, trainer.finished(), writer, is_chief)
                    if is_chief:
                        logging.info("samples: %s", path)
                if scheduled % cfg.checkpoint_every == 0 or scheduled == cfg.total_steps:
                    logging.info("checkpoint: %s", save())
                if evaluator and (scheduled % eval_every == 0 or scheduled == cfg.total_steps):
                    # The best checkpoint is kept by copying it: evaluate saved weights only.
                    path = ckpt.latest if ckpt.saved_step == scheduled else save()
                    metrics.update(evaluator.evaluate(scheduled, path, writer))
                host_seconds += time.perf_counter() - host_start
                if handler:
                    handler.check(trainer.finished())
            profiler.stop(scheduled)
            if flag.signum is not None:
                trainer.settle()
                if ckpt.saved_step != trainer.finished():
                    logging.info("checkpoint: %s", save())
                writer.flush()
                raise Interrupted(flag.signum, trainer.finished())
        writer.flush()
        trainer.settle()
        step = trainer.finished()
        if ckpt.saved_step != step:
            save()
        trainer.end(step)
        metrics.update(step=step, wall_seconds=time.perf_counter() - t_begin)
        if is_chief:
            write_result(model_dir, metrics, evaluator.describe() if evaluator else None)
        return metrics

    def _log(self, step: int, window: Window, writer) -> Dict[str, float]:
        exp, cfg = self.exp, self.exp.config
        metrics = self.trainer.metrics(window)
        images = window.steps * cfg.real_images_per_step
        if window.steps:
            metrics["perf/images_per_sec"] = images / window.wall_seconds
        metrics.setdefault("perf/images_per_sec", metrics.get("perf/step_images_per_sec", 0.0))
        metrics.setdefault("health/skipped_steps", float(exp.health.skipped.numpy()))
        if exp.source.corrupt is not None:
            metrics["health/corrupt_images"] = float(exp.source.corrupt.count)
        metrics["lr/G"] = float(tf.convert_to_tensor(exp.g_optimizer.learning_rate))
        metrics["lr/D"] = float(tf.convert_to_tensor(exp.d_optimizer.learning_rate))
        with writer.as_default():
            for key, value in metrics.items():
                tf.summary.scalar(key, value, step=step)
        rate = metrics["perf/images_per_sec"] / cfg.real_images_per_step
        eta = (cfg.total_steps - step) / rate if rate > 0 else float("inf")
        logging.info("%s %d/%d  loss/D %.4f  loss/G %.4f  %.1f img/s  ETA %s%s", self.trainer.unit,
                     step, cfg.total_steps, metrics.get("loss/D", float("nan")),
                     metrics.get("loss/G", float("nan")), metrics["perf/images_per_sec"],
                     format_eta(eta) if eta != float("inf") else "?", self.trainer.progress(metrics))
        self.trainer.after_log(step, metrics)
        return metrics
