"""Adaptive discriminator augmentation (ADA, Karras et al. 2020).

Every image D sees goes through a pipeline of transforms, each applied to each
image with probability p; p follows the overfitting heuristic
r_t = E[sign(D(real))] (0: D cannot tell real from fake; 1: D is sure of every
real image): every `interval` D updates, p moves by sign(r_t - target) x the
real images seen since the last adjustment / (speed_kimg x 1000), so p can go
from 0 to 1 in `speed_kimg` thousand images. p and r_t are logged
(`augment/p`, `augment/rt`), saved in the checkpoint and restored on resume (the
reference restarted them from 0 on resume), and computed from all-reduced sums,
so every replica uses the same p. `augment.ada_target = 0.6` turns it on.

The pipeline (on images in [-1, 1], channels last), following the reference's
'bgc' choices where they overlap: x-flip, 90-degree rotations (square images),
integer translation by up to 1/8 of the size, isotropic scaling 2^N(0, 0.2^2),
anisotropic scaling (x by 2^N(0, 0.2^2), y by its inverse), both by bilinear
resampling, brightness + N(0, 0.2^2), contrast x 2^N(0, 0.5^2) and saturation
x 2^N(0, 1) about the luma axis (nothing for one channel), and cutout of half
the size. Geometric transforms read outside the image by mirroring it, as the
reference pads. Every op is differentiable in the image, so G's gradient passes
through. Draws are stateless, keyed as DiffAugment's (augment.py).
"""

from __future__ import annotations

import tensorflow as tf

from paragan_tf.objective import augment as augment_lib


def _mirror(index: tf.Tensor, size: int) -> tf.Tensor:
    """Indices outside [0, size) reflected back in (..., 2, 1, 0, 1, 2, ...)."""
    if size == 1:
        return tf.zeros_like(index)
    period = 2 * (size - 1)
    m = tf.math.floormod(index, period)
    return tf.where(m < size, m, period - m)


def _gather_axis(x: tf.Tensor, index: tf.Tensor, axis: int) -> tf.Tensor:
    """x[b, index[b, i]] along `axis` (1 or 2) for every image b; index [batch, n]."""
    return tf.gather(x, _mirror(index, x.shape[axis]), axis=axis, batch_dims=1)


def _resample_axis(x: tf.Tensor, scale: tf.Tensor, axis: int) -> tf.Tensor:
    """Scales image b by scale[b] about its centre along `axis`, bilinear, mirrored edges."""
    size = x.shape[axis]
    centre = size / 2.0
    out = tf.range(size, dtype=tf.float32)[None, :] + 0.5
    source = (out - centre) / scale[:, None] + centre - 0.5  # [batch, size]
    low = tf.floor(source)
    weight = source - low
    low = tf.cast(low, tf.int32)
    shape = [-1, size, 1, 1] if axis == 1 else [-1, 1, size, 1]
    weight = tf.cast(tf.reshape(weight, shape), x.dtype)
    return (_gather_axis(x, low, axis) * (1 - weight) +
            _gather_axis(x, low + 1, axis) * weight)


def translate(x: tf.Tensor, shift_y: tf.Tensor, shift_x: tf.Tensor) -> tf.Tensor:
    """out[b, i, j] = x[b, i - shift_y[b], j - shift_x[b]] (int32 shifts), mirrored edges."""
    rows = tf.range(x.shape[1])[None, :] - shift_y[:, None]
    cols = tf.range(x.shape[2])[None, :] - shift_x[:, None]
    return _gather_axis(_gather_axis(x, rows, 1), cols, 2)


def scale(x: tf.Tensor, scale_y: tf.Tensor, scale_x: tf.Tensor) -> tf.Tensor:
    return _resample_axis(_resample_axis(x, scale_y, 1), scale_x, 2)


def rotate90(x: tf.Tensor, quarter_turns: tf.Tensor) -> tf.Tensor:
    """Image b turned counter-clockwise quarter_turns[b] (0-3) times; square images."""
    turned = [x]
    for _ in range(3):
        turned.append(tf.image.rot90(turned[-1]))
    choice = tf.one_hot(quarter_turns, 4, dtype=x.dtype)[:, :, None, None, None]
    return tf.reduce_sum(tf.stack(turned, 1) * choice, axis=1)


