"""Stopping on a signal: a checkpoint first, then errors.Interrupted.

A single process (and SIGINT everywhere): SignalFlag turns SIGTERM/SIGINT into a
flag the controller checks between trainer calls. A MultiWorkerMirrored run
leaves SIGTERM to TensorFlow, so that every worker checkpoints at one step:
TensorFlow's PreemptionCheckpointHandler watches for SIGTERM on each worker,
agrees through the coordination service on the step at which all workers
save, and calls our save function there; we then raise Interrupted instead of
its default exit(42), so the binary exits 143 like a single-process run.

The handler counts its calls; that count is stored in the checkpoint and
must be the same on every worker, so its reads go through a manager over
model_dir on every worker (the chief's files), while writes go through our
Checkpointer (chief to model_dir, others to scratch).
"""

from __future__ import annotations

import signal
from typing import Callable, Optional

from absl import logging
import tensorflow as tf

from paragan_tf.errors import Interrupted
from paragan_tf.train import checkpoints


class MultiWorkerPreemption:
    """Call `check(step)` once per controller iteration on every worker."""

    def __init__(self, strategy: tf.distribute.Strategy, ckpt: checkpoints.Checkpointer,
                 max_to_keep: int, current_step: Callable[[], int]):
        self._ckpt, self._current_step = ckpt, current_step
        reader = tf.train.CheckpointManager(ckpt.checkpoint, ckpt.model_dir,
                                            max_to_keep=max_to_keep, checkpoint_name="ckpt")
        config = tf.distribute.experimental.TerminationConfig(
            exit_fn=self._exit, save_fn=self._save, grace_period=0)
        try:
            self._handler = tf.distribute.experimental.PreemptionCheckpointHandler(
                strategy.cluster_resolver, reader, termination_config=config)
        except checkpoints.RESTORE_ERRORS as e:
            raise checkpoints.mismatch_error(reader.latest_checkpoint, e) from None

    def _save(self, step: int) -> None:
        if self._ckpt.saved_step != step:
            self._ckpt.save(step)

    def _exit(self) -> None:
        raise Interrupted(signal.SIGTERM, self._current_step())

    def check(self, step: int) -> None:
        """Saves and raises Interrupted once any worker was told to stop."""
        self._handler.save_checkpoint_if_preempted(step)


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
