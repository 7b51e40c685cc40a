"""Asynchronous GAN training (ParaGAN) under ParameterServerStrategy.

This process is the coordinator; AsyncTrainer runs under the same Controller
as the synchronous trainer (train/controller.py), one round per step. G, D,
EMA G and the optimizers live on the parameter servers. A round t is `d_steps` D-update closures and one G-update
closure, scheduled with no dependency between them: each reads whatever G and
D the servers hold when it runs, so G_{t+1} is computed against D_t while D
is being updated (docs/design.md section 2). The staleness bound: round t is
scheduled only once round t - max_staleness has finished, so a closure misses
at most the updates of the `max_staleness` most recent rounds. In mode
'sample_buffer' D closures train on fakes G closures left in a buffer
(train/sample_buffer.py) and `buffer_depth` bounds the rounds in flight.

No barrier but checkpoints: rounds are collected in order as they finish (their
metrics, the NaN guard's counts, the EMA update), and a log line reports what
has finished without waiting for the closures still running, a straggler's
included. Only a checkpoint waits for every scheduled round, so it holds an
exact round.

Rules of the asynchronous run (the synchronous trainer's settings that mean
nothing here are refused or warned about by name in `check_settings`):
- each worker reads its own shuffle of the data, seeded by its worker index
  (data/pipeline.py, per_worker); a resumed run starts fresh shuffles;
- the EMA generator is updated by the coordinator, once per finished G round, in
  round order: closures running at once never read-modify-write it together;
- the NaN guard skips a non-finite update inside its closure and puts back the
  forward state that closure's passes changed; the coordinator counts rounds
  with a skipped update (`health/skipped_steps`) and stops the run after
  `train.max_consecutive_skips` of them in a row (errors.Diverged).

Failures (docs/reliability.md): a lost worker's closure is re-run elsewhere by the
ClusterCoordinator, and a restarted worker is re-admitted; the step counter
is the coordinator's count of finished rounds, so it stays exact even when a
closure ran twice (at-least-once: the repeated update shows as
`async/repeated_g_updates`). A lost parameter server is fatal: we exit with a
clear error and the relaunch resumes from the last checkpoint, written at
exact round boundaries every `train.checkpoint_every` rounds.
"""

from __future__ import annotations

import collections
import json
import os
import threading
import time
from typing import Dict, List

from absl import logging
import numpy as np
import tensorflow as tf

from paragan_tf import ada as ada_lib
from paragan_tf import config as gin_config
from paragan_tf.data import class_groups
from paragan_tf.data import pipeline
from paragan_tf.data import tuning
from paragan_tf.distribute import cluster
from paragan_tf.errors import ConfigError
from paragan_tf.errors import Diverged
from paragan_tf.eval import evaluator as evaluator_lib
from paragan_tf.train import config as config_lib
from paragan_tf.train import experiment as experiment_lib
from paragan_tf.train import controller as controller_lib
from paragan_tf.train import model_dir as model_dir_lib
from paragan_tf.train import sample_buffer
from paragan_tf.train import step as step_lib


class ParameterServerLost(RuntimeError):
    """A parameter server (or every worker) stopped answering; relaunch to resume."""


def _noise(index: tf.Tensor, seed: int, batch: int, dim_z: int, classes: List[int]):
    """The noise of closure `index`: a pure function, so a re-run closure sees the same."""
    key = tf.stack([tf.constant(seed, tf.int64), tf.cast(index, tf.int64)])
    z = tf.random.stateless_normal([batch, dim_z], key)
    return z, class_groups.draw_labels(classes, [batch], key + 1)


class _Watchdog(threading.Thread):
    """Exits the process when no round finishes for `timeout` seconds."""

    def __init__(self, timeout: float):
        super().__init__(daemon=True, name="async-watchdog")
        self.timeout, self.last = timeout, time.monotonic()

    def run(self):
        while True:
            time.sleep(min(5.0, self.timeout / 4))
            if time.monotonic() - self.last > self.timeout:
                logging.error("no training progress for %.0f s: a parameter server or every "
                              "worker is unreachable; relaunch to resume from the last "
                              "checkpoint", self.timeout)
                logging.flush()
                os._exit(3)  # pylint: disable=protected-access


