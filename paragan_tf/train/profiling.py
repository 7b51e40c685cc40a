"""tf.profiler over a few train steps of a run (`train.profile_steps`), for TensorBoard."""

from __future__ import annotations

from typing import Optional

from absl import logging
import tensorflow as tf


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
