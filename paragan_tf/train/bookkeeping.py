"""What follows every finished train step, in both trainers: one place.

After a step's updates (applied or skipped by the NaN guard, train/step.py) come
the NaN guard's counts (steps skipped in all and in a row), the EMA generator's
update and the step counter. The synchronous trainer calls `finish` inside its
tf.function, once per step; the asynchronous one calls it on the coordinator for
each round as rounds finish, in order. Both stop when `diverging` says so, and the
controller turns the count of skips in a row into Diverged (train/controller.py).

Under mixed_float16's dynamic loss scaling a float16 overflow is skipped and counted
like any other non-finite step, but a skip that lowered a loss scale does not add to
the run of consecutive skips: that is the scale finding its level (from 2**15, a few
halvings at the start, one after each doubling), not divergence. A non-finite step
that lowered no scale counts, so a run whose scales are down to 1 (the least
tf_keras keeps) stops as a float32 run would, at most ~15 halvings per network later.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from paragan_tf.train import ema as ema_lib


@dataclasses.dataclass
class Health:
    """The NaN guard's counters (checkpointed): steps skipped in all, and in a row."""

    skipped: tf.Variable
    consecutive: tf.Variable


class StepBookkeeping:
    """Counts a finished step's skip, updates the EMA generator, advances the step."""

    def __init__(self, step: tf.Variable, health: Health, ema: ema_lib.GeneratorEMA,
                 max_consecutive_skips: int):
        self.step, self.health, self.ema = step, health, ema
        self.max_skips = max_consecutive_skips

    def finish(self, skipped: tf.Tensor, lowered_loss_scale=False) -> tf.Tensor:
        """After one step whose update was `skipped` (bool) or applied; returns the skips
        in a row. `lowered_loss_scale`: the skip lowered a float16 loss scale (module doc)."""
        health = self.health
        with tf.control_dependencies([skipped]):
            health.skipped.assign_add(tf.cast(skipped, tf.int64))
            diverging = tf.logical_and(skipped, tf.logical_not(lowered_loss_scale))
            consecutive = health.consecutive.assign(tf.where(
                skipped, health.consecutive + tf.cast(diverging, tf.int64), 0))
        self.ema.update(self.step)
        self.step.assign_add(1)
        return consecutive

    def diverging(self) -> tf.Tensor:
        """True once train.max_consecutive_skips steps in a row were skipped."""
        return self.health.consecutive.read_value() >= self.max_skips