class _Closures:
    """The D-update and G-update closures of the workers, and their per-worker input.

    mode 'closures': a D closure generates its fakes with the G the servers hold.
    mode 'sample_buffer' (ParaGAN's): a G closure also writes the fakes it generated
    into a SampleBuffer, and a D closure trains on the newest batch there.
    """

    def __init__(self, exp: experiment_lib.Experiment, coordinator, start: int,
                 options: config_lib.AsyncConfig):
        cfg, strategy = exp.config, exp.strategy
        k, batch, d_steps = cfg.accumulation, cfg.batch_size, cfg.d_steps
        dim_z, classes = exp.generator.dim_z, exp.classes
        gan_step = step_lib.GANStep(
            exp.generator, exp.discriminator, exp.g_optimizer, exp.d_optimizer, exp.loss_fn,
            step_lib.StepConfig(batch, 1, k, cfg.clip_norm, cfg.ortho_reg,
                                augment=exp.augment, penalties=exp.penalties))
        real_fn = pipeline.real_input_fn(exp.source, exp.data, batch,
                                         cfg.seed * 1_000_003 + start, per_worker=True,
                                         classes=classes, inputs=exp.input_config)
        self.real_it = iter(coordinator.create_per_worker_dataset(
            lambda: strategy.distribute_datasets_from_function(real_fn)))
        d_seed, g_seed = cfg.seed * 2 + 1, cfg.seed * 2 + 2
        self.coordinator = coordinator
        self.buffer = buffer = None
        if options.mode == "sample_buffer":
            resolution = exp.data.resolution
            self.buffer = buffer = sample_buffer.SampleBuffer(
                strategy, options.buffer_depth, batch,
                (resolution, resolution, exp.source.channels), dim_z, near=exp.step)
        g_iterations = exp.g_optimizer.iterations

        @tf.function(autograph=False)
        def d_closure(iterator, index):
            real = [next(iterator) for _ in range(k)]
            if buffer is None:
                noise = [_noise(index * k + i, d_seed, batch, dim_z, classes)
                         for i in range(k)]
                out = strategy.run(gan_step.d_update, args=(real, noise))
            else:  # accumulation is 1 (config.AsyncConfig checks)
                fakes, labels, z, version = buffer.read()
                out = strategy.run(gan_step.d_update, args=(real, [(z, labels)]),
                                   kwargs=dict(fakes=[fakes]))
                out["async/sample_age"] = tf.cast(g_iterations - version, tf.float32)
            return dict(out, process=cluster.process_id())

        @tf.function(autograph=False)
        def g_closure(index):
            noise = [_noise(index * k + i, g_seed, batch, dim_z, classes) for i in range(k)]
            if buffer is None:
                out = strategy.run(gan_step.g_update, args=(noise,))
            else:
                version = g_iterations.read_value()  # the G that generates the fakes

                def store(fakes, healthy):  # only fakes of a G whose update was finite
                    tf.cond(healthy, lambda: buffer.write(index, fakes[0], noise[0][1],
                                                          noise[0][0], version),
                            lambda: tf.constant(False))
                with tf.control_dependencies([version]):
                    out = strategy.run(gan_step.g_update, args=(noise,),
                                       kwargs=dict(on_fakes=store))
            return dict(out, process=cluster.process_id())

        @tf.function(autograph=False)
        def fill_closure(slot):
            # Noise of negative closure numbers: apart from every training closure's.
            z, labels = _noise(-1 - slot, g_seed, batch, dim_z, classes)
            fakes = exp.generator((z, labels), training=True)
            return buffer.write(slot, fakes, labels, z, g_iterations.read_value())

        def schedule(round_index: int) -> list:
            values = [coordinator.schedule(d_closure, args=(
                self.real_it, tf.constant(round_index * d_steps + j, tf.int64)))
                for j in range(d_steps)]
            values.append(coordinator.schedule(
                g_closure, args=(tf.constant(round_index, tf.int64),)))
            return values
        self.schedule = schedule
        self.d_closure, self.g_closure, self._fill_closure = d_closure, g_closure, fill_closure

    def fill_buffer(self) -> None:
        """Fills every slot of the sample buffer from the current G (before the first round)."""
        for slot in range(self.buffer.depth):
            self.coordinator.schedule(self._fill_closure,
                                      args=(tf.constant(slot, tf.int64),))
        self.coordinator.join()
        logging.info("sample buffer: %d of %d slots filled from the current G",
                     self.buffer.filled(), self.buffer.depth)


