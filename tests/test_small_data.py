"""DiffAugment's transforms against the reference, and D's output regularisers against
hand computations (augment.py, penalties.py, losses.relativistic).

The DiffAugment goldens come from the reference implementation
(mit-han-lab/data-efficient-gans, DiffAugment_tf.py at its GitHub HEAD, read on
2026-11-24) run on X below with its random draws replaced by the fixed values
each test passes to ours.
"""

from __future__ import annotations

import os

import gin
import numpy as np
import pytest
import tensorflow as tf

from conftest import mirrored_2
from paragan_tf.objective import augment
from paragan_tf.objective import losses
from paragan_tf.objective import penalties
from paragan_tf.errors import ConfigError

X = (np.arange(2 * 5 * 6 * 3, dtype=np.float32).reshape(2, 5, 6, 3) / 90.0) - 0.9


def _u(*values):
    return tf.constant(values, tf.float32)[:, None, None, None]


@pytest.mark.parametrize("transform,draws,golden", [
    (augment.brightness, (0.1, 0.8), [[-1.033333, -1.022222, -1.011111],
                                      [0.666667, 0.677778, 0.688889]]),
    (augment.saturation, (0.3, 0.9), [[-0.628889, -0.622222, -0.615556],
                                      [0.357778, 0.377778, 0.397778]]),
    (augment.contrast, (0.2, 0.7), [[-0.565, -0.557222, -0.549444],
                                    [0.321111, 0.334444, 0.347778]]),
])
def test_color_transforms_match_the_reference(transform, draws, golden):
    out = transform(tf.constant(X), _u(*draws)).numpy()
    np.testing.assert_allclose(out[:, 1, 2], golden, atol=2e-6)  # pixel (1, 2), 3 channels


def test_translation_matches_the_reference_and_shifts_in_zeros():
    out = augment.translation(tf.constant(X), tf.constant([1, -1]), tf.constant([-1, 1]))
    golden_0 = [[0, -0.7, -0.666667, -0.633333, -0.6, -0.566667],
                [0, -0.5, -0.466667, -0.433333, -0.4, -0.366667],
                [0, -0.3, -0.266667, -0.233333, -0.2, -0.166667],
                [0, -0.1, -0.066667, -0.033333, 0, 0.033333],
                [0, 0, 0, 0, 0, 0]]
    golden_1 = [[0, 0, 0, 0, 0, 0],
                [0.133333, 0.166667, 0.2, 0.233333, 0.266667, 0],
                [0.333333, 0.366667, 0.4, 0.433333, 0.466667, 0],
                [0.533333, 0.566667, 0.6, 0.633333, 0.666667, 0],
                [0.733333, 0.766667, 0.8, 0.833333, 0.866667, 0]]
    np.testing.assert_allclose(out.numpy()[..., 0], [golden_0, golden_1], atol=2e-6)


def test_cutout_matches_the_reference_including_squares_over_the_border():
    x = tf.constant(X + 2.0)  # no zero pixels: the holes show alone
    out = augment.cutout(x, tf.constant([0, 4]), tf.constant([5, 2]), 3, 3).numpy()
    holes = np.zeros((2, 5, 6), bool)
    holes[0, 0:2, 4:6] = True  # centre (0, 5): the square hangs over two borders
    holes[1, 3:5, 1:4] = True
    np.testing.assert_array_equal(out[..., 0] == 0, holes)
    np.testing.assert_array_equal(out[~holes], (X + 2.0)[~holes])


def test_the_policy_is_differentiable_keyed_by_its_seed_and_keeps_bfloat16():
    policy = augment.DiffAugment(["color", "translation", "cutout"])
    x = tf.constant(X)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = policy(x, tf.constant([7, 11]))
        energy = tf.reduce_sum(out * out)
    grad = tape.gradient(energy, x).numpy()
    assert np.all(np.isfinite(grad)) and np.count_nonzero(grad) > X.size // 4
    np.testing.assert_array_equal(out.numpy(), policy(x, tf.constant([7, 11])).numpy())
    assert not np.allclose(out.numpy(), policy(x, tf.constant([7, 12])).numpy())
    assert policy(tf.cast(x, tf.bfloat16), tf.constant([7, 11])).dtype == tf.bfloat16


def test_seeds_come_from_the_noise_so_replicas_and_steps_differ():
    z = tf.random.stateless_normal([4, 8], [1, 2])
    other = tf.random.stateless_normal([4, 8], [1, 3])
    assert augment.seed_from(z, 1).numpy().tolist() == augment.seed_from(z, 1).numpy().tolist()
    assert augment.seed_from(z, 1).numpy().tolist() != augment.seed_from(other, 1).numpy().tolist()
    assert augment.seed_from(z, 1).numpy().tolist() != augment.seed_from(z, 2).numpy().tolist()


