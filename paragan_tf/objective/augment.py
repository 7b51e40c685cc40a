"""Differentiable augmentation of every image D sees (DiffAugment, Zhao et al. 2020).

On a small dataset D memorises the real images and G collapses. DiffAugment
transforms real *and* generated images with the same differentiable ops
whenever D sees them (its own updates and G's), so D never sees an
un-augmented image and G's gradient flows through the transform:
`augment.policy = 'color,translation,cutout'`.

The transforms follow the reference (mit-han-lab/data-efficient-gans,
DiffAugment_tf.py) on images in [-1, 1], channels last:
  color        brightness x + (u - 0.5); saturation (x - m_c) * 2u + m_c with m_c the
               channel mean of each pixel; contrast (x - m) * (u + 0.5) + m with m the
               image mean; u ~ U[0, 1) per image, drawn separately for each
  translation  an integer shift per image and axis, uniform in [-s, s] with
               s = round(size / 8); pixels shifted in are 0
  cutout       a square of round(size / 2) pixels set to 0, centred at a uniform
               position (it may hang over the border)

Randomness is stateless and keyed by the batch's own noise vectors: every
replica, step and micro-batch gets its own draws without any state to
checkpoint or all-reduce, and a resumed run draws exactly what the
uninterrupted one would have (its noise stream is a pure function of the step).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Iterator, Optional, Sequence, Tuple

import gin
import tensorflow as tf

from paragan_tf.errors import ConfigError


def brightness(x: tf.Tensor, u: tf.Tensor) -> tf.Tensor:
    return x + (u - 0.5)


def saturation(x: tf.Tensor, u: tf.Tensor) -> tf.Tensor:
    mean = tf.reduce_mean(x, axis=3, keepdims=True)
    return (x - mean) * (2.0 * u) + mean


def contrast(x: tf.Tensor, u: tf.Tensor) -> tf.Tensor:
    mean = tf.reduce_mean(x, axis=[1, 2, 3], keepdims=True)
    return (x - mean) * (u + 0.5) + mean


def _shift_axis(x: tf.Tensor, shift: tf.Tensor, axis: int) -> tf.Tensor:
    """out[..., i, ...] = x[..., i + shift, ...] along `axis` (1 or 2), 0 outside."""
    size = x.shape[axis]
    padded = tf.pad(x, [[0, 0]] + [[1, 1] if a == axis else [0, 0] for a in (1, 2)] + [[0, 0]])
    # Padded index i + shift + 1 clipped onto a padding row: a zero.
    index = tf.clip_by_value(tf.range(size)[None, :] + shift[:, None] + 1, 0, size + 1)
    return tf.gather(padded, index, axis=axis, batch_dims=1)


def translation(x: tf.Tensor, shift_y: tf.Tensor, shift_x: tf.Tensor) -> tf.Tensor:
    """Shifts image b by (shift_y[b], shift_x[b]) pixels (int32), zeros shifted in."""
    return _shift_axis(_shift_axis(x, shift_y, 1), shift_x, 2)


def cutout(x: tf.Tensor, centre_y: tf.Tensor, centre_x: tf.Tensor, size_y: int,
           size_x: int) -> tf.Tensor:
    """Zeroes a size_y x size_x square of image b whose corner is centre - size // 2."""
    def inside(centre, size, length):
        start = centre[:, None] - size // 2
        position = tf.range(length)[None, :]
        return tf.logical_and(position >= start, position < start + size)  # [batch, length]
    rows = inside(centre_y, size_y, x.shape[1])
    cols = inside(centre_x, size_x, x.shape[2])
    hole = tf.logical_and(rows[:, :, None], cols[:, None, :])[..., None]
    return x * tf.cast(tf.logical_not(hole), x.dtype)


