"""Convolutions with few output positions (models/thin_convs.py): the kernel gradient taken
as a matmul equals TensorFlow's own, the forward and the input gradient are TensorFlow's,
and the matmul is taken exactly where the output has few positions."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.models import thin_convs


def _gradients(conv, x, kernel):
    """conv's output and the gradients of a random projection of it."""
    with tf.GradientTape() as tape:
        tape.watch([x, kernel])
        y = conv(x, kernel)
        loss = tf.reduce_sum(y * tf.random.stateless_normal(y.shape, [3, 4]))
    return [y] + tape.gradient(loss, [x, kernel])


def _assert_same(ours, tensorflows):
    for a, b in zip(ours, tensorflows):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * float(tf.reduce_max(tf.abs(b))))


# (input shape, kernel shape, stride, padding): the U-Net's way down and the PatchGAN's
# stride-1 convolutions, odd sides and widths included.
CONVS = [([16, 8, 8, 24], [4, 4, 24, 8], 2, "SAME"),
         ([1, 32, 32, 3], [4, 4, 3, 5], 2, "SAME"),
         ([2, 9, 9, 6], [4, 4, 6, 4], 1, "VALID"),
         ([3, 7, 5, 2], [4, 4, 2, 3], 2, "SAME")]


@pytest.mark.parametrize("shape,kernel_shape,stride,padding", CONVS)
def test_conv2d_gradients_are_tensorflows(shape, kernel_shape, stride, padding):
    x = tf.random.stateless_normal(shape, [1, 2])
    kernel = tf.random.stateless_normal(kernel_shape, [5, 6])
    ours = _gradients(lambda a, b: thin_convs.conv2d(a, b, stride, padding), x, kernel)
    assert thin_convs.few_positions(ours[0].shape)  # the matmul was taken
    _assert_same(ours, _gradients(lambda a, b: tf.nn.conv2d(a, b, stride, padding), x,
                                  kernel))


@pytest.mark.parametrize("shape,filters", [([16, 4, 4, 12], 6), ([1, 16, 16, 4], 3),
                                           ([2, 1, 1, 8], 8)])
def test_conv2d_transpose_gradients_are_tensorflows(shape, filters):
    x = tf.random.stateless_normal(shape, [1, 2])
    kernel = tf.random.stateless_normal([4, 4, filters, shape[-1]], [5, 6])
    out = [shape[0], 2 * shape[1], 2 * shape[2], filters]
    assert thin_convs.few_positions(shape)
    ours = _gradients(lambda a, b: thin_convs.conv2d_transpose(a, b, 2), x, kernel)
    _assert_same(ours, _gradients(
        lambda a, b: tf.nn.conv2d_transpose(a, b, out, 2, "SAME"), x, kernel))


def test_the_matmul_only_where_the_output_has_few_positions():
    limit = thin_convs.FEW_POSITIONS
    assert thin_convs.few_positions([limit // 64, 8, 8, 3])
    assert not thin_convs.few_positions([limit // 64 + 1, 8, 8, 3])
    assert not thin_convs.few_positions([None, 1, 1, 3])  # batch unknown: TensorFlow's own

    def ops(conv, x, kernel):
        graph = tf.function(lambda a, b: _gradients(conv, a, b)).get_concrete_function(
            x, kernel).graph
        return {op.type for op in graph.get_operations()}
    kernel = tf.zeros([4, 4, 2, 2])
    conv = lambda a, b: thin_convs.conv2d(a, b, 2, "SAME")  # noqa: E731
    assert "ExtractImagePatches" in ops(conv, tf.zeros([2, 8, 8, 2]), kernel)
    many = ops(conv, tf.zeros([2, 64, 64, 2]), kernel)  # 2 x 32 x 32 output positions
    assert "ExtractImagePatches" not in many and "Conv2DBackpropFilter" in many