class _InFlight:
    """Scheduled rounds, oldest first; finishing one collects its closures' results.

    Finishing round t (in order) counts its closures per worker process, adds its
    metrics to the log window, counts a skipped update for the NaN guard and
    updates the EMA generator from G: the one place the EMA is written.
    """

    def __init__(self, exp: experiment_lib.Experiment, finished: int, watchdog: _Watchdog,
                 latest_checkpoint):
        self.exp, self.finished, self.watchdog = exp, finished, watchdog
        self.latest_checkpoint = latest_checkpoint
        self.rounds = collections.deque()
        self.window = collections.defaultdict(list)
        self.by_process = collections.Counter()
        self.skipped = int(exp.health.skipped.numpy())
        self.consecutive = int(exp.health.consecutive.numpy())
        self._ema_update = tf.function(exp.ema.update, autograph=False)

    def __len__(self) -> int:
        return len(self.rounds)

    def add(self, values: list) -> None:
        self.rounds.append(values)

    def finish_oldest(self) -> None:
        skipped = False
        for value in self.rounds.popleft():
            try:
                out = value.fetch()
            except tf.errors.UnavailableError:
                # A finished closure's outputs stay on its worker until fetched; if
                # that worker died since, its update is applied but its metrics are
                # gone. Only a lost parameter server is fatal: probe one.
                self.exp.step.numpy()
                logging.warning("metrics of a finished closure were lost with its worker")
                self.by_process["lost"] += 1
                continue
            self.by_process[out.pop("process").decode()] += 1
            skipped = skipped or out.pop("health/skipped") > 0.5
            for key, metric in out.items():
                if np.isfinite(metric):
                    self.window[key].append(metric)
        # G update number `finished` is in (or skipped): one EMA step, as the sync loop's.
        self._ema_update(tf.constant(self.finished, tf.int64))
        self.skipped += skipped
        self.consecutive = self.consecutive + 1 if skipped else 0
        self.finished += 1
        self.watchdog.last = time.monotonic()
        limit = self.exp.config.max_consecutive_skips
        if self.consecutive >= limit:
            raise Diverged(
                f"{self.consecutive} consecutive rounds (to round {self.finished}) had an "
                f"update with a non-finite loss or gradient, skipped (train."
                f"max_consecutive_skips={limit}); the newest checkpoint "
                f"({self.latest_checkpoint()}) holds the last finite weights: lower the "
                f"learning rates or check the input data")

    def drain(self) -> None:
        while self.rounds:
            self.finish_oldest()

    def store_health(self) -> None:
        """The NaN guard's counts into the checkpointed variables."""
        self.exp.health.skipped.assign(self.skipped)
        self.exp.health.consecutive.assign(self.consecutive)

    def take_window(self) -> Dict[str, float]:
        """Mean metrics of the rounds finished since the last call."""
        metrics = {key: float(np.mean(v)) for key, v in self.window.items()}
        self.window.clear()
        metrics["health/skipped_steps"] = float(self.skipped)
        return metrics


