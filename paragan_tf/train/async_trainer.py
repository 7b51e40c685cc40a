"""Asynchronous GAN training (ParaGAN) under ParameterServerStrategy.

This process is the coordinator; AsyncTrainer runs under the same Controller
as the synchronous trainer (train/controller.py, via train/driver.py), one round
per step. G, D,
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
nothing here are refused (train/combinations.py) or warned about by name in
`check_settings`):
- each worker reads its own shuffle of the data, seeded by its worker index
  (data/pipeline.py, per_worker); a resumed run starts fresh shuffles;
- the EMA generator is updated by the coordinator, once per finished G round, in
  round order (train/bookkeeping.py, as the synchronous trainer's steps): closures
  running at once never read-modify-write it together;
- the NaN guard skips a non-finite update inside its closure and puts back the
  forward state that closure's passes changed; the coordinator counts rounds
  with a skipped update (`health/skipped_steps`) and stops scheduling after
  `train.max_consecutive_skips` of them in a row (the controller raises Diverged).

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
import dataclasses
import threading
import time
from typing import Dict, Optional

from absl import logging
import numpy as np
import tensorflow as tf

from paragan_tf.data import tuning
from paragan_tf.distribute import cluster
from paragan_tf.errors import ConfigError
from paragan_tf.train import async_closures
from paragan_tf.train import combinations
from paragan_tf.train import config as config_lib
from paragan_tf.train import experiment as experiment_lib
from paragan_tf import teardown
from paragan_tf.train import trainer as trainer_lib


class _Watchdog(threading.Thread):
    """Exits the process when no round finishes for `timeout` seconds (from this thread:
    the main thread is blocked inside TensorFlow; teardown.exit_now still runs the
    binary's before-exit work, such as releasing the model_dir lock)."""

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
                teardown.exit_now(3)


class _InFlight:
    """Scheduled rounds, oldest first; finishing one collects its closures' results.

    Finishing round t (in order) counts its closures per worker process (all, and the D
    closures apart: only they read real images, so a worker slowed by its input shows
    there), adds its metrics to the log window, and does the step's bookkeeping (the NaN
    guard's counts, the EMA update from G, the step counter: train/bookkeeping.py).
    """

    def __init__(self, exp: experiment_lib.Experiment, finished: int, watchdog: _Watchdog):
        self.exp, self.finished, self.watchdog = exp, finished, watchdog
        self.rounds = collections.deque()
        self.window = collections.defaultdict(list)
        self.by_process = collections.Counter()
        self.d_by_process = collections.Counter()
        self.consecutive = int(exp.health.consecutive.numpy())
        self.max_skips = exp.settings.train.max_consecutive_skips
        self._finish = tf.function(exp.bookkeeping.finish, autograph=False)

    @property
    def diverging(self) -> bool:
        return self.consecutive >= self.max_skips

    def __len__(self) -> int:
        return len(self.rounds)

    def add(self, values: list) -> None:
        self.rounds.append(values)

    def finish_oldest(self) -> None:
        skipped = False
        values = self.rounds.popleft()  # d_steps D closures, then the G closure
        for position, value in enumerate(values):
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
            process = out.pop("process").decode()
            self.by_process[process] += 1
            if position < len(values) - 1:
                self.d_by_process[process] += 1
            skipped = skipped or out.pop("health/skipped") > 0.5
            for key, metric in out.items():
                if np.isfinite(metric):
                    self.window[key].append(metric)
        # G update number `finished` is in (or skipped): the step's bookkeeping.
        self.consecutive = int(self._finish(tf.constant(skipped)))
        self.finished += 1
        self.watchdog.last = time.monotonic()

    def drain(self) -> None:
        """Finishes every round in flight (up to the limit of skips in a row)."""
        while self.rounds and not self.diverging:
            self.finish_oldest()

    def take_window(self) -> Dict[str, float]:
        """Mean metrics of the rounds finished since the last call."""
        metrics = {key: float(np.mean(v)) for key, v in self.window.items()}
        self.window.clear()
        return metrics


def _describe(exp: experiment_lib.Experiment, start: int) -> None:
    options = exp.settings.async_train
    spec = cluster.resolver(exp.settings.cluster).cluster_spec().as_dict()
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
                 exp.settings.train.total_steps, len(spec.get("worker", [])),
                 len(spec.get("ps", [])), exp.settings.train.batch_size, staleness,
                 dict(placement), len(sharded))


