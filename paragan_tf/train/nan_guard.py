"""The NaN guard: one implementation, for a whole train step or one closure's update.

An update is applied only while the step is healthy, i.e. every loss and gradient
norm the step has computed so far is finite (judged on all-reduced values, so every
replica takes the same branch). A non-finite D update therefore skips the rest of
the step, G's update included, and a non-finite G gradient skips G's update (in the
default sequential order D's update of that step was already applied from finite
gradients). The forward passes also update state outside the optimizers
(spectral-norm power-iteration vectors, batch-norm moving statistics); a skipped step
puts that back too, or one NaN batch would poison them for good. Skipped steps are
reported as `health/skipped` and counted by train/bookkeeping.py.

Gradients are all-reduced by hand (then clipped, then applied with aggregation
skipped) so clipping by global norm acts on the global gradient, not on each
replica's part. How an update is applied is the parallel mode's business
(distribute/mode.py: on every replica, or Adam's moments sharded over them).

Dynamic loss scaling (mixed_float16, paragan_tf/precision.py): a float16 overflow is
non-finite: the guard skips that step like any other, and each network's Precision
updates its scale from the network's all-reduced gradients (halved on a non-finite one,
never below 1; doubled after `dynamic_growth_steps` finite ones in a row). A skip
that lowered a scale is reported as `health/loss_scale_lowered` (train/step.py): it
does not count toward train.max_consecutive_skips (train/bookkeeping.py). Not run on
a GPU here (none on this machine); on a CPU float16 is emulated: slow, not wrong.
"""

from __future__ import annotations

from typing import List

import tensorflow as tf
import tf_keras as keras

from paragan_tf.distribute import mode as mode_lib
from paragan_tf import precision as precision_lib


def all_reduce(loss: tf.Tensor, grads: List[tf.Tensor]):
    """Sums the loss and gradients over replicas; returns (loss, grads, finite, norm)."""
    ctx = tf.distribute.get_replica_context()
    reduced = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [loss] + list(grads))
    loss, grads = reduced[0], reduced[1:]
    # Any NaN or Inf in a gradient makes the global norm non-finite.
    norm = tf.linalg.global_norm(grads)
    finite = tf.logical_and(tf.math.is_finite(loss), tf.math.is_finite(norm))
    return loss, grads, finite, norm


def apply_if(healthy: tf.Tensor, mode: mode_lib.Mode, precision: precision_lib.Precision,
             grads: List[tf.Tensor], norm: tf.Tensor, variables, clip_norm: float = 0.0) -> None:
    """Applies all-reduced `grads` with the optimizer `precision` holds when `healthy`
    (identical on every replica), clipped to `clip_norm` (0: not), as `mode` applies an
    update; under loss scaling, also updates the scale from `grads`, applied or not."""
    if clip_norm > 0:
        grads, _ = tf.clip_by_global_norm(grads, clip_norm, use_norm=norm)
    mode.apply(healthy, precision, grads, variables)


class Guard:
    """The guard over one step (or one closure's update), made before its forward passes.

    `check` all-reduces an update's loss and gradients, and the step stays healthy only
    while everything checked is finite; `apply` applies an update only while healthy;
    `restore_if_skipped` puts `forward_state` back as it was when the guard was made,
    unless the step stayed healthy.
    """

    def __init__(self, forward_state: List[tf.Variable], mode: mode_lib.Mode = mode_lib.Mode(),
                 clip_norm: float = 0.0):
        self.forward_state, self.mode, self.clip_norm = forward_state, mode, clip_norm
        self.saved = [tf.identity(tf.convert_to_tensor(v)) for v in forward_state]
        self.healthy = tf.constant(True)

    def check(self, loss: tf.Tensor, grads: List[tf.Tensor]):
        """(all-reduced grads, their global norm); the step stays healthy if finite."""
        _, grads, finite, norm = all_reduce(loss, grads)
        self.healthy = tf.logical_and(self.healthy, finite)
        return grads, norm

    def apply(self, precision: precision_lib.Precision, model: keras.Model,
              grads: List[tf.Tensor], norm: tf.Tensor) -> None:
        apply_if(self.healthy, self.mode, precision, grads, norm, model.trainable_variables,
                 self.clip_norm)

    def update(self, precision: precision_lib.Precision, model: keras.Model, loss: tf.Tensor,
               grads: List[tf.Tensor]) -> tf.Tensor:
        """`check`, then `apply`; returns the gradient norm."""
        grads, norm = self.check(loss, grads)
        self.apply(precision, model, grads, norm)
        return norm

    def restore_if_skipped(self) -> None:
        for variable, saved in zip(self.forward_state, self.saved):
            # An unconditional assign: a tf.cond around it would hold a cross-replica
            # synchronisation point in replica context (see Mode.apply).
            variable.assign(tf.where(self.healthy, tf.convert_to_tensor(variable), saved))

    def skipped(self) -> tf.Tensor:
        """1.0 when the step was skipped, else 0.0 (the `health/skipped` metric)."""
        return 1.0 - tf.cast(self.healthy, tf.float32)
