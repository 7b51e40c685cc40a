"""Loss values, the tensorflow-gan compat import, and the global-batch averaging."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import mirrored_2
from paragan_tf.models import layers
from paragan_tf.objective import losses
from paragan_tf.objective import regularizers
from paragan_tf.train import step as step_lib

REAL = np.array([2.0, -0.5, 0.3], np.float32)
FAKE = np.array([0.3, -2.0, 1.5], np.float32)
GEN = np.array([0.1, 0.2, -0.7], np.float32)


def _softplus(x):
    return np.log1p(np.exp(x))


@pytest.mark.parametrize("fn,d_expected,g_expected", [
    (losses.hinge, np.maximum(0, 1 - REAL) + np.maximum(0, 1 + FAKE), -GEN),
    (losses.non_saturating, _softplus(-REAL) + _softplus(FAKE), _softplus(-GEN)),
    (losses.wasserstein, FAKE - REAL, -GEN),
])
def test_per_example_losses_match_their_formulas(fn, d_expected, g_expected):
    d, g = fn(tf.constant(REAL), tf.constant(FAKE), tf.constant(GEN))
    assert d.shape == (3,) and g.shape == (3,)
    np.testing.assert_allclose(d.numpy(), d_expected, rtol=1e-5)
    np.testing.assert_allclose(g.numpy(), g_expected, rtol=1e-5)


def test_tensorflow_gan_is_used_without_its_broken_package_init():
    assert "tensorflow_gan.python.losses.losses_impl" in sys.modules
    assert "tensorflow_gan.python.train" not in sys.modules  # the module needing tf.estimator
    from paragan_tf import tfgan_compat
    assert hasattr(tfgan_compat.classifier_metrics, "frechet_classifier_distance_from_activations")


def test_average_over_global_batch_makes_replica_sums_equal_the_global_mean():
    per_example = tf.constant([1.0, 2.0, 3.0, 6.0])
    strategy = mirrored_2()
    halves = strategy.experimental_distribute_values_from_function(
        lambda ctx: per_example[2 * ctx.replica_id_in_sync_group:
                                2 * ctx.replica_id_in_sync_group + 2])
    per_replica = strategy.run(lambda x: step_lib.average_over_global_batch(x, 4), args=(halves,))
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
    assert float(total) == pytest.approx(3.0)  # mean of all four
    # A local mean per replica, summed, double-counts: the bug this helper prevents.
    naive = strategy.reduce(tf.distribute.ReduceOp.SUM,
                            strategy.run(tf.reduce_mean, args=(halves,)), axis=None)
    assert float(naive) == pytest.approx(6.0)


def test_orthogonal_regularizer_is_zero_for_orthogonal_columns_only():
    class Holder(tf.Module):
        def __init__(self):
            self.dense = layers.SNDense(3)
            self.dense(tf.zeros([1, 4]))
    holder = Holder()
    holder.dense.kernel.assign(np.eye(4, 3, dtype=np.float32) * 5.0)  # norms do not matter
    assert float(regularizers.orthogonal(holder)) == pytest.approx(0.0)
    holder.dense.kernel.assign(np.ones([4, 3], np.float32))
    # The reference's 0.5 * sum of squared off-diagonal Gram entries: 6 entries of 4^2.
    assert float(regularizers.orthogonal(holder)) == pytest.approx(0.5 * 6 * 16.0)


def test_relativistic_pairs_each_fake_with_its_real_partner():
    real, fake, gen = (tf.constant(v) for v in ([2.0, -0.5], [0.3, 1.0], [0.1, -1.5]))
    d, g = losses.relativistic(real, fake, gen)
    np.testing.assert_allclose(d.numpy(), np.log1p(np.exp([0.3 - 2.0, 1.0 + 0.5])), rtol=1e-6)
    np.testing.assert_allclose(g.numpy(), np.log1p(np.exp([2.0 - 0.1, -0.5 + 1.5])), rtol=1e-6)
