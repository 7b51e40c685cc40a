"""The synchronous controller: `steps_per_loop` train steps per tf.function call, until done.

Between calls (on the host) it logs progress, writes summaries, sample grids
and checkpoints, and honours SIGTERM/SIGINT by saving a checkpoint and
stopping. Checkpoints, logs and samples land on exact multiples of their
intervals because a call never runs past the next such boundary.

Resuming is exact: the checkpoint holds the input state (the noise seed, the
seed of the current real-image stream and the step that stream began at; the
input tuner begins a new stream when it changes the read settings), and both
streams are pure functions of it and of the step, so a resumed run
continues them where the checkpoint left them (`train.resume_input`): a
prepared dataset is entered at that example (data/records.py), other sources
are replayed up to it.
The NaN guard (train/step.py) skips non-finite steps; the loop counts them
(`health/skipped_steps`) and stops after `train.max_consecutive_skips` in a row.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from typing import Dict, Optional

from absl import logging
import gin
import numpy as np
import tensorflow as tf

from paragan_tf import images as images_lib
from paragan_tf import sampling
from paragan_tf.data import class_list
from paragan_tf.data import pipeline
from paragan_tf.data import service as service_lib
from paragan_tf.data import tuning
from paragan_tf.errors import Diverged
from paragan_tf.eval import evaluator as evaluator_lib
from paragan_tf.train import checkpoints
from paragan_tf.train import experiment as experiment_lib
from paragan_tf.train import preemption
from paragan_tf.train import step as step_lib

Interrupted = preemption.Interrupted

_METRICS = ("loss/D", "loss/G", "grad_norm/D", "grad_norm/G", "logits/real", "logits/fake")
_MEAN_METRICS = ("grad_norm/", "health/")  # identical on every replica; others are shares


class SignalFlag:
    """Turns SIGTERM/SIGINT into a flag the controller checks between loops."""

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


def make_gan_step(exp: experiment_lib.Experiment) -> step_lib.GANStep:
    """The per-replica step of `exp`'s synchronous training."""
    cfg = exp.config
    return step_lib.GANStep(
        exp.generator, exp.discriminator, exp.g_optimizer, exp.d_optimizer, exp.loss_fn,
        step_lib.StepConfig(cfg.batch_size, cfg.d_steps, cfg.accumulation, cfg.clip_norm,
                            cfg.ortho_reg, cfg.simultaneous))


def real_batches(exp: experiment_lib.Experiment, seed: int,
                settings: Optional[tuning.Tuning] = None,
                service: Optional[service_lib.LocalDataService] = None, steps_done: int = 0):
    """Iterator of per-replica real batches for `exp`'s synchronous training.

    steps_done: train steps whose real batches this stream already delivered (resume).
    """
    per_step = make_gan_step(exp).real_batches_per_step
    return iter(exp.strategy.distribute_datasets_from_function(pipeline.real_input_fn(
        exp.source, exp.data, exp.config.batch_size, seed, classes=exp.classes,
        inputs=exp.input_config, tuning=settings, service=service,
        replica_batches_done=steps_done * per_step)))


class StepProfiler:
    """tf.profiler over `steps` train steps (whole loop calls), begun after the first log line.

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


def noise_batches(exp: experiment_lib.Experiment, seed: int, steps_done: int = 0):
    """Iterator of per-replica (z, labels) batches for `exp`'s synchronous training."""
    per_step = make_gan_step(exp).noise_batches_per_step
    return iter(exp.strategy.distribute_datasets_from_function(pipeline.noise_input_fn(
        exp.generator.dim_z, exp.source.num_classes, exp.config.batch_size, seed,
        classes=exp.classes, replica_batches_done=steps_done * per_step)))


