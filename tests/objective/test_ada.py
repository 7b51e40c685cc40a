"""ADA (objective/ada.py): its geometric ops and pipeline, the p controller, and p trained
under two replicas and resumed from a checkpoint."""

from __future__ import annotations

import gin
import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.objective import augment
from tests.helpers.training import mirrored_2

X = (np.arange(2 * 5 * 6 * 3, dtype=np.float32).reshape(2, 5, 6, 3) / 90.0) - 0.9


def test_ada_geometric_ops_match_hand_computations():
    from paragan_tf.objective import ada
    ramp = tf.reshape(tf.range(4, dtype=tf.float32), [1, 4, 1, 1]) * tf.ones([1, 4, 4, 1])
    # Scaling by 2 about the centre samples source rows out / 2 + 0.5 of a linear ramp:
    # bilinear interpolation returns those coordinates.
    out = ada.scale(ramp, tf.constant([2.0]), tf.constant([1.0]))
    np.testing.assert_allclose(out.numpy()[0, :, 0, 0], [0.75, 1.25, 1.75, 2.25], atol=1e-6)
    np.testing.assert_allclose(ada.scale(ramp, tf.ones([1]), tf.ones([1])).numpy(), ramp.numpy())
    # Translation reads outside the image by mirroring: rows 0..3 shifted down by 2.
    moved = ada.translate(ramp, tf.constant([2]), tf.constant([0])).numpy()[0, :, 0, 0]
    np.testing.assert_array_equal(moved, [2.0, 1.0, 0.0, 1.0])
    x = np.arange(2 * 16, dtype=np.float32).reshape(2, 4, 4, 1)
    turned = ada.rotate90(tf.constant(x), tf.constant([1, 3])).numpy()
    np.testing.assert_array_equal(turned[0, ..., 0], np.rot90(x[0, ..., 0], 1))
    np.testing.assert_array_equal(turned[1, ..., 0], np.rot90(x[1, ..., 0], 3))


def test_ada_pipeline_is_the_identity_at_p_0_and_moves_every_image_at_p_1():
    from paragan_tf.objective import ada
    x = tf.constant(X)
    np.testing.assert_allclose(ada.pipeline(x, tf.constant([3, 4]), 0.0).numpy(), X, atol=1e-6)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = ada.pipeline(x, tf.constant([3, 4]), 1.0)
        energy = tf.reduce_sum(out * out)
    assert all(not np.allclose(out.numpy()[b], X[b]) for b in range(len(X)))
    assert np.all(np.isfinite(tape.gradient(energy, x).numpy()))
    assert ada.pipeline(tf.cast(x, tf.bfloat16), tf.constant([3, 4]), 1.0).dtype == tf.bfloat16


def test_ada_p_follows_the_sign_of_rt_minus_target_at_the_set_speed():
    from paragan_tf.objective import ada
    aug = ada.AdaptiveAugment(augment.AugmentConfig(ada_target=0.6, ada_interval=2,
                                                    ada_speed_kimg=1.0))
    yes, no = tf.constant(True), tf.constant(False)
    aug.observe(8.0, 8.0, yes)  # all real logits positive: r_t = 1
    assert float(aug.p.numpy()) == 0.0  # not yet: every 2 D updates
    aug.observe(5.0, 8.0, no)  # a skipped update does not count
    aug.observe(4.0, 8.0, yes)  # r_t = (8 + 4) / 16 = 0.75 > 0.6: p up by 16 / 1000
    assert aug.p.numpy() == pytest.approx(0.016) and aug.rt.numpy() == pytest.approx(0.75)
    np.testing.assert_array_equal(aug.pending.numpy(), [0, 0, 0])
    aug.observe(-8.0, 8.0, yes)
    aug.observe(0.0, 8.0, yes)  # r_t = -0.5: p down by 16 / 1000, not below 0
    aug.observe(-8.0, 8.0, yes)
    aug.observe(-8.0, 8.0, yes)
    assert aug.p.numpy() == 0.0 and aug.rt.numpy() == pytest.approx(-1.0)


def test_ada_trains_two_replicas_logs_p_and_resumes_it(tiny_gin, tmp_path):
    from paragan_tf.train import checkpoints
    from paragan_tf.train import experiment
    from paragan_tf.train import driver
    settings = ("augment.ada_target = 0.6", "augment.ada_interval = 1",
                "augment.ada_speed_kimg = 1.0")  # p moves 8 / 1000 per D update of 8 images
    tiny_gin(*settings, "train.total_steps = 2", "train.d_steps = 2")  # 2 steps x 2 D updates
    exp = experiment.build(mirrored_2())
    exp.augment.p.assign(0.5)  # as mid-run: p may move either way
    result = driver.train(exp, str(tmp_path))
    p, rt = float(exp.augment.p.numpy()), float(exp.augment.rt.numpy())
    moves = abs(p - 0.5) / 0.008
    assert moves == pytest.approx(round(moves), abs=1e-3) and 1 <= round(moves) <= 4, p
    assert result["augment/p"] == pytest.approx(p) and -1 <= rt <= 1 and rt != 0
    gin.clear_config()
    tiny_gin(*settings, "train.seed = 5")
    fresh = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
    assert float(fresh.augment.p.numpy()) == 0.0
    checkpoints.Checkpointer(str(tmp_path), 3, **fresh.trackables()).restore_latest()
    assert float(fresh.augment.p.numpy()) == p and float(fresh.augment.rt.numpy()) == rt