def test_unknown_policy_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"augment.policy names \['colour'\]"):
        augment.AugmentConfig(policy="colour,translation")
    assert augment.AugmentConfig(policy=" color, cutout ").transforms == ("color", "cutout")
    assert augment.AugmentConfig().transforms == ()


# --- D's output regularisers: each against the formula computed by hand ---

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


def test_relativistic_pairs_each_fake_with_its_real_partner():
    real, fake, gen = (tf.constant(v) for v in ([2.0, -0.5], [0.3, 1.0], [0.1, -1.5]))
    d, g = losses.relativistic(real, fake, gen)
    np.testing.assert_allclose(d.numpy(), np.log1p(np.exp([0.3 - 2.0, 1.0 + 0.5])), rtol=1e-6)
    np.testing.assert_allclose(g.numpy(), np.log1p(np.exp([2.0 - 0.1, -0.5 + 1.5])), rtol=1e-6)


def test_penalty_settings_are_checked_by_name():
    with pytest.raises(ConfigError, match=r"penalties.r1_gamma=-1"):
        penalties.Penalties(r1_gamma=-1)
    with pytest.raises(ConfigError, match=r"penalties.lazy_interval=0"):
        penalties.Penalties(lazy_interval=0)
    with pytest.raises(ConfigError, match=r"penalties.lecam_decay=1.0"):
        penalties.Penalties(lecam_decay=1.0)


# --- in the step: each setting changes D's gradient; all of them train under two replicas ---

def _gradients(exp, **changes):
    """D's gradient for one fixed batch under `exp`'s step with StepConfig `changes`."""
    import dataclasses
    from paragan_tf.train import loop
    step = loop.make_gan_step(exp)
    loss_fn = changes.pop("loss_fn", exp.loss_fn)
    step = type(step)(exp.generator, exp.discriminator, exp.g_optimizer, exp.d_optimizer,
                      loss_fn, dataclasses.replace(step.config, **changes),
                      lecam_state=exp.lecam_state)
    rng = np.random.default_rng(0)
    real = (tf.constant(rng.uniform(-1, 1, (8, 32, 32, 1)), tf.float32),
            tf.constant(rng.integers(0, 10, 8), tf.int32))
    noise = (tf.constant(rng.normal(size=(8, exp.generator.dim_z)), tf.float32),
             tf.constant(rng.integers(0, 10, 8), tf.int32))
    _, grads, _, _, _ = exp.strategy.run(lambda: step.d_gradients([real], [noise]))
    return np.concatenate([tf.reshape(g, [-1]).numpy() for g in grads])


def test_each_setting_changes_ds_gradient_and_off_changes_nothing(tiny_gin):
    from paragan_tf.train import experiment
    tiny_gin("penalties.lecam_weight = 0.0")
    exp = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
    exp.lecam_state = tf.Variable([0.5, -0.5])  # averages the LeCam term pulls toward
    off = penalties.Penalties()
    baseline = _gradients(exp, penalties=off)
    # Each D pass also moves the spectral-norm power iteration a little: the floor.
    floor = np.max(np.abs(_gradients(exp, penalties=off) - baseline))
    assert floor < 1e-4
    variants = {
        "augment": dict(augment=augment.DiffAugment(["color", "translation", "cutout"])),
        "r1": dict(penalties=penalties.Penalties(r1_gamma=10.0)),
        "r2": dict(penalties=penalties.Penalties(r2_gamma=10.0)),
        "lecam": dict(penalties=penalties.Penalties(lecam_weight=10.0)),
        "bcr": dict(penalties=penalties.Penalties(bcr_real=10.0, bcr_fake=10.0)),
        "relativistic": dict(loss_fn=losses.relativistic, penalties=off),
    }
    for name, changes in variants.items():
        change = np.max(np.abs(_gradients(exp, **changes) - baseline))
        assert change > 100 * floor + 1e-4, (name, change, floor)


def test_every_setting_at_once_trains_two_replicas_and_lecam_follows_the_logits(tiny_gin,
                                                                                 tmp_path):
    from paragan_tf.train import checkpoints
    from paragan_tf.train import experiment
    from paragan_tf.train import loop
    everything = ("augment.policy = 'color,translation,cutout'", "loss.fn = @relativistic",
                  "penalties.r1_gamma = 1.0", "penalties.r2_gamma = 1.0",
                  "penalties.lazy_interval = 2", "penalties.bcr_real = 10.0",
                  "penalties.bcr_fake = 10.0", "penalties.lecam_weight = 0.3")
    # decay 0 and one D update per step: the averages are that update's mean logits,
    # which the trainer also reports, through its own all-reduce.
    tiny_gin(*everything, "penalties.lecam_decay = 0.0", "train.d_steps = 1",
             "train.total_steps = 1")
    exp = experiment.build(mirrored_2())
    result = loop.train(exp, str(tmp_path))
    for key in ("loss/D", "loss/G", "grad_norm/D", "grad_norm/G"):
        assert np.isfinite(result[key]), key
    np.testing.assert_allclose(exp.lecam_state.numpy(),
                               [result["logits/real"], result["logits/fake"]], rtol=1e-4)
    gin.clear_config()
    tiny_gin(*everything, "train.seed = 5")
    fresh = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
    checkpoints.Checkpointer(str(tmp_path), 3, **fresh.trackables()).restore_latest()
    np.testing.assert_array_equal(fresh.lecam_state.numpy(), exp.lecam_state.numpy())


