"""Regularisers of D's outputs, added to D's loss: R1, R2, LeCam and bCR.

Each is a formula on D's logits (or on the gradient of D's logits with respect
to its input) returning per-example terms, which the step averages over the
global batch as it does the loss. They are computed in float32 whatever the
layout: the logits are float32 already (models/layers.py), and the input
gradients of R1/R2, the second backward pass where mixed-precision NaNs
appear, are taken with respect to a float32 copy of the images D saw
(augmented, when augmentation is on) and squared and summed in float32. D's
convolutions inside that pass keep the layout's precision: under bfloat16,
which has float32's exponent range, nothing overflows; under mixed_float16 (5
exponent bits) the step takes that gradient of D's logits times D's dynamic loss
scale (over the update's examples) and divides it back in float32 (train/step.py,
as StyleGAN's TensorFlow code does), so it does not underflow, and an overflow
halves the scale. Select them in gin:

  penalties.r1_gamma = 0.1          # R1 (Mescheder et al. 2018) on real images
  penalties.r2_gamma = 0.1          # R2: the same on generated images
  penalties.lazy_interval = 16      # StyleGAN2's lazy regularisation (every k-th D update, x k)
  penalties.lecam_weight = 0.3      # LeCam (Tseng et al. 2021)
  penalties.lecam_decay = 0.99
  penalties.bcr_real = 10.0         # balanced consistency (Zhao et al. 2021)
  penalties.bcr_fake = 10.0
"""

from __future__ import annotations

import dataclasses

import gin
import tensorflow as tf

from paragan_tf.errors import ConfigError


def gradient_penalty(input_gradients: tf.Tensor, gamma: float) -> tf.Tensor:
    """R1/R2 per example: gamma / 2 * ||d D(x) / d x||^2 (Mescheder et al. 2018, eq. 9)."""
    squares = tf.square(tf.cast(input_gradients, tf.float32))
    return 0.5 * gamma * tf.reduce_sum(squares, axis=list(range(1, squares.shape.rank)))


def lecam(real_logits: tf.Tensor, fake_logits: tf.Tensor, ema_real: tf.Tensor,
          ema_fake: tf.Tensor, weight: float) -> tf.Tensor:
    """LeCam per example: weight * (relu(D(x) - a_F)^2 + relu(a_R - D(G(z)))^2).

    a_R, a_F: moving averages of D's real and fake outputs. The paper writes the
    squares without the relu; its code (google/lecam-gan, `lecam_reg`) has it, and
    its numbers come from the code, so we follow the code: only real outputs above
    the fake average and fake outputs below the real average are pulled in.
    """
    real = tf.nn.relu(tf.cast(real_logits, tf.float32) - ema_fake)
    fake = tf.nn.relu(ema_real - tf.cast(fake_logits, tf.float32))
    return weight * (tf.square(real) + tf.square(fake))


def consistency(logits: tf.Tensor, augmented_logits: tf.Tensor, weight: float) -> tf.Tensor:
    """bCR per example: weight * (D(x) - D(T(x)))^2 (Zhao et al. 2021), T a random augmentation."""
    return weight * tf.square(tf.cast(logits, tf.float32) - tf.cast(augmented_logits, tf.float32))


@gin.configurable("penalties")
@dataclasses.dataclass(frozen=True, kw_only=True)
class Penalties:
    """D's output regularisers (`penalties.*` in gin; all off by default): see the module doc."""

    r1_gamma: float = 0.0
    r2_gamma: float = 0.0
    lazy_interval: int = 1
    lecam_weight: float = 0.0
    lecam_decay: float = 0.99
    bcr_real: float = 0.0
    bcr_fake: float = 0.0

    def __post_init__(self):
        weights = ("r1_gamma", "r2_gamma", "lecam_weight", "bcr_real", "bcr_fake")
        negative = [f"penalties.{k}={getattr(self, k)}" for k in weights if getattr(self, k) < 0]
        if negative:
            raise ConfigError(f"{', '.join(negative)}: a penalty weight must be >= 0")
        if self.lazy_interval < 1:
            raise ConfigError(f"penalties.lazy_interval={self.lazy_interval} must be >= 1")
        if self.lazy_interval > 1 and not self.input_gradients:
            raise ConfigError(f"penalties.lazy_interval={self.lazy_interval} spaces out R1 "
                              f"and R2, but both are off (r1_gamma, r2_gamma = 0)")
        if not 0.0 <= self.lecam_decay < 1.0:
            raise ConfigError(f"penalties.lecam_decay={self.lecam_decay} must be in [0, 1)")

    @property
    def input_gradients(self) -> bool:
        return self.r1_gamma > 0 or self.r2_gamma > 0

    @property
    def any(self) -> bool:
        return self.input_gradients or self.lecam_weight > 0 or self.bcr

    @property
    def bcr(self) -> bool:
        return self.bcr_real > 0 or self.bcr_fake > 0
