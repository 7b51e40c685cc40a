"""The synchronous trainer: `steps_per_loop` train steps per tf.function call.

Runs under any synchronous strategy (one device, Mirrored, MultiWorkerMirrored,
TPU); the Controller (train/controller.py) calls it between its intervals, so
a call never runs past the next log line, checkpoint, sample grid or
evaluation.

Resuming is exact: the checkpoint holds the input state (the noise seed, the
seed of the current real-image stream and the step that stream began at; the
input tuner begins a new stream when it changes the read settings), and both
streams are pure functions of it and of the step, so a resumed run
continues them where the checkpoint left them (`train.resume_input`): a
prepared dataset is entered at that example (data/records.py), other sources
are replayed up to it.

The NaN guard (train/nan_guard.py) skips non-finite steps; train/bookkeeping.py counts
them and the loop stops after `train.max_consecutive_skips` in a row (the controller
then raises Diverged). The current float16 loss scales are reported as
`health/loss_scale_G` and `health/loss_scale_D`.
"""

from __future__ import annotations

import time
from typing import Dict, Optional

from absl import logging
import tensorflow as tf

from paragan_tf.data import pipeline
from paragan_tf.data import service as service_lib
from paragan_tf.data import tuning
from paragan_tf.objective import ada as ada_lib
from paragan_tf.train import experiment as experiment_lib
from paragan_tf import precision as precision_lib
from paragan_tf.train import step as step_lib
from paragan_tf import teardown
from paragan_tf.train import trainer as trainer_lib

_METRICS = ("loss/D", "loss/G", "grad_norm/D", "grad_norm/G", "logits/real", "logits/fake")
_MEAN_METRICS = ("grad_norm/", "health/")  # identical on every replica; others are shares


def real_batches(exp: experiment_lib.Experiment, seed: int,
                 settings: Optional[tuning.Tuning] = None,
                 service: Optional[service_lib.LocalDataService] = None, steps_done: int = 0):
    """Iterator of per-replica real batches for `exp`'s synchronous training.

    steps_done: train steps whose real batches this stream already delivered (resume).
    """
    per_step = step_lib.for_experiment(exp).real_batches_per_step
    return iter(exp.strategy.distribute_datasets_from_function(pipeline.real_input_fn(
        exp.source, exp.settings.data, exp.settings.train.batch_size, seed,
        classes=exp.classes, inputs=exp.settings.inputs, tuning=settings, service=service,
        replica_batches_done=steps_done * per_step)))


def noise_batches(exp: experiment_lib.Experiment, seed: int, steps_done: int = 0):
    """Iterator of per-replica (z, labels) batches for `exp`'s synchronous training."""
    per_step = step_lib.for_experiment(exp).noise_batches_per_step
    return iter(exp.strategy.distribute_datasets_from_function(pipeline.noise_input_fn(
        exp.generator.dim_z, exp.source.num_classes, exp.settings.train.batch_size, seed,
        classes=exp.classes, replica_batches_done=steps_done * per_step)))


