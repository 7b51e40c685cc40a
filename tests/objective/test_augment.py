"""DiffAugment (objective/augment.py): its transforms against the reference, and the augment.*
settings it refuses by name.

The DiffAugment goldens come from the reference implementation
(mit-han-lab/data-efficient-gans, DiffAugment_tf.py at its GitHub HEAD, read on
2026-11-24) run on X below with its random draws replaced by the fixed values
each test passes to ours.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.errors import ConfigError
from paragan_tf.objective import augment

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


def test_ada_and_diffaugment_together_are_refused_by_name():
    with pytest.raises(ConfigError, match=r"augment.policy='translation' and "
                       r"augment.ada_target=0.6 are alternatives"):
        augment.AugmentConfig(policy="translation", ada_target=0.6)


def test_a_bad_ada_setting_is_refused_by_name_before_the_models_are_built(tiny_gin):
    from paragan_tf.train import experiment
    tiny_gin("augment.ada_target = 1.5")
    with pytest.raises(ConfigError, match=r"augment.ada_target=1.5 must be in \(-1, 1\)"):
        experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