def make_loop_fn(exp: experiment_lib.Experiment, gan_step: step_lib.GANStep):
    """tf.function running n train steps; returns (mean metrics, seconds waiting for input).

    Call it as loop(real_iterator, noise_iterator, tf.constant(n, tf.int64)). It stops
    early once train.max_consecutive_skips steps in a row were skipped. The mean
    metrics are over the steps that were not skipped (NaN when all were).
    """
    strategy = exp.strategy
    # XLA compiles the per-replica step only: a compiled function cannot call
    # next(iterator), so the iterators stay outside it (layout.py says where it works).
    replica_step = (tf.function(gan_step.__call__, jit_compile=True) if exp.layout.xla
                    else gan_step)

    def reduce(metrics):
        return {k: strategy.reduce(tf.distribute.ReduceOp.MEAN if k.startswith(_MEAN_METRICS)
                                   else tf.distribute.ReduceOp.SUM, v, axis=None)
                for k, v in metrics.items()}

    health = exp.health
    max_skips = tf.constant(exp.config.max_consecutive_skips, tf.int64)

    # autograph=False: nothing below branches on tensors, and converting every
    # Keras call made tracing take ~8 s even for the tiny test model.
    @tf.function(autograph=False)
    def loop(real_it, noise_it, n):
        def body(i, wait, totals, kept):
            # Stateful ops run in program order inside tf.function, so the two
            # timestamps bracket exactly the time spent blocked on the iterators.
            start = tf.timestamp()
            real = [next(real_it) for _ in range(gan_step.real_batches_per_step)]
            noise = [next(noise_it) for _ in range(gan_step.noise_batches_per_step)]
            with tf.control_dependencies(tf.nest.flatten(
                    strategy.experimental_local_results((real, noise)))):
                arrived = tf.timestamp()
            wait += arrived - start
            # The step waits for the timestamp (it waits for the inputs anyway): with
            # one inter-op thread the executor could otherwise run the step first.
            with tf.control_dependencies([arrived]):
                metrics = reduce(strategy.run(replica_step, args=(real, noise)))
            skipped = metrics["health/skipped"] > 0.5
            with tf.control_dependencies([skipped]):
                health.skipped.assign_add(tf.cast(skipped, tf.int64))
                health.consecutive.assign(tf.where(skipped, health.consecutive + 1, 0))
            exp.ema.update(exp.step)
            exp.step.assign_add(1)
            totals = {k: totals[k] + tf.where(skipped, 0.0, tf.cast(metrics[k], tf.float32))
                      for k in totals}
            return i + 1, wait, totals, kept + 1.0 - tf.cast(skipped, tf.float32)

        def more(i, *_):
            return tf.logical_and(i < n, health.consecutive.read_value() < max_skips)

        zeros = {k: tf.constant(0.0) for k in _METRICS}
        _, wait, totals, kept = tf.while_loop(
            more, body, (tf.constant(0, n.dtype), tf.constant(0.0, tf.float64), zeros,
                         tf.constant(0.0)))
        mean = {k: tf.where(kept > 0, v / tf.maximum(kept, 1.0), float("nan"))
                for k, v in totals.items()}
        return mean, wait
    return loop


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


