"""The losses (objective/losses.py): per-example values against their formulas, and the
relativistic pairing."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.objective import losses

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


def test_relativistic_pairs_each_fake_with_its_real_partner():
    real, fake, gen = (tf.constant(v) for v in ([2.0, -0.5], [0.3, 1.0], [0.1, -1.5]))
    d, g = losses.relativistic(real, fake, gen)
    np.testing.assert_allclose(d.numpy(), np.log1p(np.exp([0.3 - 2.0, 1.0 + 0.5])), rtol=1e-6)
    np.testing.assert_allclose(g.numpy(), np.log1p(np.exp([2.0 - 0.1, -0.5 + 1.5])), rtol=1e-6)
