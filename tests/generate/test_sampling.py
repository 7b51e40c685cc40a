"""Sampling (generate/sampling.py): latents, truncation, standing BN statistics, and class
interpolation (under bfloat16, and through bin/sample.py)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.generate import sampling
from paragan_tf.families.biggan import networks as biggan
from paragan_tf.models import layers
from paragan_tf.train import experiment
from paragan_tf.train import driver
from tests.helpers.paper_biggan import _paper_models
from tests.helpers.repo import run_binary


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
        mean, var, count = moments(x)
        seen.append((mean.numpy(), var.numpy()))
        return mean, var, count
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


def test_class_interpolation_under_bfloat16(policy):
    policy("mixed_bfloat16")
    g, _ = _paper_models(64, ch_g=4, ch_d=8, classes=5, dim_z=20)
    z = tf.random.normal([1, 20])
    mix = tf.constant([[0.25, 0.0, 0.75, 0.0, 0.0]])
    mixed = g((z, mix)).numpy()
    pure = [g((z, tf.constant([c]))).numpy() for c in (0, 2)]
    one_hot = g((z, tf.one_hot([2], 5))).numpy()
    assert np.all(np.isfinite(mixed)) and mixed.dtype == np.float32
    np.testing.assert_allclose(one_hot, pure[1], atol=2e-2)  # bf16 matmuls: loose
    assert not np.allclose(mixed, pure[0], atol=1e-3) and not np.allclose(mixed, pure[1],
                                                                         atol=1e-3)


def test_soft_class_weights_equal_integer_labels_so_class_interpolation_is_exact(tiny_gin):
    tiny_gin()
    g = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0")).generator_ema
    z = tf.random.stateless_normal([3, g.dim_z], [1, 2])
    labels = tf.constant([0, 4, 9])
    hard = g((z, labels), training=False)
    soft = g((z, tf.one_hot(labels, g.num_classes)), training=False)
    np.testing.assert_allclose(hard.numpy(), soft.numpy(), atol=1e-5)


def test_sample_binary_draws_interpolations(tiny_gin, tmp_path):
    tiny_gin("train.total_steps = 2")
    driver.train(experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0")), str(tmp_path))
    proc = run_binary("sample.py", f"--model_dir={tmp_path}", "--mode=class_interpolation",
                      "--classes=0,5,9", "--per_class=6", "--standing_stats_batches=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    from PIL import Image  # pylint: disable=import-outside-toplevel
    grid = Image.open(tmp_path / "samples" / "class_interpolation.png")
    assert grid.size == (6 * 34 + 2, 2 * 34 + 2)  # 2 pairs x 6 steps of 32 px, 2 px borders
