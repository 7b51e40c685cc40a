"""Exponential moving average of the generator's weights (BigGAN's G_ema).

Trainable weights are averaged; the non-trainable state (BN moving statistics,
spectral-norm `u` vectors) is copied from G, as StyleGAN2-ADA does with its
buffers: those describe activations of the current G, and an average of past
statistics would not match the averaged weights any better. Before
`start_step`, the EMA generator simply tracks G (BigGAN's ema_start).

Runs in cross-replica context (inside the loop's tf.function, outside
strategy.run): every replica's copy gets the same value.
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras as keras


class GeneratorEMA:
    """Keeps `average` as the EMA of `source`; both must be built with the same architecture."""

    def __init__(self, source: keras.Model, average: keras.Model, decay: float,
                 start_step: int):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"train.ema_decay={decay} must be in [0, 1)")
        self.source, self.average = source, average
        self.decay, self.start_step = decay, start_step

    def _pairs(self, trainable: bool):
        a = self.average.trainable_variables if trainable else self.average.non_trainable_variables
        s = self.source.trainable_variables if trainable else self.source.non_trainable_variables
        if len(a) != len(s):
            raise ValueError("EMA generator and generator have different variables")
        return zip(a, s)

    def copy(self) -> None:
        """average := source, all variables."""
        for a, s in list(self._pairs(True)) + list(self._pairs(False)):
            a.assign(s)

    def update(self, step: tf.Tensor) -> None:
        """One EMA step after G update number `step` (0-based)."""
        decay = tf.where(tf.cast(step, tf.int64) < self.start_step, 0.0, self.decay)
        for a, s in self._pairs(True):
            a.assign(decay * a + (1.0 - decay) * s)
        for a, s in self._pairs(False):
            a.assign(s)
