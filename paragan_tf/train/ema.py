"""Exponential moving average of the generator's weights (BigGAN's G_ema).

Trainable weights are averaged; the non-trainable state (BN moving statistics,
spectral-norm `u` vectors) is copied from G, as StyleGAN2-ADA does with its
buffers: those describe activations of the current G, and an average of past
statistics would not match the averaged weights any better. Before
`start_step`, the EMA generator simply tracks G (BigGAN's ema_start).

The decay per update is either fixed (`decay`, BigGAN's 0.9999) or follows from a
half-life in images, as StyleGAN2-ADA sets it (`ema_kimg`): after an update on
`images_per_update` images the old average keeps 0.5 ** (images_per_update /
half_life) of its weight, so the same half-life means the same averaging at batch
32 and at batch 2,048, under any strategy. With a ramp-up the half-life is at most
`rampup` times the images G has trained on so far (StyleGAN2-ADA's ema_rampup,
0.05): early on the average follows G closely, later it looks back the full
half-life.

Runs in cross-replica context (inside the loop's tf.function, outside
strategy.run): every replica's copy gets the same value.
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras as keras


class GeneratorEMA:
    """Keeps `average` as the EMA of `source`; both must be built with the same architecture."""

    def __init__(self, source: keras.Model, average: keras.Model, decay: float,
                 start_step: int, half_life_images: float = 0.0, images_per_update: int = 0,
                 rampup: float = 0.0):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"train.ema_decay={decay} must be in [0, 1)")
        if half_life_images and images_per_update <= 0:
            raise ValueError("a half-life in images needs the images per update")
        self.source, self.average = source, average
        self.decay, self.start_step = decay, start_step
        self.half_life_images, self.images_per_update = half_life_images, images_per_update
        self.rampup = rampup

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

    def decay_at(self, step: tf.Tensor) -> tf.Tensor:
        """The decay of the EMA step after G update number `step` (0-based)."""
        decay = tf.constant(self.decay, tf.float32)
        if self.half_life_images:
            half_life = tf.constant(self.half_life_images, tf.float32)
            if self.rampup:  # the images G trained on before this update, times rampup
                seen = tf.cast(step, tf.float32) * float(self.images_per_update)
                half_life = tf.minimum(half_life, seen * self.rampup)
            decay = tf.pow(0.5, float(self.images_per_update) / tf.maximum(half_life, 1e-8))
        return tf.where(tf.cast(step, tf.int64) < self.start_step, 0.0, decay)

    def update(self, step: tf.Tensor) -> None:
        """One EMA step after G update number `step` (0-based)."""
        if not (self.decay or self.half_life_images):  # no average (pix2pix's): a copy,
            self.copy()  # not three passes over G's weights that give the same
            return
        decay = self.decay_at(step)
        for a, s in self._pairs(True):
            a.assign(decay * a + (1.0 - decay) * s)
        for a, s in self._pairs(False):
            a.assign(s)