def train(exp: experiment_lib.Experiment, model_dir: str) -> Dict[str, float]:
    """Trains `exp` in `model_dir` until train.total_steps; resumes from its newest checkpoint.

    Returns the last logged metrics plus `step` and `wall_seconds`.
    Raises Interrupted after saving when SIGTERM or SIGINT arrives.
    """
    cfg, strategy = exp.config, exp.strategy
    extended = strategy.extended
    tf.io.gfile.makedirs(model_dir)
    resolver = getattr(strategy, "cluster_resolver", None)
    task_id = (resolver.task_id or 0) if resolver is not None else 0
    # Multi-worker: only the chief writes to model_dir; the others must still
    # take part in saves (collective), into scratch folders.
    is_chief = extended.should_checkpoint
    logging.info("%s", class_list.describe(exp.source.class_names))
    class_list.keep_or_check(model_dir, exp.source.class_names, exp.data.name, write=is_chief)
    ckpt = checkpoints.Checkpointer(model_dir, cfg.max_to_keep, is_chief, task_id,
                                    **exp.trackables())
    # Multi-worker: SIGTERM is TensorFlow's handler's business, so that every
    # worker saves at the same step; this process then only handles SIGINT.
    handler = None
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        handler = preemption.MultiWorkerPreemption(strategy, ckpt, cfg.max_to_keep,
                                                   lambda: int(exp.step.numpy()))
    restored = ckpt.restore_latest()
    start = int(exp.step.numpy())
    if restored:
        logging.info("resumed from %s at step %d, weights digest %s", restored, start,
                     weights_digest(exp))
    writer = tf.summary.create_file_writer(
        model_dir if is_chief else os.path.join(model_dir, ".workers", str(task_id)))
    if is_chief:
        write_config(model_dir, writer)

    # The input streams continue from the checkpoint's input state (see the module doc).
    noise_seed, real_seed, real_start = (int(v) for v in exp.input_state.numpy())
    if restored and cfg.resume_input == "reshuffle":
        real_seed, real_start = real_seed * 31 + start, start
    tuner = tuning.InputTuner(exp.input_config)
    service = None
    if exp.input_config.service_workers:
        service = service_lib.LocalDataService(exp.input_config.service_workers)
        exp.inputs.append(service)  # the servers live as long as the run

    step = start

    def real_iterator(seed: int, first_step: int):
        """The real-image stream `seed` begun at `first_step`, positioned at `step`."""
        exp.input_state.assign([noise_seed, seed, first_step])
        if step > first_step:
            logging.info("fast-forwarding the real-image input by %d steps", step - first_step)
        return real_batches(exp, seed, tuner.tuning, service, step - first_step)
    real_it = real_iterator(real_seed, real_start)
    noise_it = noise_batches(exp, noise_seed, start)
    loop = make_loop_fn(exp, make_gan_step(exp))
    eval_every = evaluator_lib.eval_config().every_steps
    # Every worker evaluates (generation runs collectives); the chief writes.
    evaluator = (evaluator_lib.Evaluator(exp, model_dir, write=is_chief) if eval_every
                 else None)

    metrics = {}
    t_begin = time.perf_counter()
    # Two rates per log line: perf/images_per_sec and the ETA from wall time between log
    # lines (checkpoints, samples and evaluations included: what a user waits for), and
    # perf/step_images_per_sec from the training calls alone. The first call (tracing) is in
    # neither.
    window_steps, window_seconds, window_wait = 0, 0.0, 0.0
    wall_since, wall_step = None, step
    classes = (f"all {len(exp.classes)}" if len(exp.classes) == exp.source.num_classes
               else exp.classes)
    logging.info("training %s (classes %s) from step %d to %d on %d replica(s), global batch %d",
                 exp.source.name, classes, start, cfg.total_steps,
                 strategy.num_replicas_in_sync, cfg.batch_size)
    signals = (signal.SIGINT,) if handler else (signal.SIGTERM, signal.SIGINT)
    profiler = StepProfiler(cfg.profile_steps if is_chief else 0, model_dir)
    logged = False
    with SignalFlag(signals) as flag:
        while step < cfg.total_steps and flag.signum is None:
            intervals = (cfg.log_every, cfg.checkpoint_every, cfg.sample_every) + (
                (eval_every,) if eval_every else ())
            boundary = min(cfg.total_steps, *(step - step % k + k for k in intervals))
            n = min(cfg.steps_per_loop, boundary - step)
            profiler.before_call(step, logged)
            t0 = time.perf_counter()
            out, wait = loop(real_it, noise_it, tf.constant(n, tf.int64))
            out = {k: float(v) for k, v in out.items()}
            elapsed = time.perf_counter() - t0
            if step > start:  # the first call includes tracing: keep it out of the rates
                window_steps, window_seconds = window_steps + n, window_seconds + elapsed
                window_wait += float(wait)
            step = int(exp.step.numpy())
            profiler.after_call(step)
            if wall_since is None:
                wall_since, wall_step = time.perf_counter(), step
            consecutive = int(exp.health.consecutive.numpy())
            if consecutive >= cfg.max_consecutive_skips:
                raise Diverged(
                    f"{consecutive} consecutive steps (to step {step}) had a non-finite loss "
                    f"or gradient and were skipped (train.max_consecutive_skips="
                    f"{cfg.max_consecutive_skips}); the newest checkpoint ({ckpt.latest}) holds "
                    f"the last finite weights: lower the learning rates or check the input data")
            if step % cfg.log_every == 0 or step == cfg.total_steps:
                now = time.perf_counter()
                wall_rate = ((step - wall_step) / (now - wall_since) if step > wall_step
                             else n / elapsed)
                metrics = dict(out)
                metrics["perf/images_per_sec"] = wall_rate * cfg.real_images_per_step
                metrics["perf/step_images_per_sec"] = (
                    window_steps / window_seconds if window_steps else n / elapsed
                ) * cfg.real_images_per_step
                metrics["perf/input_wait_frac"] = (window_wait / window_seconds
                                                   if window_seconds else float(wait) / elapsed)
                if exp.input_config.tuned:
                    metrics["perf/read_parallelism"] = tuner.tuning.read_parallelism
                    metrics["perf/prefetch_depth"] = tuner.tuning.prefetch
                metrics["health/skipped_steps"] = float(exp.health.skipped.numpy())
                if exp.source.corrupt is not None:
                    metrics["health/corrupt_images"] = float(exp.source.corrupt.count)
                metrics["lr/G"] = float(tf.convert_to_tensor(exp.g_optimizer.learning_rate))
                metrics["lr/D"] = float(tf.convert_to_tensor(exp.d_optimizer.learning_rate))
                with writer.as_default():
                    for k, v in metrics.items():
                        tf.summary.scalar(k, v, step=step)
                logging.info(
                    "step %d/%d  loss/D %.4f  loss/G %.4f  %.1f img/s  input wait %.1f%%  ETA %s",
                    step, cfg.total_steps, metrics["loss/D"], metrics["loss/G"],
                    metrics["perf/images_per_sec"], 100 * metrics["perf/input_wait_frac"],
                    format_eta((cfg.total_steps - step) / wall_rate))
                window_steps, window_seconds, window_wait = 0, 0.0, 0.0
                wall_since, wall_step = now, step
                logged = True
                if tuner.observe(metrics["perf/input_wait_frac"]):
                    exp.inputs.append(real_it)  # see Experiment.inputs: never destroyed mid-run
                    real_seed += 7919  # a fresh shuffle under the new read settings
                    real_it = real_iterator(real_seed, step)
                if not all(np.isfinite(v) for v in out.values()):
                    logging.warning("non-finite metrics at step %d: %s", step, out)
            if step % cfg.sample_every == 0 or step == cfg.total_steps:
                path = write_samples(exp, model_dir, step, writer, is_chief)
                if is_chief:
                    logging.info("samples: %s", path)
            if step % cfg.checkpoint_every == 0 or step == cfg.total_steps:
                logging.info("checkpoint: %s", ckpt.save(step))
            if evaluator and (step % eval_every == 0 or step == cfg.total_steps):
                # The best checkpoint is kept by copying it: evaluate saved weights only.
                path = ckpt.latest if ckpt.saved_step == step else ckpt.save(step)
                metrics.update(evaluator.evaluate(step, path, writer))
            if handler:
                handler.check(step)
        profiler.stop(step)
        if flag.signum is not None:
            if ckpt.saved_step != step:
                logging.info("checkpoint: %s", ckpt.save(step))
            writer.flush()
            raise Interrupted(flag.signum, step)
    writer.flush()
    if ckpt.saved_step != step:
        ckpt.save(step)
    # Replicas must hold identical weights; the digest lets anyone compare workers' logs.
    logging.info("final weights digest %s", weights_digest(exp))
    metrics.update(step=step, wall_seconds=time.perf_counter() - t_begin)
    if is_chief:
        write_result(model_dir, metrics)
    exp.inputs.extend([real_it, noise_it])
    return metrics


def weights_digest(exp: experiment_lib.Experiment) -> str:
    """sha256 of this process's copy of every G, D and EMA G variable, in order."""
    digest = hashlib.sha256()
    for model in (exp.generator, exp.discriminator, exp.generator_ema):
        for variable in model.variables:
            digest.update(np.ascontiguousarray(variable.numpy()).tobytes())
    return digest.hexdigest()[:16]


def write_result(model_dir: str, metrics: Dict[str, float]) -> None:
    """The finished run's last metrics as model_dir/train_result.json (for benchmarks, sweeps)."""
    with tf.io.gfile.GFile(os.path.join(model_dir, "train_result.json"), "w") as f:
        json.dump({k: float(v) for k, v in metrics.items()}, f, indent=1, sort_keys=True)
