"""Latents, truncation, standing BN statistics and image grids."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.generate import images
from paragan_tf.generate import sampling
from paragan_tf.models import biggan
from paragan_tf.models import layers


def test_latents_are_deterministic_and_truncation_bounds_them():
    a = sampling.latents(64, 16, seed=3)
    np.testing.assert_array_equal(a, sampling.latents(64, 16, seed=3))
    assert float(tf.reduce_max(tf.abs(a))) > 2.0  # plain normals do exceed 2 in 1,024 draws
    t = sampling.latents(64, 16, seed=3, truncation=0.5)
    assert float(tf.reduce_max(tf.abs(t))) <= 0.5


def test_standing_statistics_are_the_equal_average_of_batch_statistics():
    g = biggan.Generator(resolution=32, num_classes=3, out_channels=1, ch=2, dim_z=8)
    g((tf.zeros([2, 8]), tf.zeros([2], tf.int32)))
    bn = [m for m in g.submodules if isinstance(m, layers.ConditionalBatchNorm)][-1]
    bn.moving_mean.assign(tf.fill(bn.moving_mean.shape, 100.0))  # stale statistics
    seen, moments = [], bn._batch_moments  # pylint: disable=protected-access

    def recording(x):
        mean, var = moments(x)
        seen.append((mean.numpy(), var.numpy()))
        return mean, var
    bn._batch_moments = recording  # pylint: disable=protected-access
    sampling.refresh_bn_statistics(g, num_classes=3, num_batches=4, batch_size=16, seed=5)
    assert bn.momentum == pytest.approx(0.9)  # restored
    assert len(seen) == 4
    # Each of the 4 batches weighs 1/4; an exponential average (momentum 0.9 throughout)
    # would keep 0.9^4 of the stale 100 and weigh the last batch most.
    np.testing.assert_allclose(bn.moving_mean.numpy(), np.mean([m for m, _ in seen], 0),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.moving_variance.numpy(), np.mean([v for _, v in seen], 0),
                               rtol=1e-5, atol=1e-6)


def test_grid_layout_and_default_classes():
    tiles = np.stack([np.full((4, 4, 1), v, np.float32) for v in (-1.0, 1.0, 0.0, 1.0)])
    grid = images.grid(tiles, rows=2, pad=1)
    assert grid.shape == (2 * 5 + 1, 2 * 5 + 1, 1)
    assert grid[1, 1, 0] == 0 and grid[1, 6, 0] == 255 and grid[6, 1, 0] == 128
    with pytest.raises(ValueError, match="do not fill 3 rows"):
        images.grid(tiles, rows=3)
    assert sampling.default_classes(4) == [0, 1, 2, 3]
    assert sampling.default_classes(1000) == [0, 111, 222, 333, 444, 555, 666, 777, 888, 999]
