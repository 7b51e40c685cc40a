"""Asynchronous GAN training (ParaGAN) under ParameterServerStrategy.

This process is the coordinator. G, D, EMA G and the optimizers live on the
parameter servers. A round t is `d_steps` D-update closures and one G-update
closure, scheduled with no dependency between them: each reads whatever G and
D the servers hold when it runs, so G_{t+1} is computed against D_t while D
is being updated (PARAGAN.md section 2), and a slow or lost worker stalls
nobody. The staleness bound: round t is scheduled only once round
t - max_staleness has finished, so a closure misses at most the updates of
the `max_staleness` most recent rounds.

Failures (RELIABILITY.md): a lost worker's closure is re-run elsewhere by the
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

from paragan_tf.data import class_groups
from paragan_tf.data import class_list
from paragan_tf.data import pipeline
from paragan_tf.data import tuning
from paragan_tf.distribute import cluster
from paragan_tf.errors import ConfigError
from paragan_tf.eval import evaluator as evaluator_lib
from paragan_tf.train import checkpoints
from paragan_tf.train import config as config_lib
from paragan_tf.train import experiment as experiment_lib
from paragan_tf.train import loop as sync_loop
from paragan_tf.train import preemption
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
    """The D-update and G-update closures of the workers, and their per-worker input."""

    def __init__(self, exp: experiment_lib.Experiment, coordinator, start: int):
        cfg, strategy = exp.config, exp.strategy
        k, batch, d_steps = cfg.accumulation, cfg.batch_size, cfg.d_steps
        dim_z, classes = exp.generator.dim_z, exp.classes
        gan_step = step_lib.GANStep(
            exp.generator, exp.discriminator, exp.g_optimizer, exp.d_optimizer, exp.loss_fn,
            step_lib.StepConfig(batch, 1, k, cfg.clip_norm, cfg.ortho_reg))
        real_fn = pipeline.real_input_fn(exp.source, exp.data, batch,
                                         cfg.seed * 1_000_003 + start,
                                         per_worker=True, classes=classes,
                                         inputs=exp.input_config)
        real_it = iter(coordinator.create_per_worker_dataset(
            lambda: strategy.distribute_datasets_from_function(real_fn)))
        d_seed, g_seed = cfg.seed * 2 + 1, cfg.seed * 2 + 2

        @tf.function(autograph=False)
        def d_closure(iterator, index):
            real = [next(iterator) for _ in range(k)]
            noise = [_noise(index * k + i, d_seed, batch, dim_z, classes) for i in range(k)]

            def update(real, noise):
                loss, grads, real_sum, fake_sum = gan_step.d_gradients(real, noise)
                return {"loss/D": loss, "grad_norm/D": gan_step.apply_d(loss, grads),
                        "logits/real": real_sum / float(batch * k),
                        "logits/fake": fake_sum / float(batch * k)}
            return dict(strategy.run(update, args=(real, noise)), process=cluster.process_id())

        @tf.function(autograph=False)
        def g_closure(index):
            noise = [_noise(index * k + i, g_seed, batch, dim_z, classes) for i in range(k)]

            def update(noise):
                loss, grads = gan_step.g_gradients(noise)
                return {"loss/G": loss, "grad_norm/G": gan_step.apply_g(loss, grads)}
            out = strategy.run(update, args=(noise,))
            exp.ema.update(index)  # G update number `index`
            return dict(out, process=cluster.process_id())

        def schedule(round_index: int) -> list:
            values = [coordinator.schedule(d_closure, args=(
                real_it, tf.constant(round_index * d_steps + j, tf.int64)))
                for j in range(d_steps)]
            values.append(coordinator.schedule(
                g_closure, args=(tf.constant(round_index, tf.int64),)))
            return values
        self.schedule = schedule


class _InFlight:
    """Scheduled rounds, oldest first; finishing one collects its closures' metrics."""

    def __init__(self, exp: experiment_lib.Experiment, finished: int, watchdog: _Watchdog):
        self.exp, self.finished, self.watchdog = exp, finished, watchdog
        self.rounds = collections.deque()
        self.window = collections.defaultdict(list)
        self.by_process = collections.Counter()

    def __len__(self) -> int:
        return len(self.rounds)

    def add(self, values: list) -> None:
        self.rounds.append(values)

    def finish_oldest(self) -> None:
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
            for key, metric in out.items():
                self.window[key].append(metric)
        self.finished += 1
        self.watchdog.last = time.monotonic()

    def drain(self) -> None:
        while self.rounds:
            self.finish_oldest()

    def take_window(self) -> Dict[str, float]:
        """Mean metrics of the rounds finished since the last call."""
        metrics = {key: float(np.mean(v)) for key, v in self.window.items()}
        self.window.clear()
        return metrics


def _describe(exp: experiment_lib.Experiment, start: int, max_staleness: int) -> None:
    spec = cluster.resolver().cluster_spec().as_dict()
    # Partitioned variables show up as their shards, named <variable>/part_<i>.
    variables = [v for m in (exp.generator, exp.discriminator) for v in m.variables]
    placement = collections.Counter(v.device.split("/device:")[0] for v in variables)
    sharded = {v.name.split("/part_")[0] for v in variables if "/part_" in v.name}
    logging.info("asynchronous training of %s from round %d to %d on %d worker(s), %d ps; "
                 "batch %d per closure, max staleness %d; G and D variables per task %s, "
                 "%d of them split across parameter servers", exp.source.name, start,
                 exp.config.total_steps, len(spec.get("worker", [])), len(spec.get("ps", [])),
                 exp.config.batch_size, max_staleness, dict(placement), len(sharded))