class DiffAugment:
    """The policy's transforms, applied to a batch with draws from a 2-int seed."""

    POLICIES = ("color", "translation", "cutout")

    def __init__(self, policy: Sequence[str]):
        unknown = [p for p in policy if p not in self.POLICIES]
        if unknown:
            raise ConfigError(f"augment.policy names {unknown}; choose from "
                              f"{', '.join(self.POLICIES)} (comma-separated)")
        self.policy = tuple(policy)

    def __call__(self, x: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        batch, height, width = tf.shape(x)[0], x.shape[1], x.shape[2]
        draws = keys(seed)

        def uniform(shape, low=0.0, high=1.0, dtype=tf.float32):
            return tf.random.stateless_uniform(shape, next(draws), low, high, dtype=dtype)
        for part in self.policy:
            if part == "color":
                for transform in (brightness, saturation, contrast):
                    x = transform(x, tf.cast(uniform([batch, 1, 1, 1]), x.dtype))
            elif part == "translation":
                sy, sx = int(height * 0.125 + 0.5), int(width * 0.125 + 0.5)
                x = translation(x, uniform([batch], -sy, sy + 1, tf.int32),
                                uniform([batch], -sx, sx + 1, tf.int32))
            else:  # cutout; the reference's centre range, odd sizes one row shorter
                cy, cx = int(height * 0.5 + 0.5), int(width * 0.5 + 0.5)
                x = cutout(x, uniform([batch], 0, height + 1 - cy % 2, tf.int32),
                           uniform([batch], 0, width + 1 - cx % 2, tf.int32), cy, cx)
        return x


def keys(seed: tf.Tensor, stride: int = 1) -> Iterator[tf.Tensor]:
    """One stateless-random seed per draw of a transform pipeline, all from `seed`."""
    for n in itertools.count(1):
        yield tf.stack([seed[0], seed[1] + stride * n])


def consistency_transform(x: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """bCR's T (Zhao et al. 2021): a random horizontal flip and a translation of 1/8."""
    flip = tf.random.stateless_uniform([tf.shape(x)[0], 1, 1, 1], seed) < 0.5
    x = tf.where(flip, tf.reverse(x, axis=[2]), x)
    return DiffAugment(["translation"])(x, tf.stack([seed[0], seed[1] + 1000]))


def seed_from(noise: tf.Tensor, salt: int) -> tf.Tensor:
    """A stateless-random seed from a batch's noise vectors (see the module doc)."""
    bits = tf.bitcast(tf.cast(tf.reshape(noise, [-1])[:2], tf.float32), tf.int32)
    return tf.stack([bits[0], bits[1] ^ salt])


@gin.configurable("augment")
@dataclasses.dataclass(frozen=True, kw_only=True)
class AugmentConfig:
    """What D's inputs go through (`augment.*` in gin); nothing unless configured. One of:

    Attributes:
      policy: DiffAugment's comma-separated transforms, e.g. 'color,translation,cutout'.
      ada_target: ADA's target for r_t = E[sign(D(real))] (the reference's 0.6); turns
        ADA on (ada.py).
      ada_interval: D updates between ADA's adjustments of p.
      ada_speed_kimg: thousand real images over which p can move from 0 to 1.
    """

    policy: str = ""
    ada_target: Optional[float] = None
    ada_interval: int = 4
    ada_speed_kimg: float = 500.0

    def __post_init__(self):
        if self.transforms:
            DiffAugment(self.transforms)  # names checked before any work
        if self.transforms and self.ada_target is not None:
            raise ConfigError(f"augment.policy={self.policy!r} and augment.ada_target="
                              f"{self.ada_target} are alternatives: DiffAugment's fixed "
                              f"transforms or ADA's adaptive ones; set one")
        if self.ada_target is not None and not -1.0 < self.ada_target < 1.0:
            # r_t = E[sign(D(real))] lies in [-1, 1]
            raise ConfigError(f"augment.ada_target={self.ada_target} must be in (-1, 1)")
        if self.ada_interval < 1 or self.ada_speed_kimg <= 0:
            raise ConfigError(f"augment.ada_interval={self.ada_interval} must be >= 1 and "
                              f"augment.ada_speed_kimg={self.ada_speed_kimg} > 0")

    @property
    def transforms(self) -> Tuple[str, ...]:
        """DiffAugment's transforms, in order (empty: no DiffAugment)."""
        return tuple(p.strip() for p in self.policy.split(",") if p.strip())