def make_loop_fn(exp: experiment_lib.Experiment, gan_step: step_lib.GANStep):
    """tf.function running n train steps; returns (mean metrics, seconds waiting for input).

    Call it as loop(real_iterator, noise_iterator, tf.constant(n, tf.int64)). It stops
    early once train.max_consecutive_skips steps in a row were skipped. The mean
    metrics are over the steps that were not skipped (NaN when all were).
    """
    strategy = exp.strategy
    # XLA compiles the per-replica step only: a compiled function cannot call
    # next(iterator), so the iterators stay outside it (layout/rules.py says where it works).
    replica_step = (tf.function(gan_step.__call__, jit_compile=True) if exp.layout.xla
                    else gan_step)

    def reduce(metrics):
        return {k: strategy.reduce(tf.distribute.ReduceOp.MEAN if k.startswith(_MEAN_METRICS)
                                   else tf.distribute.ReduceOp.SUM, v, axis=None)
                for k, v in metrics.items()}

    bookkeeping = exp.bookkeeping
    # Op determinism refuses tf.timestamp: a deterministic run does not measure its input
    # wait (it reports 0, and the input tuner sees no stall).
    timed = not exp.settings.train.deterministic
    if not timed:
        logging.info("train.deterministic: the input wait is not measured (op determinism "
                     "refuses tf.timestamp); perf/input_wait_frac reads 0 and the input "
                     "pipeline's tuner keeps its settings")

    # autograph=False: nothing below branches on tensors, and converting every
    # Keras call made tracing take ~8 s even for the tiny test model.
    @tf.function(autograph=False)
    def loop(real_it, noise_it, n):
        def body(i, wait, totals, kept):
            # Stateful ops run in program order inside tf.function, so the two
            # timestamps bracket exactly the time spent blocked on the iterators.
            start = tf.timestamp() if timed else None
            real = [next(real_it) for _ in range(gan_step.real_batches_per_step)]
            noise = [next(noise_it) for _ in range(gan_step.noise_batches_per_step)]
            arrived = tf.nest.flatten(strategy.experimental_local_results((real, noise)))
            if timed:
                with tf.control_dependencies(arrived):
                    arrived = [tf.timestamp()]
                wait += arrived[0] - start
            # The step waits for the timestamp (it waits for the inputs anyway): with
            # one inter-op thread the executor could otherwise run the step first.
            with tf.control_dependencies(arrived):
                metrics = reduce(strategy.run(replica_step, args=(real, noise)))
            skipped = metrics["health/skipped"] > 0.5
            bookkeeping.finish(skipped, metrics.get("health/loss_scale_lowered", 0.0) > 0.5)
            totals = {k: totals[k] + tf.where(skipped, 0.0, tf.cast(metrics[k], tf.float32))
                      for k in totals}
            return i + 1, wait, totals, kept + 1.0 - tf.cast(skipped, tf.float32)

        def more(i, *_):
            return tf.logical_and(i < n, tf.logical_not(bookkeeping.diverging()))

        zeros = {k: tf.constant(0.0) for k in _METRICS}
        _, wait, totals, kept = tf.while_loop(
            more, body, (tf.constant(0, n.dtype), tf.constant(0.0, tf.float64), zeros,
                         tf.constant(0.0)))
        mean = {k: tf.where(kept > 0, v / tf.maximum(kept, 1.0), float("nan"))
                for k, v in totals.items()}
        return mean, wait
    return loop


