"""paragan_tf/precision.py: one network's loss scaling, as the step and the NaN guard use it."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from paragan_tf.errors import ConfigError
from paragan_tf.precision import POLICIES, Precision, differs_across_precisions, policy


def test_without_a_loss_scale_nothing_is_scaled_and_nothing_lowers():
    adam = keras.optimizers.Adam()
    precision = Precision(adam)
    assert not precision.scaling and precision.inner is adam and precision.loss_scale is None
    loss, grads = tf.constant(3.0), [tf.constant([1.0, 2.0])]
    assert precision.scale(loss) is loss and precision.unscale(grads) is grads
    precision.update([tf.constant([np.inf])])  # nothing to update
    assert not bool(precision.lowered(None))


def test_a_dynamic_scale_scales_halves_on_an_overflow_and_doubles_after_its_growth_steps():
    wrapped = keras.mixed_precision.LossScaleOptimizer(
        keras.optimizers.Adam(), dynamic=True, initial_scale=8.0, dynamic_growth_steps=2)
    precision = Precision(wrapped)
    assert precision.scaling and precision.inner is wrapped.inner_optimizer
    assert float(precision.scale(tf.constant(3.0))) == 24.0
    np.testing.assert_array_equal(precision.unscale([tf.constant([8.0, 16.0])])[0], [1.0, 2.0])
    before = precision.loss_scale.numpy()
    precision.update([tf.constant([1.0, np.nan])])  # an overflow: halved
    assert float(precision.loss_scale) == 4.0 and bool(precision.lowered(before))
    before = precision.loss_scale.numpy()
    for _ in range(2):  # two finite updates in a row: doubled
        precision.update([tf.constant([1.0, 2.0])])
    assert float(precision.loss_scale) == 8.0 and not bool(precision.lowered(before))


def test_only_an_optimizers_loss_scale_differs_across_precisions():
    assert differs_across_precisions("g_optimizer/loss_scale/current_loss_scale")
    assert differs_across_precisions("d_optimizer/loss_scale/good_steps")
    assert not differs_across_precisions("g_optimizer/iter")
    assert not differs_across_precisions("loss_scale")
    assert not differs_across_precisions("generator/blocks/0/loss_scale_kernel")


def test_every_policy_is_a_layout_choice_with_its_peak_and_an_unknown_one_is_refused():
    from paragan_tf.layout import rules  # pylint: disable=import-outside-toplevel
    assert rules.PRECISIONS == ("auto", "float32", "mixed_bfloat16", "mixed_float16")
    assert {name: (p.keras_policy, p.peak, p.loss_scaling) for name, p in POLICIES.items()} == {
        "float32": ("float32", "fp32", False), "mixed_bfloat16": ("mixed_bfloat16", "bf16", False),
        "mixed_float16": ("mixed_float16", "fp16", True)}
    with pytest.raises(ConfigError, match=r"layout.precision='float8'; choose one of "
                                          r"\('auto', 'float32'"):
        policy("float8")
    adam = keras.optimizers.Adam()
    assert policy("mixed_bfloat16").wrap(adam, "G", 8.0, 2) is adam
    wrapped = policy("mixed_float16").wrap(adam, "G", 8.0, 2)
    assert Precision(wrapped).scaling and float(wrapped.loss_scale) == 8.0