def test_lazy_r1_under_bfloat16_stays_finite(tiny_gin, tmp_path):
    from paragan_tf.train import experiment
    from paragan_tf.train import loop
    tiny_gin("layout.precision = 'mixed_bfloat16'", "penalties.r1_gamma = 10.0",
             "penalties.r2_gamma = 10.0", "penalties.lazy_interval = 2",
             "augment.policy = 'color,translation,cutout'", "train.total_steps = 2")
    exp = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
    result = loop.train(exp, str(tmp_path))
    assert exp.layout.precision == "mixed_bfloat16"
    for key in ("loss/D", "loss/G", "grad_norm/D", "grad_norm/G"):
        assert np.isfinite(result[key]), key
    assert int(exp.health.skipped.numpy()) == 0


# --- ADA ---

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
    from paragan_tf.train import loop
    settings = ("augment.ada_target = 0.6", "augment.ada_interval = 1",
                "augment.ada_speed_kimg = 1.0")  # p moves 8 / 1000 per D update of 8 images
    tiny_gin(*settings, "train.total_steps = 2")  # 2 steps x 2 D updates
    exp = experiment.build(mirrored_2())
    exp.augment.p.assign(0.5)  # as mid-run: p may move either way
    result = loop.train(exp, str(tmp_path))
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


def test_ada_and_diffaugment_together_are_refused_by_name():
    with pytest.raises(ConfigError, match=r"augment.policy='translation' and "
                       r"augment.ada_target=0.6 are alternatives"):
        augment.AugmentConfig(policy="translation", ada_target=0.6)


def test_gradient_penalties_under_float16_are_refused_by_name(tiny_gin):
    from paragan_tf.train import experiment
    tiny_gin("layout.precision = 'mixed_float16'", "penalties.r1_gamma = 1.0")
    with pytest.raises(ConfigError, match=r"penalties.r1_gamma/r2_gamma with "
                       r"layout.precision='mixed_float16'"):
        experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))


def test_a_bad_ada_setting_is_refused_by_name_before_the_models_are_built(tiny_gin):
    from paragan_tf.train import experiment
    tiny_gin("augment.ada_target = 1.5")
    with pytest.raises(ConfigError, match=r"augment.ada_target=1.5 must be in \(-1, 1\)"):
        experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))


def test_the_small_data_suite_on_a_tiny_run(tmp_path, mnist_classifier):
    from conftest import declared_for
    from benchmarks import small_data
    stand_in = declared_for(mnist_classifier[0], str(tmp_path / "classifier"), "fashion_mnist")
    # One arm (each is a training and an evaluation process): the one with most settings.
    result = small_data.small_data(
        steps=4, per_class=5, arms=("diffaugment_lecam",), eval_samples=250,
        eval_real=250, work_dir=str(tmp_path / "runs"), classifier_dir=stand_in,
        config="gin/tiny.gin", log_every=2)
    arm = result["arms"]["diffaugment_lecam"]
    assert set(result["arms"]) == {"diffaugment_lecam"}
    assert arm["steps"] == 4 and arm["seconds"] > 0
    for key in ("fcd", "intra_class_fcd", "precision", "recall", "conditional_accuracy",
                "logit_gap"):
        assert np.isfinite(arm[key]), key
    assert arm["protocol"] == "fcd0.25k_test0.25k"
    assert os.path.exists(arm["grid"]) and arm["grid"].endswith("step_0000004.png")
    # It trained what it names, on the 50-image subset.
    log = (tmp_path / "runs" / "diffaugment_lecam.log").read_text()
    assert "training on 50 examples of fashion_mnist split 'train'" in log
    operative = (tmp_path / "runs" / "diffaugment_lecam" / "operative_config.gin").read_text()
    assert "lecam_weight = 0.3" in operative and "'color,translation,cutout'" in operative
    assert small_data.ARMS["none"] == []
    with pytest.raises(ConfigError, match="unknown arms"):
        small_data.small_data(arms=("nope",), work_dir=str(tmp_path))