class SyncTrainer(trainer_lib.Trainer):
    """Synchronous training of an Experiment, for the Controller.

    The input streams are built at the first `train` call, from the step the
    controller restored. At the end of every progress window (`end_window`) the
    input tuner sees the input wait fraction of the steps since it last looked; when
    it raises read parallelism and prefetch, the real-image stream is rebuilt with them.
    """

    def __init__(self, exp: experiment_lib.Experiment):
        super().__init__(exp)
        strategy = exp.strategy
        resolver = getattr(strategy, "cluster_resolver", None)
        self.task_id = (resolver.task_id or 0) if resolver is not None else 0
        # Multi-worker: only the chief writes to model_dir; the others must still
        # take part in saves (collective), into scratch folders.
        self.is_chief = strategy.extended.should_checkpoint
        self.steps_per_call = exp.settings.train.steps_per_loop
        self.tuner = tuning.InputTuner(exp.settings.inputs)
        self.loop = self.real_it = self.noise_it = self._service = None
        self._retired = []  # streams the tuner replaced: see `close`
        # Seconds waiting for input and in all: of the first (tracing) call, and of the
        # calls since the tuner last looked.
        self._first_call = None
        self._tuner_window = [0.0, 0.0]

    def _begin(self) -> None:
        exp, cfg = self.exp, self.exp.settings.train
        start = self.step = int(exp.step.numpy())
        # The input streams continue from the checkpoint's input state (see the module doc).
        self.noise_seed, self.real_seed, real_start = (int(v) for v in exp.input_state.numpy())
        if start and cfg.resume_input == "reshuffle":  # a resumed run
            self.real_seed, real_start = self.real_seed * 31 + start, start
        if exp.settings.inputs.service_workers:
            self._service = service_lib.LocalDataService(exp.settings.inputs.service_workers)
        self.real_it = self._real_iterator(self.real_seed, real_start)
        self.noise_it = noise_batches(exp, self.noise_seed, start)
        self.loop = make_loop_fn(exp, step_lib.for_experiment(exp))
        classes = (f"all {len(exp.classes)}" if len(exp.classes) == exp.source.num_classes
                   else exp.classes)
        logging.info("training %s (classes %s) from step %d to %d on %d replica(s), global "
                     "batch %d", exp.source.name, classes, start, cfg.total_steps,
                     exp.strategy.num_replicas_in_sync, cfg.batch_size)

    def _real_iterator(self, seed: int, first_step: int):
        """The real-image stream `seed` begun at `first_step`, positioned at the current step."""
        self.exp.input_state.assign([self.noise_seed, seed, first_step])
        if self.step > first_step:
            logging.info("fast-forwarding the real-image input by %d steps",
                         self.step - first_step)
        return real_batches(self.exp, seed, self.tuner.tuning, self._service,
                            self.step - first_step)

    def train(self, num_steps: int) -> trainer_lib.Progress:
        exp = self.exp
        if self.loop is None:
            self._begin()
        t0 = time.perf_counter()
        out, wait = self.loop(self.real_it, self.noise_it, tf.constant(num_steps, tf.int64))
        seconds, wait = time.perf_counter() - t0, float(wait)
        self.step = int(exp.step.numpy())
        metrics = {k: float(v) for k, v in out.items()}
        metrics.update({"perf/compute_seconds": seconds, "perf/input_wait_seconds": wait})
        if self._first_call is None:
            self._first_call = (wait, seconds)
        else:
            self._tuner_window = [a + b for a, b in zip(self._tuner_window, (wait, seconds))]
        return trainer_lib.Progress(self.step, num_steps, metrics,
                                    int(exp.health.consecutive.numpy()))

    def levels(self) -> Dict[str, float]:
        exp, levels = self.exp, super().levels()
        for network, optimizer in (("G", exp.g_optimizer), ("D", exp.d_optimizer)):
            precision = precision_lib.Precision(optimizer)
            if precision.scaling:  # mixed_float16
                levels[f"health/loss_scale_{network}"] = float(precision.loss_scale)
        if isinstance(exp.augment, ada_lib.AdaptiveAugment):  # its p and overfitting heuristic
            levels["augment/p"] = float(exp.augment.p.numpy())
            levels["augment/rt"] = float(exp.augment.rt.numpy())
        if exp.settings.inputs.tuned:
            levels["perf/read_parallelism"] = self.tuner.tuning.read_parallelism
            levels["perf/prefetch_depth"] = self.tuner.tuning.prefetch
        return levels

    def end_window(self) -> None:
        """The input tuner looks at the calls since it last looked (the tracing call left
        out unless it is all there is); a new stream begins at the step it changes."""
        waited, total = (self._tuner_window if self._tuner_window[1]
                         else self._first_call or (0.0, 0.0))
        self._tuner_window = [0.0, 0.0]
        if total and self.tuner.observe(waited / total):
            self._retired.append(self.real_it)
            self.real_seed += 7919  # a fresh shuffle under the new read settings
            self.real_it = self._real_iterator(self.real_seed, self.step)

    def close(self) -> None:
        teardown.park(self.real_it, self.noise_it, self._service, *self._retired)
        self.real_it = self.noise_it = self._service = None
        self._retired.clear()
