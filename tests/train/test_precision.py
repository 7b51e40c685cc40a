"""train/precision.py: one network's loss scaling, as the step and the NaN guard use it."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tf_keras as keras

from paragan_tf.train.precision import Precision, differs_across_precisions


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