def _describe(exp: experiment_lib.Experiment, start: int,
              options: config_lib.AsyncConfig) -> None:
    spec = cluster.resolver().cluster_spec().as_dict()
    # Partitioned variables show up as their shards, named <variable>/part_<i>.
    variables = [v for m in (exp.generator, exp.discriminator) for v in m.variables]
    placement = collections.Counter(v.device.split("/device:")[0] for v in variables)
    sharded = {v.name.split("/part_")[0] for v in variables if "/part_" in v.name}
    staleness = (f"a sample buffer of {options.buffer_depth} batches, as many rounds in "
                 f"flight" if options.mode == "sample_buffer" else
                 f"max staleness {options.max_staleness} rounds")
    logging.info("asynchronous training (mode %r) of %s from round %d to %d on %d worker(s), "
                 "%d ps; batch %d per closure, %s; G and D variables per task %s, %d of them "
                 "split across parameter servers", options.mode, exp.source.name, start,
                 exp.config.total_steps, len(spec.get("worker", [])), len(spec.get("ps", [])),
                 exp.config.batch_size, staleness, dict(placement), len(sharded))


def check_settings(exp: experiment_lib.Experiment, options: config_lib.AsyncConfig) -> None:
    """Refuses, or warns about, every setting the asynchronous trainer cannot honour."""
    cfg = exp.config
    if options.mode == "sample_buffer" and cfg.accumulation > 1:
        raise ConfigError(f"train.accumulation={cfg.accumulation} is not available with "
                          f"async_train.mode='sample_buffer': the buffer holds single "
                          f"batches; use a larger train.batch_size instead")
    refused = {
        "input_pipeline.service_workers": (exp.input_config.service_workers, "every worker "
                                           "already runs its own input pipeline; set it to 0"),
        "eval.every_steps": (evaluator_lib.eval_config().every_steps, "the coordinator has no "
                             "replicas to generate on; evaluate beside it with bin/eval.py "
                             "--watch"),
        "train.profile_steps": (cfg.profile_steps, "the steps run on the workers, the "
                                "coordinator would trace only its dispatching; set it to 0"),
        "train.simultaneous": (cfg.simultaneous, "every asynchronous G closure already reads "
                               "whichever D the servers hold; set it to False"),
        "penalties.lecam_weight": (exp.penalties.lecam_weight, "its moving averages would be "
                                   "read and written by concurrent D closures; set it to 0"),
        "augment.ada_target": (exp.augment.config.target
                               if isinstance(exp.augment, ada_lib.AdaptiveAugment) else None,
                               "ADA's p and r_t would be read and written by concurrent D "
                               "closures; use augment.policy (DiffAugment)"),
        "loss.fn": ("@relativistic" if getattr(exp.loss_fn, "pairs_real", False) else None,
                    "a G closure has no real batch to pair its images with; use @hinge or "
                    "@non_saturating"),
    }
    for name, (value, why) in refused.items():
        if value:
            raise ConfigError(f"{name}={value!r} is not available under "
                              f"strategy.kind='parameter_server': {why}")
    ignored = {
        "train.steps_per_loop": "each closure is one update, scheduled on its own",
        "train.resume_input": "a resumed asynchronous run starts fresh shuffles on every "
                              "worker (which worker read which batch is not recorded)",
        "train.deterministic": "closures run in whatever order the workers finish them",
        ("async_train.max_staleness" if options.mode == "sample_buffer" else
         "async_train.buffer_depth"): f"async_train.mode={options.mode!r} (buffer_depth "
        f"bounds the rounds in flight of 'sample_buffer', max_staleness those of 'closures')",
    }
    for name, why in ignored.items():
        value = gin_config.bound(name)
        if value is not None:
            logging.warning("%s=%r does not apply under strategy.kind='parameter_server': "
                            "%s", name, value, why)
    if exp.input_config.tuned and exp.input_config.adaptive:
        logging.info("input tuning is not adaptive under parameter_server: workers read "
                     "with the starting settings %s", tuning.InputTuner(exp.input_config).tuning)


