"""The generator's exponential moving average (train/ema.py)."""

from __future__ import annotations

import numpy as np
import pytest
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


def _averaged(batch_size: int, images: int, **ema_options) -> float:
    """The weight an EMA of a one-weight model gives G's newest value after G has trained
    on `images` images in updates of `batch_size` (G jumps from 0 to 1 first)."""
    import tf_keras as keras  # pylint: disable=import-outside-toplevel
    from paragan_tf.train import ema as ema_lib  # pylint: disable=import-outside-toplevel

    def model():
        net = keras.Sequential([keras.layers.Dense(1, use_bias=False)])
        net.build((None, 1))
        net.set_weights([np.zeros((1, 1), np.float32)])
        return net
    source, average = model(), model()
    ema = ema_lib.GeneratorEMA(source, average, images_per_update=batch_size,
                               start_step=0, **ema_options)
    source.set_weights([np.ones((1, 1), np.float32)])
    for step in range(images // batch_size):
        ema.update(tf.constant(step, tf.int64))
    return float(average.get_weights()[0][0, 0])


def test_a_half_life_in_images_averages_alike_at_any_batch_size():
    """After one half-life the average has come half way to G, whether the half-life
    passed in 320 updates of 32 or in 5 updates of 2,048 images; a decay per update
    (the negative control) averages over 64 times more images at the larger batch."""
    for batch in (32, 2048):
        assert _averaged(batch, 10240, decay=0.0, half_life_images=10240) == \
            pytest.approx(0.5, abs=1e-4)
        assert _averaged(batch, 20480, decay=0.0, half_life_images=10240) == \
            pytest.approx(0.75, abs=1e-4)
    per_update = [_averaged(batch, 10240, decay=0.99) for batch in (32, 2048)]
    assert per_update[0] == pytest.approx(1 - 0.99 ** 320, abs=1e-4)
    assert per_update[1] == pytest.approx(1 - 0.99 ** 5, abs=1e-4)


def test_the_ramp_up_shortens_the_half_life_early():
    """StyleGAN2-ADA's ramp-up: the half-life is at most rampup x the images seen so far;
    the first update copies G, and with rampup 0.05 the first 10,240 images of a
    10,240-image half-life are averaged over at most 512: G's value is nearly reached."""
    from paragan_tf.train import ema as ema_lib  # pylint: disable=import-outside-toplevel
    ema = ema_lib.GeneratorEMA(None, None, 0.0, 0, half_life_images=10240,
                               images_per_update=32, rampup=0.05)
    assert float(ema.decay_at(tf.constant(0, tf.int64))) == 0.0  # nothing seen yet
    # After 100 updates (3,200 images): the half-life is 160 images, 5 updates.
    assert float(ema.decay_at(tf.constant(100, tf.int64))) == pytest.approx(0.5 ** (32 / 160))
    # Past 204,800 images the full half-life applies.
    assert float(ema.decay_at(tf.constant(10000, tf.int64))) == pytest.approx(
        0.5 ** (32 / 10240))
    ramped = _averaged(32, 10240, decay=0.0, half_life_images=10240, rampup=0.05)
    assert ramped > 0.99 > _averaged(32, 10240, decay=0.0, half_life_images=10240)
