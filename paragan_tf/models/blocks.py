"""BigGAN's attention and residual blocks (G's up, D's down), built from models/layers.py's
spectrally normalised convolutions and conditional batch norm."""

from __future__ import annotations

from typing import Optional

import tensorflow as tf
import tf_keras as keras

from paragan_tf.models import layers


class SelfAttention(keras.layers.Layer):
    """SAGAN self-attention with SN 1x1 convs and 2x2 max-pooled keys/values."""

    def __init__(self, numerics: layers.Numerics = layers.REFERENCE, **kwargs):
        super().__init__(**kwargs)
        self.numerics = numerics

    def build(self, input_shape):
        c = int(input_shape[-1])
        if c < 8:
            raise ValueError(f"self-attention needs at least 8 channels, got {c}")
        conv = dict(use_bias=False, numerics=self.numerics)
        self.theta = layers.SNConv2D(c // 8, 1, name="theta", **conv)
        self.phi = layers.SNConv2D(c // 8, 1, name="phi", **conv)
        self.g = layers.SNConv2D(c // 2, 1, name="g", **conv)
        self.o = layers.SNConv2D(c, 1, name="o", **conv)
        self.gamma = self.add_weight(name="gamma", shape=(), initializer="zeros")
        super().build(input_shape)

    def call(self, x, training=False):
        shape = tf.shape(x)
        b, h, w, c = shape[0], shape[1], shape[2], x.shape[-1]
        theta = tf.reshape(self.theta(x, training=training), [b, h * w, c // 8])
        phi = tf.nn.max_pool2d(self.phi(x, training=training), 2, 2, "VALID")
        phi = tf.reshape(phi, [b, -1, c // 8])
        g = tf.nn.max_pool2d(self.g(x, training=training), 2, 2, "VALID")
        g = tf.reshape(g, [b, -1, c // 2])
        # Softmax in float32: bf16 logits over h*w keys lose too much precision.
        beta = tf.nn.softmax(tf.cast(tf.matmul(theta, phi, transpose_b=True), tf.float32))
        attended = tf.reshape(tf.matmul(tf.cast(beta, g.dtype), g), [b, h, w, c // 2])
        return x + tf.cast(self.gamma, x.dtype) * self.o(attended, training=training)


def _upsample(x):
    """Nearest-neighbour x2: each pixel repeated along w, then each row along h. Two stacks
    and two reshapes: tf.repeat gives the same numbers but builds ~20 ops a call, and every
    op is paid again in each trace of the step (tests trace it once per process)."""
    _, h, w, c = x.shape
    x = tf.reshape(tf.stack([x, x], axis=3), [-1, h, 2 * w, c])
    return tf.reshape(tf.stack([x, x], axis=2), [-1, 2 * h, 2 * w, c])


def _downsample(x):
    return tf.nn.avg_pool2d(x, 2, 2, "VALID")


class GBlock(keras.layers.Layer):
    """Generator residual block: BN-ReLU-up-conv3x3-BN-ReLU-conv3x3, plus an up-1x1 shortcut."""

    def __init__(self, in_channels: int, out_channels: int, upsample: bool = True,
                 conditioning: str = "class", num_classes: int = 0, sync_bn: bool = False,
                 bn_momentum: float = 0.9, numerics: layers.Numerics = layers.REFERENCE, **kwargs):
        super().__init__(**kwargs)
        self.upsample = upsample
        bn = dict(conditioning=conditioning, num_classes=num_classes, sync=sync_bn,
                  momentum=bn_momentum, numerics=numerics)
        self.bn1 = layers.ConditionalBatchNorm(name="bn1", **bn)
        self.conv1 = layers.SNConv2D(out_channels, 3, name="conv1", numerics=numerics)
        self.bn2 = layers.ConditionalBatchNorm(name="bn2", **bn)
        self.conv2 = layers.SNConv2D(out_channels, 3, name="conv2", numerics=numerics)
        # A learnable shortcut only where the block changes shape (reference counts).
        self.shortcut = (layers.SNConv2D(out_channels, 1, name="shortcut", numerics=numerics)
                         if in_channels != out_channels or upsample else None)

    def call(self, x, condition, training=False):
        h = tf.nn.relu(self.bn1(x, condition, training=training))
        if self.upsample:
            h, x = _upsample(h), _upsample(x)
        h = self.conv1(h, training=training)
        h = tf.nn.relu(self.bn2(h, condition, training=training))
        h = self.conv2(h, training=training)
        if self.shortcut is not None:
            x = self.shortcut(x, training=training)
        return h + tf.cast(x, h.dtype)


class DBlock(keras.layers.Layer):
    """Discriminator residual block: (ReLU)-conv3x3-ReLU-conv3x3-(avgpool), plus a shortcut."""

    def __init__(self, in_channels: int, out_channels: int, downsample: bool = True,
                 preactivation: bool = True, numerics: layers.Numerics = layers.REFERENCE,
                 **kwargs):
        super().__init__(**kwargs)
        self.downsample = downsample
        self.preactivation = preactivation
        self.conv1 = layers.SNConv2D(out_channels, 3, name="conv1", numerics=numerics)
        self.conv2 = layers.SNConv2D(out_channels, 3, name="conv2", numerics=numerics)
        self.shortcut = (layers.SNConv2D(out_channels, 1, name="shortcut", numerics=numerics)
                         if in_channels != out_channels or downsample else None)

    def call(self, x, training=False):
        h = tf.nn.relu(x) if self.preactivation else x
        h = self.conv1(h, training=training)
        h = self.conv2(tf.nn.relu(h), training=training)
        if self.downsample:
            h = _downsample(h)
        # A 1x1 conv and 2x2 average pooling commute exactly; pooling first is cheaper.
        sc = _downsample(x) if self.downsample else x
        if self.shortcut is not None:
            sc = self.shortcut(sc, training=training)
        return h + tf.cast(sc, h.dtype)


def maybe_attention(resolution: int, attention_resolutions, name: str,
                    numerics: layers.Numerics = layers.REFERENCE) -> Optional[SelfAttention]:
    """A SelfAttention layer when `resolution` is one of the configured ones."""
    return (SelfAttention(numerics=numerics, name=name)
            if resolution in tuple(attention_resolutions) else None)