def train(exp: experiment_lib.Experiment, model_dir: str) -> Dict[str, float]:
    """Trains `exp` asynchronously until train.total_steps rounds; resumes from model_dir."""
    cfg = exp.config
    options = config_lib.async_config()
    if exp.input_config.service_workers:
        raise ConfigError("input_pipeline.service_workers is not available under "
                          "strategy.kind='parameter_server': every worker already runs its "
                          "own input pipeline; set it to 0")
    if evaluator_lib.eval_config().every_steps:
        raise ConfigError("eval.every_steps is not available under "
                          "strategy.kind='parameter_server' (the coordinator has no replicas "
                          "to generate on); evaluate beside it with bin/eval.py --watch")
    if cfg.profile_steps:
        raise ConfigError("train.profile_steps is not available under "
                          "strategy.kind='parameter_server': the steps run on the workers, "
                          "the coordinator would trace only its dispatching; set it to 0")
    if exp.input_config.tuned and exp.input_config.adaptive:
        logging.info("input tuning is not adaptive under parameter_server: workers read "
                     "with the starting settings %s", tuning.InputTuner(exp.input_config).tuning)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(exp.strategy)
    tf.io.gfile.makedirs(model_dir)
    logging.info("%s", class_list.describe(exp.source.class_names))
    class_list.keep_or_check(model_dir, exp.source.class_names, exp.data.name, write=True)
    ckpt = checkpoints.Checkpointer(model_dir, cfg.max_to_keep, True, 0, **exp.trackables())
    restored = ckpt.restore_latest()
    start = int(exp.step.numpy())
    if restored:
        logging.info("resumed from %s at round %d", restored, start)
    writer = tf.summary.create_file_writer(model_dir)
    sync_loop.write_config(model_dir, writer)
    closures = _Closures(exp, coordinator, start)
    watchdog = _Watchdog(options["stall_timeout_secs"])
    watchdog.start()
    inflight = _InFlight(exp, start, watchdog)
    _describe(exp, start, options["max_staleness"])

    metrics: Dict[str, float] = {}
    # perf/images_per_sec and the ETA: wall time between log lines, checkpoints and samples
    # included, as in the synchronous loop; perf/step_images_per_sec leaves that host work out.
    t_begin = t_window = time.perf_counter()
    window_start, host_seconds = start, 0.0
    try:
        with sync_loop.SignalFlag() as flag:
            rounds = start
            while rounds < cfg.total_steps and flag.signum is None:
                while len(inflight) >= options["max_staleness"]:
                    inflight.finish_oldest()
                inflight.add(closures.schedule(rounds))
                rounds += 1
                at_log = rounds % cfg.log_every == 0 or rounds == cfg.total_steps
                at_ckpt = rounds % cfg.checkpoint_every == 0 or rounds == cfg.total_steps
                if not (at_log or at_ckpt or flag.signum is not None):
                    continue
                inflight.drain()  # exact boundaries: every scheduled round has finished
                finished = inflight.finished
                exp.step.assign(finished)
                if at_log:
                    metrics = inflight.take_window()
                    wall = time.perf_counter() - t_window
                    images = (finished - window_start) * cfg.real_images_per_step
                    metrics["perf/images_per_sec"] = images / wall
                    metrics["perf/step_images_per_sec"] = images / max(wall - host_seconds,
                                                                       1e-9)
                    metrics["async/repeated_g_updates"] = float(
                        int(exp.g_optimizer.iterations.numpy()) - finished)
                    with writer.as_default():
                        for key, value in metrics.items():
                            tf.summary.scalar(key, value, step=finished)
                    eta = (cfg.total_steps - finished) * wall / max(finished - window_start, 1)
                    logging.info("round %d/%d  loss/D %.4f  loss/G %.4f  %.1f img/s  ETA %s  "
                                 "closures by worker process %s", finished, cfg.total_steps,
                                 metrics.get("loss/D", float("nan")),
                                 metrics.get("loss/G", float("nan")),
                                 metrics["perf/images_per_sec"], sync_loop.format_eta(eta),
                                 dict(inflight.by_process))
                    t_window, window_start, host_seconds = time.perf_counter(), finished, 0.0
                host_start = time.perf_counter()
                if at_ckpt or flag.signum is not None:
                    logging.info("checkpoint: %s", ckpt.save(finished))
                if flag.signum is None and rounds % cfg.sample_every == 0:
                    logging.info("samples: %s", sync_loop.write_samples(
                        exp, model_dir, finished, writer))
                host_seconds += time.perf_counter() - host_start
            if flag.signum is not None:
                writer.flush()
                raise preemption.Interrupted(flag.signum, inflight.finished)
    except (tf.errors.UnavailableError, tf.errors.CancelledError,
            tf.errors.AbortedError) as e:
        raise ParameterServerLost(
            f"lost the cluster at round {inflight.finished} ({type(e).__name__}: "
            f"{str(e).strip().splitlines()[0][:200]}); a parameter server is down or "
            f"unreachable; relaunch every task to resume from "
            f"{ckpt.latest or 'the start (no checkpoint yet)'}") from None
    finished = inflight.finished
    if ckpt.saved_step != finished:
        exp.step.assign(finished)
        ckpt.save(finished)
    if finished % cfg.sample_every:
        logging.info("samples: %s", sync_loop.write_samples(exp, model_dir, finished, writer))
    writer.flush()
    metrics.update(step=finished, wall_seconds=time.perf_counter() - t_begin)
    sync_loop.write_result(model_dir, metrics)
    with tf.io.gfile.GFile(os.path.join(model_dir, "async_workers.json"), "w") as f:
        json.dump({"closures_by_process": dict(inflight.by_process)}, f, indent=1)
    exp.inputs.extend([coordinator, closures])
    return metrics
