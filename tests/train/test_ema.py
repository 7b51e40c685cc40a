"""The generator's exponential moving average (train/ema.py)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from paragan_tf.train import experiment


def _one_device():
    return tf.distribute.OneDeviceStrategy("/cpu:0")


def test_ema_tracks_before_start_and_averages_after(tiny_gin):
    tiny_gin("train.ema_decay = 0.75", "train.ema_start_step = 1")
    exp = experiment.build(_one_device())
    g, ema = exp.generator.trainable_variables[0], exp.generator_ema.trainable_variables[0]
    g.assign_add(tf.ones_like(g))
    exp.ema.update(tf.constant(0))
    np.testing.assert_allclose(ema.numpy(), g.numpy())  # before start: a copy
    old = ema.numpy()
    g.assign_add(tf.ones_like(g))
    exp.ema.update(tf.constant(1))
    np.testing.assert_allclose(ema.numpy(), 0.75 * old + 0.25 * g.numpy(), rtol=1e-6)
    bn_g = exp.generator.non_trainable_variables[0]
    bn_g.assign(tf.fill(bn_g.shape, 3.0))
    exp.ema.update(tf.constant(2))
    np.testing.assert_array_equal(exp.generator_ema.non_trainable_variables[0].numpy(),
                                  bn_g.numpy())  # statistics are copied, not averaged
