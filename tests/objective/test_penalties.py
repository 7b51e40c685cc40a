"""D's output regularisers (objective/penalties.py: R1/R2, LeCam, bCR), each against the
formula computed by hand, and the penalties.* settings they refuse."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.errors import ConfigError
from paragan_tf.objective import penalties


def test_gradient_penalty_is_half_gamma_times_the_squared_gradient_norm():
    grads = tf.constant([[[[1.0, 2.0]], [[0.0, -2.0]]], [[[3.0, 0.0]], [[0.0, 0.0]]]])
    # per example: ||g||^2 = 1 + 4 + 0 + 4 = 9 and 9
    np.testing.assert_allclose(penalties.gradient_penalty(grads, 0.2).numpy(), [0.9, 0.9])


def test_r1_of_a_linear_critic_is_its_weight_norm():
    """D(x) = <w, x>: d D / d x = w for every x, so R1 = gamma / 2 * ||w||^2."""
    w = tf.constant([[0.5, -1.0, 2.0]])
    x = tf.constant(np.random.default_rng(0).normal(size=(4, 3)), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        total = tf.reduce_sum(x * w)
    r1 = penalties.gradient_penalty(tape.gradient(total, x), 10.0).numpy()
    np.testing.assert_allclose(r1, [5.0 * 5.25] * 4, rtol=1e-6)


def test_lecam_penalises_only_real_above_fake_average_and_fake_below_real_average():
    real = tf.constant([2.0, 0.5, -1.0])
    fake = tf.constant([-2.0, 0.8, 0.0])
    ema_real, ema_fake = 0.6, 0.1
    # relu(real - 0.1)^2 = [3.61, 0.16, 0]; relu(0.6 - fake)^2 = [6.76, 0, 0.36]
    expected = 0.3 * np.array([3.61 + 6.76, 0.16, 0.36])
    out = penalties.lecam(real, fake, ema_real, ema_fake, 0.3).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5)


def test_consistency_is_the_weighted_squared_logit_difference():
    out = penalties.consistency(tf.constant([1.0, -2.0]), tf.constant([0.5, 1.0]), 10.0)
    np.testing.assert_allclose(out.numpy(), [2.5, 90.0])


def test_penalty_settings_are_checked_by_name():
    with pytest.raises(ConfigError, match=r"penalties.r1_gamma=-1"):
        penalties.Penalties(r1_gamma=-1)
    with pytest.raises(ConfigError, match=r"penalties.lazy_interval=0"):
        penalties.Penalties(lazy_interval=0)
    with pytest.raises(ConfigError, match=r"lazy_interval=16 spaces out R1 and R2"):
        penalties.Penalties(lazy_interval=16)
    with pytest.raises(ConfigError, match=r"penalties.lecam_decay=1.0"):
        penalties.Penalties(lecam_decay=1.0)