def check_settings(exp: experiment_lib.Experiment) -> None:
    """Refuses (train/combinations.py's parameter-server rows), or warns about, every setting
    the asynchronous trainer cannot honour."""
    cfg, options = exp.settings.train, exp.settings.async_train
    combinations.refuse(exp.settings, "parameter_server")
    exp.family.refuse(dataclasses.replace(exp.settings, strategy=dataclasses.replace(
        exp.settings.strategy, kind="parameter_server")))
    if exp.objective.pairs_real or exp.objective.reuses_fakes:  # a family that did not refuse
        raise ConfigError(f"strategy.kind='parameter_server' cannot train the GAN family "
                          f"{exp.family.name!r} as it is set: its G update reads a real batch "
                          f"or D's images, and an asynchronous G closure has neither")
    train_default = config_lib.defaults(config_lib.TrainConfig)
    ignored = {
        "train.steps_per_loop": (cfg.steps_per_loop, train_default["steps_per_loop"],
                                 "each closure is one update, scheduled on its own"),
        "train.resume_input": (cfg.resume_input, train_default["resume_input"],
                               "a resumed asynchronous run starts fresh shuffles on every "
                               "worker (which worker read which batch is not recorded)"),
        "train.deterministic": (cfg.deterministic, train_default["deterministic"],
                                "closures run in whatever order the workers finish them"),
    }
    # The staleness bound of the other mode (its default is no setting of the user's).
    other = ("max_staleness" if options.mode == "sample_buffer" else "buffer_depth")
    ignored[f"async_train.{other}"] = (
        getattr(options, other), config_lib.defaults(config_lib.AsyncConfig)[other],
        f"async_train.mode={options.mode!r} (buffer_depth bounds the rounds in flight of "
        f"'sample_buffer', max_staleness those of 'closures')")
    for name, (value, default, why) in ignored.items():
        if value != default:
            logging.warning("%s=%r does not apply under strategy.kind='parameter_server': "
                            "%s", name, value, why)
    inputs = exp.settings.inputs
    if inputs.tuned and inputs.adaptive:
        logging.info("input tuning is not adaptive under parameter_server: workers read "
                     "with the starting settings %s", tuning.InputTuner(inputs).tuning)


class AsyncTrainer(trainer_lib.Trainer):
    """Asynchronous training of an Experiment on a parameter-server cluster, for the Controller.

    A step is a round: `train(1)` schedules it, waiting first for the oldest round in
    flight when the staleness bound is reached, and reports the rounds collected in
    order meanwhile; `state()` waits for all (the checkpoint's barrier). It schedules
    nothing more once train.max_consecutive_skips rounds in a row were skipped.
    """

    unit = "round"
    record_file = "async_workers.json"

    def __init__(self, exp: experiment_lib.Experiment):
        super().__init__(exp)
        self.options = exp.settings.async_train
        self.coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(
            exp.strategy)
        self.closures: async_closures.Closures = None
        self.inflight: _InFlight = None
        self.scheduled = 0
        self.repeated = 0  # G updates applied twice (a re-run closure), known when settled

    def _begin(self) -> None:
        start = self.scheduled = int(self.exp.step.numpy())
        self.closures = async_closures.Closures(self.exp, self.coordinator, start, self.options)
        # Started once the first round is scheduled (`train`): tracing the closures is the
        # coordinator's own work, minutes for a large model, not a sign of a lost server.
        watchdog = _Watchdog(self.options.stall_timeout_secs)
        self.inflight = _InFlight(self.exp, start, watchdog)
        _describe(self.exp, start)
        if start:
            logging.info("resumed asynchronous run: every worker starts a fresh shuffle")
        if self.closures.buffer is not None:
            self.closures.fill_buffer()

    def _progress(self, before: int) -> trainer_lib.Progress:
        return trainer_lib.Progress(self.inflight.finished, self.inflight.finished - before,
                                    self.inflight.take_window(), self.inflight.consecutive)

    def train(self, num_steps: int) -> trainer_lib.Progress:
        if self.inflight is None:
            self._begin()
        before = self.inflight.finished
        for _ in range(num_steps):
            while len(self.inflight) >= self.options.rounds_in_flight and \
                    not self.inflight.diverging:
                self.inflight.finish_oldest()
            if self.inflight.diverging:
                break
            self.inflight.add(self.closures.schedule(self.scheduled))
            self.scheduled += 1
            if not self.inflight.watchdog.is_alive():
                self.inflight.watchdog.last = time.monotonic()
                self.inflight.watchdog.start()
        return self._progress(before)

    def state(self) -> trainer_lib.Progress:
        if self.inflight is None:
            return super().state()
        before = self.inflight.finished
        self.inflight.drain()
        self.repeated = int(self.exp.g_optimizer.iterations.numpy()) - self.inflight.finished
        return self._progress(before)

    def levels(self) -> Dict[str, float]:
        levels = super().levels()
        levels["async/repeated_g_updates"] = float(self.repeated)
        if self.inflight is not None:
            levels["async/rounds_in_flight"] = float(len(self.inflight))
        return levels

    def end_window(self) -> None:
        if self.inflight is not None:
            logging.info("closures by worker process: %s", dict(self.inflight.by_process))

    def record(self) -> Optional[Dict[str, object]]:
        if self.inflight is None:
            return None
        return {"step": self.inflight.finished,
                "closures_by_process": dict(self.inflight.by_process),
                "d_closures_by_process": dict(self.inflight.d_by_process)}

    def close(self) -> None:
        teardown.park(self.closures)  # its per-worker iterators (paragan_tf/teardown.py)
        self.closures = None  # the count of finished rounds stays
