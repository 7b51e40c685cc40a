"""The precision policies (`layout.precision`) and one network's precision as its update
sees it: the one module that tells the policies apart.

A `Policy` says what a policy is: the tf_keras mixed-precision policy it sets (layout/rules.py's
apply), the datasheet peak its matrix work runs at (the scale plan, scale/devices.py), and
how its optimizers are made (`wrap`): under `mixed_float16` each network's optimizer is
tf_keras' dynamic `LossScaleOptimizer`, so the loss is multiplied by a scale before the
backward pass and the gradients divided by it after (small float16 gradients do not flush
to zero); float32 and mixed_bfloat16 scale nothing.

A `Precision` answers, for one network, what the step (scale, unscale, the scale before and
after an update), the NaN guard (update the scale from a step's gradients; apply through the
optimizer the wrapper holds) and the trainers (the scale's level) ask, so no other module
touches tf_keras' loss-scale state; `differs_across_precisions` says what a checkpoint may
gain or lose across policies (train/checkpoints.py).

A new policy is a `Policy` in `POLICIES` (with its own `wrap` if it wraps differently) and
its test.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional

from absl import logging
import tensorflow as tf
import tf_keras as keras

from paragan_tf.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Policy:
    """One `layout.precision` policy.

    keras_policy: the tf_keras global policy it sets (variables stay float32 under each).
    peak: the datasheet peak its matrix work runs at: 'fp32', 'bf16' or 'fp16'.
    loss_scaling: whether each network's loss is dynamically scaled.
    """

    name: str
    keras_policy: str
    peak: str
    loss_scaling: bool = False

    def wrap(self, optimizer, network: str, initial_scale: float, growth_steps: int):
        """`optimizer` as this policy updates with it (call in strategy.scope()): itself, or
        in a dynamic LossScaleOptimizer from `initial_scale`, doubled after `growth_steps`
        finite updates in a row. ConfigError under a strategy tf_keras cannot scale under."""
        if not self.loss_scaling:
            return optimizer
        strategy = tf.distribute.get_strategy()
        if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
            raise ConfigError(f"layout.precision={self.name!r} is not available under "
                              f"strategy.kind='parameter_server': tf_keras' dynamic loss "
                              f"scaling does not support ParameterServerStrategy; use "
                              f"'mixed_bfloat16' or 'float32'")
        try:
            wrapped = keras.mixed_precision.LossScaleOptimizer(
                optimizer, dynamic=True, initial_scale=initial_scale,
                dynamic_growth_steps=growth_steps)
        except ValueError as e:  # a strategy tf_keras cannot loss-scale under (TPU, ...)
            raise ConfigError(f"layout.precision={self.name!r} is not available under "
                              f"{type(strategy).__name__}: {e}") from None
        logging.info("%s: dynamic loss scaling (%s), from %g, doubled after %d finite "
                     "updates in a row", network, self.name, initial_scale, growth_steps)
        return wrapped


POLICIES: Dict[str, Policy] = {p.name: p for p in (
    Policy("float32", "float32", "fp32"),
    Policy("mixed_bfloat16", "mixed_bfloat16", "bf16"),
    # float16 tensor cores without bfloat16 (V100, T4); emulated on CPUs: slow, not wrong.
    Policy("mixed_float16", "mixed_float16", "fp16", loss_scaling=True),
)}


def policy(name: str) -> Policy:
    """The policy `layout.precision=name` names (ConfigError names the choices)."""
    if name not in POLICIES:
        raise ConfigError(f"layout.precision={name!r}; choose one of {('auto', *POLICIES)}")
    return POLICIES[name]


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