def pipeline(x: tf.Tensor, seed: tf.Tensor, p: tf.Tensor) -> tf.Tensor:
    """ADA's transforms, each applied to each image with probability p (see the module doc)."""
    batch, height, width = tf.shape(x)[0], x.shape[1], x.shape[2]
    draws = augment_lib.keys(seed, stride=7919)  # apart from DiffAugment's draws

    def key():
        return next(draws)

    def chosen(shape=None):  # [batch] (or `shape`) booleans, True with probability p
        return tf.random.stateless_uniform(shape or [batch], key()) < tf.cast(p, tf.float32)

    def gated(value, identity):  # a per-image parameter, its identity when not chosen
        return tf.where(chosen(), value, identity)

    def normal(stddev):
        return tf.random.stateless_normal([batch], key(), stddev=stddev)

    def per_image(v):
        return tf.cast(tf.reshape(v, [-1, 1, 1, 1]), x.dtype)

    def mask():
        return tf.reshape(chosen(), [-1, 1, 1, 1])

    x = tf.where(mask(), tf.reverse(x, axis=[2]), x)  # x-flip
    if height == width:
        turns = tf.random.stateless_uniform([batch], key(), 0, 4, dtype=tf.int32)
        x = rotate90(x, gated(turns, tf.zeros_like(turns)))
    shift = [tf.cast(tf.round(tf.random.stateless_uniform([batch], key(), -0.125, 0.125) * n),
                     tf.int32) for n in (height, width)]
    x = translate(x, gated(shift[0], tf.zeros_like(shift[0])),
                  gated(shift[1], tf.zeros_like(shift[1])))
    iso = gated(tf.pow(2.0, normal(0.2)), tf.ones([batch]))
    aniso = gated(tf.pow(2.0, normal(0.2)), tf.ones([batch]))
    x = scale(x, iso / aniso, iso * aniso)
    x = x + per_image(gated(normal(0.2), tf.zeros([batch])))  # brightness
    x = x * per_image(gated(tf.pow(2.0, normal(0.5)), tf.ones([batch])))  # contrast
    if x.shape[-1] > 1:  # saturation about the luma axis (the channel mean)
        luma = tf.reduce_mean(x, axis=3, keepdims=True)
        x = luma + (x - luma) * per_image(gated(tf.pow(2.0, normal(1.0)), tf.ones([batch])))
    ch, cw = int(height * 0.5 + 0.5), int(width * 0.5 + 0.5)
    holed = augment_lib.cutout(
        x, tf.random.stateless_uniform([batch], key(), 0, height, dtype=tf.int32),
        tf.random.stateless_uniform([batch], key(), 0, width, dtype=tf.int32), ch, cw)
    return tf.where(mask(), holed, x)


class AdaptiveAugment:
    """ADA's pipeline with its adaptive p: called as DiffAugment is (images, seed).

    Create under the strategy's scope: p, r_t and the sums since the last
    adjustment are variables (checkpointed), written in replica context with the
    same all-reduced values on every replica.
    """

    def __init__(self, config: augment_lib.AugmentConfig):
        if config.ada_target is None:
            raise ValueError("AdaptiveAugment needs augment.ada_target")
        self.config = config
        first = tf.VariableAggregation.ONLY_FIRST_REPLICA
        self.p = tf.Variable(0.0, trainable=False, name="ada_p", aggregation=first)
        self.rt = tf.Variable(0.0, trainable=False, name="ada_rt", aggregation=first)
        # [sum of sign(D(real)), real images, D updates] since the last adjustment
        self.pending = tf.Variable([0.0, 0.0, 0.0], trainable=False, name="ada_pending",
                                   aggregation=first)

    def __call__(self, x: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        return pipeline(x, seed, tf.convert_to_tensor(self.p))

    def observe(self, sign_sum: tf.Tensor, count: tf.Tensor, applied: tf.Tensor) -> None:
        """One D update's all-reduced sum of sign(D(real)) over `count` real images."""
        cfg = self.config
        pending = tf.convert_to_tensor(self.pending) + tf.where(
            applied, tf.stack([sign_sum, count, 1.0]), tf.zeros([3]))
        due = pending[2] >= cfg.ada_interval
        rt = pending[0] / tf.maximum(pending[1], 1.0)
        step = tf.sign(rt - cfg.ada_target) * pending[1] / (cfg.ada_speed_kimg * 1000.0)
        p = tf.convert_to_tensor(self.p)
        self.p.assign(tf.where(due, tf.clip_by_value(p + step, 0.0, 1.0), p))
        self.rt.assign(tf.where(due, rt, tf.convert_to_tensor(self.rt)))
        self.pending.assign(tf.where(due, tf.zeros([3]), pending))

    def trackables(self) -> dict:
        return dict(ada_p=self.p, ada_rt=self.rt, ada_pending=self.pending)
