"""The layers (models/layers.py): spectral norm, class-conditional and synchronised batch norm."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.models import blocks
from paragan_tf.models import layers
from tests.helpers.training import mirrored_2


def test_spectral_norm_power_iteration_converges_and_only_trains_u():
    layer = layers.SNDense(7)
    x = tf.random.normal([4, 5])
    layer(x, training=False)
    u0 = layer.sn_u.numpy().copy()
    layer(x, training=False)
    np.testing.assert_array_equal(layer.sn_u.numpy(), u0)  # inference leaves u alone
    for _ in range(50):
        layer(x, training=True)
    assert not np.allclose(layer.sn_u.numpy(), u0)
    w = layer._normalized(layer.kernel, training=False).numpy()
    assert np.linalg.svd(w, compute_uv=False)[0] == pytest.approx(1.0, abs=1e-3)
    assert [v.name for v in layer.trainable_variables] == [layer.kernel.name, layer.bias.name]


def test_upsample_repeats_each_pixel_into_a_2x2_square():
    x = tf.reshape(tf.range(2 * 2 * 3 * 2, dtype=tf.float32), [2, 2, 3, 2])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = blocks._upsample(x)
    assert y.shape == (2, 4, 6, 2)
    for a in (0, 1):
        for b in (0, 1):
            np.testing.assert_array_equal(y[:, a::2, b::2, :], x)
    np.testing.assert_array_equal(tape.gradient(y, x), tf.fill(x.shape, 4.0))


def test_class_conditional_bn_uses_each_class_gain():
    # Zero tables (the reference initialises them like weights) so bias is 0 here.
    bn = layers.ConditionalBatchNorm("class", num_classes=3,
                                     numerics=layers.Numerics(embedding_init="zeros"))
    x = tf.random.normal([6, 2, 2, 4])
    labels = tf.constant([0, 1, 2, 0, 1, 2])
    bn(x, labels, training=True)
    bn.gain_embed.assign(tf.constant([[0.0] * 4, [1.0] * 4, [2.0] * 4]))
    y = bn(x, labels, training=True).numpy()
    normed = bn.__class__("none")(x, training=True).numpy()  # gain 1, bias 0
    for i, c in enumerate(labels.numpy()):
        np.testing.assert_allclose(y[i], (1.0 + c) * normed[i], rtol=1e-4, atol=1e-5)


def test_sync_bn_over_two_replicas_equals_global_batch_statistics():
    x = tf.random.normal([8, 3, 3, 4]) * 3.0 + 1.0
    one = layers.ConditionalBatchNorm("none")
    expected = one(x, training=True).numpy()
    strategy = mirrored_2()
    with strategy.scope():
        synced = layers.ConditionalBatchNorm("none", sync=True)
        synced.build(x.shape)
        local = layers.ConditionalBatchNorm("none", sync=False)
        local.build(x.shape)
    halves = strategy.experimental_distribute_values_from_function(
        lambda ctx: x[4 * ctx.replica_id_in_sync_group:4 * (ctx.replica_id_in_sync_group + 1)])
    got = np.concatenate(strategy.experimental_local_results(
        strategy.run(lambda h: synced(h, training=True), args=(halves,))))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    unsynced = np.concatenate(strategy.experimental_local_results(
        strategy.run(lambda h: local(h, training=True), args=(halves,))))
    assert not np.allclose(unsynced, expected, atol=1e-3)  # the test can tell them apart


@pytest.mark.parametrize("conditioning", ["none", "class"])  # the fused op, and not
def test_bn_in_groups_equals_one_call_per_group_in_order(conditioning):
    x = tf.random.stateless_normal([6, 3, 3, 4], [1, 2]) * 3.0 + 1.0
    labels = tf.constant([0, 1, 1, 0, 1, 0])
    joint, apart = (layers.ConditionalBatchNorm(conditioning, num_classes=2, momentum=0.5)
                    for _ in range(2))
    condition = labels if conditioning == "class" else None
    joint(x, condition)  # built
    apart(x, condition)
    apart.set_weights(joint.get_weights())  # the class path's tables start random
    grouped = joint(x, condition, training=True, groups=2)
    halves = [apart(x[i:i + 3], None if condition is None else condition[i:i + 3],
                    training=True) for i in (0, 3)]
    np.testing.assert_allclose(grouped, tf.concat(halves, 0), atol=1e-5)
    for mine, theirs in ((joint.moving_mean, apart.moving_mean),
                         (joint.moving_variance, apart.moving_variance)):
        np.testing.assert_allclose(mine, theirs, atol=1e-6)
    # A joint call mixes the groups' statistics: the check above can tell.
    mixed = layers.ConditionalBatchNorm(conditioning, num_classes=2, momentum=0.5)
    mixed(x, condition)
    mixed.set_weights(apart.get_weights())
    assert not np.allclose(mixed(x, condition, training=True), grouped, atol=1e-3)
