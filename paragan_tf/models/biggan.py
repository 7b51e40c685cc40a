"""BigGAN Generator and projection Discriminator (Brock et al. 2019), Keras-subclassed.

Architectures follow the reference implementation (BigGAN-PyTorch): per
resolution, the channel multipliers of each residual block. The 32x32 variant
with ch=64, no shared embedding, no hierarchical z and no attention is the
reference CIFAR-10 BigGAN: G 4,304,387 and D 4,207,361 trainable parameters.
"""

from __future__ import annotations

from typing import Sequence

import gin
import tensorflow as tf
import tf_keras as keras

from paragan_tf.errors import ConfigError
from paragan_tf.layout import round_up
from paragan_tf.models import layers

BOTTOM_WIDTH = 4

# resolution -> (in multipliers, out multipliers) of the generator's up blocks.
G_ARCH = {
    32: ([4, 4, 4], [4, 4, 4]),
    64: ([16, 16, 8, 4], [16, 8, 4, 2]),
    128: ([16, 16, 8, 4, 2], [16, 8, 4, 2, 1]),
    256: ([16, 16, 8, 8, 4, 2], [16, 8, 8, 4, 2, 1]),
    512: ([16, 16, 8, 8, 4, 2, 1], [16, 8, 8, 4, 2, 1, 1]),
}
# resolution -> (out multipliers, downsample flags) of the discriminator's blocks;
# each block's input is the previous block's output (the first reads the image).
D_ARCH = {
    32: ([4, 4, 4, 4], [True, True, False, False]),
    64: ([1, 2, 4, 8, 16], [True] * 4 + [False]),
    128: ([1, 2, 4, 8, 16, 16], [True] * 5 + [False]),
    256: ([1, 2, 4, 8, 8, 16, 16], [True] * 6 + [False]),
    512: ([1, 1, 2, 4, 8, 8, 16, 16], [True] * 7 + [False]),
}


def _widths(multipliers, ch: int, multiple: int):
    """Channel multipliers -> block widths: ch * multiplier, rounded up to `multiple`."""
    return tuple([round_up(m * ch, multiple) for m in mults] for mults in multipliers)


def _check_resolution(resolution: int, who: str) -> None:
    if resolution not in G_ARCH:
        raise ConfigError(f"{who}.resolution={resolution} is not supported; "
                          f"choose one of {sorted(G_ARCH)}")


@gin.configurable
class Generator(keras.Model):
    """Class-conditional BigGAN generator: (z, labels) -> images in [-1, 1], NHWC.

    labels: int class ids [b], or float class weights [b, num_classes] (rows
    summing to 1) to condition on a mix of classes (class interpolation).

    Args:
      resolution: output height and width (32, 64, 128, 256 or 512).
      num_classes: number of classes; normally taken from the dataset.
      out_channels: image channels; normally taken from the dataset.
      ch: base width; block widths are ch times the paper's multipliers.
      dim_z: latent size.
      shared_dim: size of the shared class embedding; 0 means per-class BN
        gains/biases (the CIFAR reference), >0 means BN gains/biases are linear
        maps of [shared embedding, z chunk].
      hierarchical_z: split z into one chunk for the stem and one per block.
      attention_resolutions: resolutions after whose block to self-attend.
      sync_bn: cross-replica batch statistics.
      bn_momentum: momentum of the BN moving averages used at inference.
      channel_multiple: block widths rounded up to a multiple of this (set by the
        layout, see layout.py).
    """

    def __init__(self, resolution: int = gin.REQUIRED, num_classes: int = gin.REQUIRED,
                 out_channels: int = 3, ch: int = 64, dim_z: int = 128, shared_dim: int = 0,
                 hierarchical_z: bool = False, attention_resolutions: Sequence[int] = (),
                 sync_bn: bool = False, bn_momentum: float = 0.9, channel_multiple: int = 1,
                 name: str = "generator"):
        super().__init__(name=name)
        _check_resolution(resolution, "Generator")
        in_widths, out_widths = _widths(G_ARCH[resolution], ch, channel_multiple)
        self.resolution, self.num_classes, self.dim_z = resolution, num_classes, dim_z
        self.hierarchical_z = hierarchical_z
        num_slots = len(in_widths) + 1 if hierarchical_z else 1
        if dim_z % num_slots:
            raise ConfigError(f"Generator.dim_z={dim_z} must be divisible by the {num_slots} "
                              f"hierarchical z chunks at resolution {resolution}")
        self.z_chunk = dim_z // num_slots
        if hierarchical_z and not shared_dim:
            raise ConfigError("Generator.hierarchical_z=True needs Generator.shared_dim > 0")
        self.shared = (keras.layers.Embedding(num_classes, shared_dim, name="shared")
                       if shared_dim else None)
        conditioning = "vector" if shared_dim else "class"
        self.linear = layers.SNDense(BOTTOM_WIDTH * BOTTOM_WIDTH * in_widths[0], name="linear")
        self.stem_shape = (BOTTOM_WIDTH, BOTTOM_WIDTH, in_widths[0])
        self.blocks, self.attention = [], []
        for i, (cin, cout) in enumerate(zip(in_widths, out_widths)):
            self.blocks.append(layers.GBlock(
                cin, cout, upsample=True, conditioning=conditioning,
                num_classes=num_classes, sync_bn=sync_bn, bn_momentum=bn_momentum,
                name=f"block{i}"))
            self.attention.append(layers.maybe_attention(
                BOTTOM_WIDTH * 2 ** (i + 1), attention_resolutions, f"attention{i}"))
        self.out_bn = layers.ConditionalBatchNorm("none", sync=sync_bn, momentum=bn_momentum,
                                                  name="out_bn")
        self.out_conv = layers.SNConv2D(out_channels, 3, name="out_conv")

    def call(self, inputs, training=False):
        z, labels = inputs
        z = tf.cast(z, tf.float32)
        chunks = (tf.split(z, len(self.blocks) + 1, axis=-1) if self.hierarchical_z
                  else [z] * (len(self.blocks) + 1))
        if self.shared is not None:
            embedded = (tf.matmul(tf.cast(labels, tf.float32), self.shared.embeddings)
                        if labels.dtype.is_floating else self.shared(labels))
            conditions = [tf.concat([embedded, c], -1) if self.hierarchical_z else embedded
                          for c in chunks[1:]]
        else:
            conditions = [labels] * len(self.blocks)
        h = self.linear(chunks[0], training=training)
        h = tf.reshape(h, (-1,) + self.stem_shape)
        for block, attention, condition in zip(self.blocks, self.attention, conditions):
            h = block(h, condition, training=training)
            if attention is not None:
                h = attention(h, training=training)
        h = tf.nn.relu(self.out_bn(h, training=training))
        # tanh in float32 so images are exact in [-1, 1] whatever the compute dtype.
        return tf.tanh(tf.cast(self.out_conv(h, training=training), tf.float32))