class AsyncTrainer(controller_lib.Trainer):
    """Asynchronous training of an Experiment on a parameter-server cluster, for the Controller.

    A step is a round: `run(1)` schedules it, waiting first for the oldest round in
    flight when the staleness bound is reached; `finished()` counts the rounds
    collected in order; `settle()` waits for all (the checkpoint's barrier).
    """

    unit = "round"

    def __init__(self, exp: experiment_lib.Experiment, model_dir: str,
                 options: config_lib.AsyncConfig):
        super().__init__(exp)
        self.model_dir, self.options = model_dir, options
        self.coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(
            exp.strategy)
        self.closures: _Closures = None
        self.inflight: _InFlight = None
        self.scheduled = 0
        self.repeated = 0  # G updates applied twice (a re-run closure), known when settled

    @property
    def max_steps_per_call(self) -> int:
        return 1

    def begin(self, start, restored, latest_checkpoint) -> str:
        self.scheduled = start
        self.closures = _Closures(self.exp, self.coordinator, start, self.options)
        watchdog = _Watchdog(self.options.stall_timeout_secs)
        watchdog.start()
        self.inflight = _InFlight(self.exp, start, watchdog, latest_checkpoint)
        _describe(self.exp, start, self.options)
        if self.closures.buffer is not None:
            self.closures.fill_buffer()
        return "; every worker starts a fresh shuffle" if restored else ""

    def run(self, n: int) -> None:
        for _ in range(n):
            while len(self.inflight) >= self.options.rounds_in_flight:
                self.inflight.finish_oldest()
            self.inflight.add(self.closures.schedule(self.scheduled))
            self.scheduled += 1

    def finished(self) -> int:
        return self.inflight.finished

    def settle(self) -> None:
        self.inflight.drain()
        self.exp.step.assign(self.inflight.finished)
        self.repeated = int(self.exp.g_optimizer.iterations.numpy()) - self.inflight.finished

    def metrics(self, window) -> Dict[str, float]:
        self.exp.step.assign(self.inflight.finished)
        metrics = self.inflight.take_window()
        images = window.steps * self.exp.config.real_images_per_step
        metrics["perf/step_images_per_sec"] = images / max(
            window.wall_seconds - window.host_seconds, 1e-9)
        metrics["async/repeated_g_updates"] = float(self.repeated)
        metrics["async/rounds_in_flight"] = float(len(self.inflight))
        return metrics

    def progress(self, metrics) -> str:
        age = (f"  sample age {metrics['async/sample_age']:.1f}"
               if "async/sample_age" in metrics else "")
        return (f"{age}  {len(self.inflight)} round(s) in flight, closures by worker process "
                f"{dict(self.inflight.by_process)}")

    def before_save(self, step: int) -> None:
        self.inflight.store_health()
        with tf.io.gfile.GFile(os.path.join(self.model_dir, "async_workers.json"), "w") as f:
            json.dump({"step": step, "closures_by_process": dict(self.inflight.by_process)},
                      f, indent=1)

    def close(self) -> None:
        controller_lib.PARKED.append(self.closures)  # the per-worker iterators: see PARKED
        self.closures = None  # the count of finished rounds stays


def train(exp: experiment_lib.Experiment, model_dir: str) -> Dict[str, float]:
    """Trains `exp` asynchronously until train.total_steps rounds; resumes from model_dir."""
    options = config_lib.async_config()
    check_settings(exp, options)
    model_dir = model_dir_lib.resolve(model_dir)
    trainer = AsyncTrainer(exp, model_dir, options)
    try:
        return controller_lib.Controller(exp, model_dir, trainer).run()
    except (tf.errors.UnavailableError, tf.errors.CancelledError,
            tf.errors.AbortedError) as e:
        latest = model_dir_lib.latest_checkpoint(model_dir)
        finished = trainer.inflight.finished if trainer.inflight else "?"
        raise ParameterServerLost(
            f"lost the cluster at round {finished} ({type(e).__name__}: "
            f"{str(e).strip().splitlines()[0][:200]}); a parameter server is down or "
            f"unreachable; relaunch every task to resume from "
            f"{latest or 'the start (no checkpoint yet)'}") from None
