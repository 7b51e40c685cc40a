"""One network's precision as its update sees it: whether its loss is scaled, and how.

Under `layout.precision='mixed_float16'` each network's optimizer is tf_keras' dynamic
`LossScaleOptimizer` (train/optimizers.py makes it): the loss is multiplied by a scale
before the backward pass and the gradients divided by it after, so small float16
gradients do not flush to zero. float32 and mixed_bfloat16 scale nothing. A `Precision`
answers, for one network, what the step (scale, unscale, the scale before and after an
update), the NaN guard (update the scale from a step's gradients; apply through the
optimizer the wrapper holds) and the trainers (the scale's level) ask, so no other module
tells the precisions apart or touches tf_keras' loss-scale state.
"""

from __future__ import annotations

from typing import List, Optional

import tensorflow as tf
import tf_keras as keras


class Precision:
    """The loss scaling of the network that `optimizer` updates (none but under float16)."""

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self._scaler = (optimizer if isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer)
                        else None)
        # What applies an update: the wrapper's own apply_gradients would decide the skip
        # itself, and the NaN guard decides it from the whole step (train/nan_guard.py).
        self.inner = optimizer if self._scaler is None else self._scaler.inner_optimizer

    @property
    def scaling(self) -> bool:
        """Whether the loss is scaled (mixed_float16)."""
        return self._scaler is not None

    @property
    def loss_scale(self) -> Optional[tf.Tensor]:
        """The current scale (None without scaling)."""
        return None if self._scaler is None else self._scaler.loss_scale

    def scale(self, loss: tf.Tensor) -> tf.Tensor:
        """`loss` times the scale."""
        return loss if self._scaler is None else self._scaler.get_scaled_loss(loss)

    def unscale(self, grads: List[tf.Tensor]) -> List[tf.Tensor]:
        """Gradients of a `scale`d loss divided by the scale."""
        return grads if self._scaler is None else self._scaler.get_unscaled_gradients(grads)

    def update(self, grads: List[tf.Tensor]) -> None:
        """tf_keras' dynamic rule from one update's all-reduced, unscaled `grads`, applied
        or not: the scale halves on a non-finite one (never below 1) and doubles after
        `dynamic_growth_steps` finite ones in a row. Call in cross-replica context."""
        if self._scaler is not None:
            # The rule lives on the wrapper's scale object; the wrapper's public entry
            # (apply_gradients) would also apply the update, which is the guard's to decide.
            self._scaler._loss_scale.update(grads)  # pylint: disable=protected-access

    def set_scale(self, value: float) -> None:
        """Sets the current scale (what a restore or an operator would reset it to)."""
        if self._scaler is None:
            raise ValueError("no loss scale: the optimizer is not float16's")
        self._scaler._loss_scale.current_loss_scale.assign(value)  # pylint: disable=protected-access

    def lowered(self, before: Optional[tf.Tensor]) -> tf.Tensor:
        """Whether the scale is below `before` (its value read before an update): the
        update overflowed. False without scaling."""
        if self._scaler is None:
            return tf.constant(False)
        return self._scaler.loss_scale < before


def differs_across_precisions(path: str) -> bool:
    """Whether a checkpoint's object at `path` belongs to one precision only: an
    optimizer's loss scale (`g_optimizer/loss_scale/current_loss_scale`, `.../good_steps`),
    which a run that moves to or from float16 gains or loses (train/checkpoints.py)."""
    return path.split("/")[1:2] == ["loss_scale"]
