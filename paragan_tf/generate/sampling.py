"""Sampling from a generator: class-row grids, interpolations, the truncation trick."""

from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import tensorflow as tf
import tf_keras as keras

from paragan_tf.data import class_groups
from paragan_tf.generate import images as images_lib
from paragan_tf.models import layers


def latents(num: int, dim_z: int, seed: int, truncation: Optional[float] = None) -> tf.Tensor:
    """Deterministic z ~ N(0, I), optionally truncated to [-t, t] (BigGAN's truncation trick).

    Truncation resamples out-of-range values (a truncated normal), trading
    variety for fidelity as the threshold shrinks.
    """
    seed = tf.constant([seed, 0], tf.int64)
    if truncation is None or truncation <= 0:
        return tf.random.stateless_normal([num, dim_z], seed)
    return tf.random.stateless_parameterized_truncated_normal(
        [num, dim_z], seed, means=0.0, stddevs=1.0, minvals=-truncation, maxvals=truncation)


def default_classes(num_classes: int, max_rows: int = 10) -> List[int]:
    """Rows of a sample grid: every class, or an even spread when there are many."""
    if num_classes <= max_rows:
        return list(range(num_classes))
    return [int(c) for c in np.linspace(0, num_classes - 1, max_rows)]


def refresh_bn_statistics(generator: keras.Model, num_classes: int, num_batches: int = 8,
                          batch_size: int = 64, seed: int = 1,
                          classes: Optional[Sequence[int]] = None) -> None:
    """Replaces G's BN moving statistics by "standing statistics" (BigGAN, section 4).

    The moving averages a generator carries were measured on other weights
    (earlier steps, or, for the EMA generator, the raw G). Running the
    generator in training mode on fresh samples and averaging the batch
    statistics with equal weights (momentum (i-1)/i at batch i) gives
    statistics that match its current weights. Eager only: the momentum is a
    Python attribute read at call time. `classes`: the labels G was trained on
    (per-class training), default all.
    """
    classes = list(classes) if classes is not None else list(range(num_classes))
    norms = [m for m in generator.submodules if isinstance(m, layers.ConditionalBatchNorm)]
    saved = [bn.momentum for bn in norms]
    try:
        for i in range(num_batches):
            for bn in norms:
                bn.momentum = i / (i + 1.0)  # batch i gets weight 1/(i+1): an equal average
            z = latents(batch_size, generator.dim_z, seed + i)
            labels = class_groups.draw_labels(classes, [batch_size], [seed, i])
            generator((z, labels), training=True)
    finally:
        for bn, momentum in zip(norms, saved):
            bn.momentum = momentum


def class_samples(generator: keras.Model, classes: Sequence[int], per_class: int,
                  seed: int = 0, truncation: Optional[float] = None) -> np.ndarray:
    """[len(classes) * per_class, h, w, c] images in [-1, 1], class-major (inference mode).

    The same `per_class` latents are used for every class.
    """
    z = latents(per_class, generator.dim_z, seed, truncation)
    z = tf.tile(z, [len(classes), 1])
    labels = tf.repeat(tf.constant(list(classes), tf.int32), per_class)
    return generator((z, labels), training=False).numpy()


def class_grid(generator: keras.Model, classes: Sequence[int], per_class: int, seed: int = 0,
               truncation: Optional[float] = None) -> np.ndarray:
    """uint8 grid, one row per class in `classes`, `per_class` samples each (inference mode).

    The same z column is used for every row, so a column shows one latent across classes.
    """
    return images_lib.grid(class_samples(generator, classes, per_class, seed, truncation),
                           rows=len(classes))


def latent_interpolation(generator: keras.Model, classes: Sequence[int], steps: int,
                         seed: int = 0, truncation: Optional[float] = None) -> np.ndarray:
    """One row per class: z moves linearly from one latent to another across `steps` columns.

    Every row walks the same path in z, so rows differ only by class.
    """
    ends = latents(2, generator.dim_z, seed, truncation)
    t = tf.linspace(0.0, 1.0, steps)[:, None]
    path = (1.0 - t) * ends[0] + t * ends[1]
    z = tf.tile(path, [len(classes), 1])
    labels = tf.repeat(tf.constant(list(classes), tf.int32), steps)
    return generator((z, labels), training=False).numpy()


def class_interpolation(generator: keras.Model, pairs: Sequence[Sequence[int]], steps: int,
                        seed: int = 0, truncation: Optional[float] = None) -> np.ndarray:
    """One row per (a, b) pair: fixed z, conditioning moving from class a to class b."""
    z = tf.repeat(latents(len(pairs), generator.dim_z, seed, truncation), steps, axis=0)
    t = tf.linspace(0.0, 1.0, steps)[:, None]
    rows = [(1.0 - t) * tf.one_hot(a, generator.num_classes)
            + t * tf.one_hot(b, generator.num_classes) for a, b in pairs]
    return generator((z, tf.concat(rows, 0)), training=False).numpy()


def write_grid(generator: keras.Model, classes: Sequence[int], path: str, writer, step: int,
               bn_batch_size: int, per_class: int, seed: int, write: bool = True) -> None:
    """The grid of `generator` (an EMA generator; rows: some of `classes`) to the PNG
    `path` and TensorBoard, after refreshing its BN statistics in batches of
    `bn_batch_size`.

    Every worker of a multi-worker run must call this: refreshing the BN
    statistics runs cross-replica (collective) ops. Only the one with `write` writes.
    """
    refresh_bn_statistics(generator, generator.num_classes, batch_size=bn_batch_size,
                          classes=classes)
    rows = [classes[i] for i in default_classes(len(classes))]
    grid = class_grid(generator, rows, per_class=per_class, seed=seed)
    if not write:
        return
    images_lib.write_png(path, grid)
    with writer.as_default():
        tf.summary.image("samples/ema", grid[None], step=step)
