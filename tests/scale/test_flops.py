"""The FLOP counter (scale/flops.py): a convolution's multiply-adds counted twice, a train step
as its D and G updates, and any batch's counts from batches 1 and 2."""

from __future__ import annotations

import tensorflow as tf

from paragan_tf.families.biggan import networks as biggan
from paragan_tf.scale import flops
from tests.helpers.paper_biggan import _paper_models


def test_the_counter_counts_a_convolutions_multiply_adds_twice():
    kernel = tf.random.normal([3, 3, 4, 6])
    total, dominant = flops._profile(  # pylint: disable=protected-access
        lambda x: tf.nn.conv2d(x, kernel, 1, "SAME"), tf.TensorSpec([2, 8, 8, 4]))
    assert total == 2 * (2 * 8 * 8) * (3 * 3 * 4 * 6)
    assert dominant == ([2, 8, 8, 4], [3, 3, 4, 6])


def test_a_train_step_is_d_steps_d_updates_and_one_g_update():
    forward = flops.Forward(batch=4, g=10, d=3, d_both=7,
                            dominant_conv=([8, 8, 8, 3], [3, 3, 3, 8]))
    # A D update: G(B) and 3 x D(2B); the G update: 3 x G(B) and 2 x D(B) (input gradients
    # only through D); per micro-batch.
    assert forward.train_step(d_steps=2, accumulation=1) == 2 * (10 + 3 * 7) + (3 * 10 + 2 * 3)
    assert forward.train_step(d_steps=2, accumulation=3) == 3 * forward.train_step(2, 1)
    # pix2pix's G runs once: its update differentiates the forward pass of D's update.
    assert forward.train_step(d_steps=1, accumulation=1, reuses_fakes=True) == \
        (10 + 3 * 7) + (2 * 10 + 2 * 3)


def test_counts_at_any_batch_follow_exactly_from_batches_one_and_two():
    """What the plan relies on: counts are affine in the batch, so a 2,048-example step is
    never traced. Batch 3 extrapolated equals batch 3 traced."""
    slots = len(biggan.G_ARCH[32][0]) + 1
    g, d = _paper_models(32, ch_g=4, ch_d=8, classes=5, dim_z=4 * slots)
    assert flops.per_example(g, d).at(3) == flops.forward(g, d, 3)
