"""Convolutions with few output positions, their kernel's gradient taken as a matmul.

A convolution's kernel gradient is (the input's patches)^T @ (the output's gradient): a
matmul whose inner dimension is the number of output positions, batch x height x width.
Where that is small (a U-Net's innermost levels: 1 to 16 px sides at batch 1 to 16),
TensorFlow's kernel for it (oneDNN's Conv2DBackpropFilter on x86, NHWC) took 1.3 to 11 times
what the patches and the matmul take in bfloat16 on a Zen 4 (docs/benchmarks.md, "The
kernel gradient as a matmul"); above `FEW_POSITIONS` the kernel is as fast or faster, and
the convolution is TensorFlow's own, gradient and all. Forward and input gradient are
TensorFlow's ops either way; only the kernel's gradient changes kernel, to the same values
up to the compute dtype's rounding (tests/models/test_thin_convs.py).
"""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

# Output positions (batch x height x width) up to which the kernel gradient is a matmul:
# faster at 256 and below (batch 16 at 4 x 4, batch 1 at 16 x 16), about even near 1,000,
# slower above (the patches copy the input 4 to 16 times; the step at 2,048: 1.24x).
FEW_POSITIONS = 512


def few_positions(output_shape: Sequence) -> bool:
    """Whether a convolution with this (static) NHWC output shape takes the matmul."""
    batch, height, width = list(output_shape)[:3]
    return None not in (batch, height, width) and batch * height * width <= FEW_POSITIONS


def _same_padding(side: int, out_side: int, size: int, stride: int):
    total = max((out_side - 1) * stride + size - side, 0)
    return [total // 2, total - total // 2]


def kernel_gradient(inputs: tf.Tensor, output_grad: tf.Tensor, kernel_shape: Sequence[int],
                    stride: int, padding: str) -> tf.Tensor:
    """The gradient of tf.nn.conv2d(inputs, kernel, stride, padding)'s kernel
    [kh, kw, in, out], given its output's gradient, as patches^T @ output_grad."""
    kh, kw, channels, filters = kernel_shape
    if padding == "SAME":
        _, height, width, _ = inputs.shape
        inputs = tf.pad(inputs, [[0, 0], _same_padding(height, output_grad.shape[1], kh, stride),
                                 _same_padding(width, output_grad.shape[2], kw, stride), [0, 0]])
    patches = tf.image.extract_patches(inputs, [1, kh, kw, 1], [1, stride, stride, 1],
                                       [1, 1, 1, 1], "VALID")  # [b, oh, ow, kh * kw * in]
    grad = tf.matmul(tf.reshape(patches, [-1, kh * kw * channels]),
                     tf.reshape(output_grad, [-1, filters]), transpose_a=True)
    return tf.reshape(grad, kernel_shape)


def conv2d(inputs: tf.Tensor, kernel: tf.Tensor, stride: int, padding: str) -> tf.Tensor:
    """tf.nn.conv2d (NHWC, square stride), its kernel gradient a matmul where the output
    has few positions."""
    batch, height, width, _ = inputs.shape
    if padding == "SAME":
        sides = [None if n is None else -(-n // stride) for n in (height, width)]
    else:
        sides = [None if n is None else (n - size) // stride + 1
                 for n, size in zip((height, width), kernel.shape[:2])]
    if not few_positions([batch, *sides]):
        return tf.nn.conv2d(inputs, kernel, stride, padding)
    strides = [1, stride, stride, 1]

    @tf.custom_gradient
    def thin(inputs, kernel):
        def grad(output_grad):
            input_grad = tf.raw_ops.Conv2DBackpropInput(
                input_sizes=tf.shape(inputs), filter=kernel, out_backprop=output_grad,
                strides=strides, padding=padding)
            return input_grad, kernel_gradient(inputs, output_grad, kernel.shape, stride,
                                               padding)
        return tf.nn.conv2d(inputs, kernel, stride, padding), grad
    return thin(inputs, tf.convert_to_tensor(kernel))


def conv2d_transpose(inputs: tf.Tensor, kernel: tf.Tensor, stride: int) -> tf.Tensor:
    """tf.nn.conv2d_transpose (NHWC, SAME; kernel [kh, kw, out, in]) to `stride` times the
    input's sides, its kernel gradient a matmul where the input has few positions (the
    adjoint convolution's output)."""
    batch, height, width, _ = inputs.shape
    filters = kernel.shape[2]
    if not few_positions(inputs.shape):  # the batch or a side may be known only at run time
        shape = tf.shape(inputs)
        output = tf.nn.conv2d_transpose(
            inputs, kernel, tf.stack([shape[0], stride * shape[1], stride * shape[2], filters]),
            stride, "SAME")
        return tf.ensure_shape(output, [batch, None if height is None else stride * height,
                                        None if width is None else stride * width, filters])
    output_shape = [batch, stride * height, stride * width, filters]

    @tf.custom_gradient
    def thin(inputs, kernel):
        def grad(output_grad):
            input_grad = tf.nn.conv2d(output_grad, kernel, stride, "SAME")
            # The adjoint convolution runs from the output to the input: its kernel
            # gradient, with the input as that convolution's output gradient.
            return input_grad, kernel_gradient(output_grad, inputs, kernel.shape, stride,
                                               "SAME")
        return tf.nn.conv2d_transpose(inputs, kernel, output_shape, stride, "SAME"), grad
    return thin(inputs, tf.convert_to_tensor(kernel))