@gin.configurable
class Discriminator(keras.Model):
    """Projection discriminator: (images, labels) -> float32 logits of shape [batch].

    Args:
      resolution: input height and width (32, 64, 128, 256 or 512).
      num_classes: number of classes; normally taken from the dataset.
      ch: base width.
      attention_resolutions: resolutions after whose block to self-attend.
      channel_multiple: block widths rounded up to a multiple of this (layout.py).
    """

    def __init__(self, resolution: int = gin.REQUIRED, num_classes: int = gin.REQUIRED,
                 ch: int = 64, attention_resolutions: Sequence[int] = (),
                 channel_multiple: int = 1, name: str = "discriminator"):
        super().__init__(name=name)
        _check_resolution(resolution, "Discriminator")
        out_mult, down = D_ARCH[resolution]
        (widths,) = _widths((out_mult,), ch, channel_multiple)
        self.blocks, self.attention = [], []
        in_channels, size = None, resolution
        for i, (cout, downsample) in enumerate(zip(widths, down)):
            self.blocks.append(layers.DBlock(
                # The image (in_channels None) never matches a block width: shortcut conv.
                in_channels or 0, cout, downsample=downsample,
                preactivation=i > 0, name=f"block{i}"))
            size = size // 2 if downsample else size
            self.attention.append(layers.maybe_attention(size, attention_resolutions,
                                                         f"attention{i}"))
            in_channels = cout
        # The logits are computed in float32 whatever the layout (mixed precision).
        self.linear = layers.SNDense(1, name="linear", compute_dtype="float32")
        self.embed = layers.SNEmbedding(num_classes, in_channels, name="embed",
                                        compute_dtype="float32")

    def call(self, inputs, training=False):
        images, labels = inputs
        h = images
        for block, attention in zip(self.blocks, self.attention):
            h = block(h, training=training)
            if attention is not None:
                h = attention(h, training=training)
        h = tf.reduce_sum(tf.cast(tf.nn.relu(h), tf.float32), axis=[1, 2])  # global sum pool
        logits = tf.cast(self.linear(h, training=training), tf.float32)[:, 0]
        projection = tf.reduce_sum(
            tf.cast(self.embed(labels, training=training), tf.float32) * h, axis=1)
        return logits + projection


def count_trainable(model: keras.Model) -> int:
    """Number of trainable scalars of a built model."""
    return int(sum(tf.size(v).numpy() for v in model.trainable_variables))


def build(generator: Generator, discriminator: Discriminator, image_channels: int) -> None:
    """Creates every variable by one tiny forward pass (needed before restore/optimizer.build)."""
    z = tf.zeros([2, generator.dim_z])
    labels = tf.zeros([2], tf.int32)
    generator((z, labels), training=False)
    size = generator.resolution
    discriminator((tf.zeros([2, size, size, image_channels]), labels), training=False)
