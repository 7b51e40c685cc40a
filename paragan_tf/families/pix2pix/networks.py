"""pix2pix's networks (Isola et al. 2017): a U-Net generator and a 70 x 70 PatchGAN
discriminator that judges an output beside its input, Keras-subclassed beside BigGAN
(families/biggan/networks.py) and built from the same layers (models/layers.py): float32
variables cast to the compute dtype, batch norm with float32 statistics and optional cross-replica
sync, spectral norm optional (off in the paper).

The reference is junyanz/pytorch-CycleGAN-and-pix2pix at 78913853, models/networks.py:
UnetGenerator ('unet_256': 8 halvings to 1 x 1, ngf 64, batch norm, dropout 0.5 in the
three innermost 512-channel decoder blocks, as its pix2pix model builds it) and
NLayerDiscriminator ('basic': 3 layers, ndf 64, batch norm) on the input and output
concatenated along channels, input first. Layer for layer: 4 x 4 convolutions of stride 2
down (SAME padding is the reference's padding 1 at even sides), 4 x 4 transposed
convolutions of stride 2 up, no bias before a batch norm (nor in the first convolution),
LeakyReLU 0.2 down, ReLU up, tanh out. Weights start as the reference's: normal with
std 0.02, biases 0; batch-norm gains start at 1 (the reference draws them from N(1, 0.02)).
tests/families/test_pix2pix_networks.py checks the parameter counts and the outputs against
the reference's (tests/golden/make_pix2pix_golden.py).

Both are gin-configurable (`Pix2PixGenerator.ch`, `PatchDiscriminator.num_layers`, ...);
the pix2pix family (families/pix2pix/family.py) builds them, and the train step trains them
through its objective (families/pix2pix/objective.py).
"""

from __future__ import annotations

import math

import gin
import tensorflow as tf
import tf_keras as keras

from paragan_tf.errors import ConfigError
from paragan_tf.families import contract
from paragan_tf.models import round_up
from paragan_tf.models import layers
from paragan_tf.models import thin_convs

# Stride 1 with one pixel of zeros on each side: the PatchGAN's last two convolutions. Padded
# by an op of its own, then a VALID convolution: oneDNN serves no gradient of a convolution
# with explicit padding, and TensorFlow's own kernels took 69 % of a bfloat16 step there
# (docs/benchmarks.md, "pix2pix against its reference").
_PAD_ONE = [[0, 0], [1, 1], [1, 1], [0, 0]]


class Conv4x4(layers.SpectralNormalized):
    """4 x 4 convolution (NHWC): stride 2 halves the side, stride 1 takes one pixel off."""

    def __init__(self, filters: int, strides: int = 2, use_bias: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.filters, self.strides, self.use_bias = filters, strides, use_bias

    def build(self, input_shape):
        self._build_kernel((4, 4, int(input_shape[-1]), self.filters), self.use_bias)
        super().build(input_shape)

    def call(self, x, training=False):
        x = tf.cast(x, self.op_dtype)
        if self.strides == 1:
            x = tf.pad(x, _PAD_ONE)
        y = thin_convs.conv2d(x, self._normalized(self.kernel, training), self.strides,
                              "SAME" if self.strides == 2 else "VALID")
        return y if self.bias is None else y + tf.cast(self.bias, y.dtype)


class UpConv4x4(layers.SpectralNormalized):
    """4 x 4 transposed convolution of stride 2 (Conv4x4's adjoint): doubles the side.

    The kernel is kept as the op takes it, [4, 4, out, in], so that no step transposes it
    (the transposes were 5 % of a bfloat16 step at 256 px); with spectral norm it is kept as
    a convolution's, [4, 4, in, out], so that the power iteration normalises the matrix the
    reference's does (out channels against the rest), and transposed for the op.
    """

    def __init__(self, filters: int, use_bias: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.filters, self.use_bias = filters, use_bias

    def build(self, input_shape):
        inner = int(input_shape[-1])
        if self.spectral_norm:
            self._build_kernel((4, 4, inner, self.filters), self.use_bias)
        else:
            self._build_kernel((4, 4, self.filters, inner), False)
            self.bias = (self.add_weight(name="bias", shape=(self.filters,),
                                         initializer="zeros", dtype=tf.float32)
                         if self.use_bias else None)
        super().build(input_shape)

    def call(self, x, training=False):
        x = tf.cast(x, self.op_dtype)
        kernel = self._normalized(self.kernel, training)
        if self.spectral_norm:
            kernel = tf.transpose(kernel, [0, 1, 3, 2])
        y = thin_convs.conv2d_transpose(x, kernel, 2)
        return y if self.bias is None else y + tf.cast(self.bias, y.dtype)


def _numerics(init: str, bn_epsilon: float) -> layers.Numerics:
    try:  # torch's batch norm: its moving variance is the unbiased batch variance's average
        return layers.Numerics(init=init, bn_epsilon=bn_epsilon, bn_unbiased=True)
    except ValueError as e:
        raise ConfigError(f"pix2pix: {e}") from None


def _batch_norm(name: str, sync_bn: bool, momentum: float,
                numerics: layers.Numerics) -> layers.ConditionalBatchNorm:
    return layers.ConditionalBatchNorm("none", sync=sync_bn, momentum=momentum,
                                       numerics=numerics, name=name)


# What the run decides, not the gin file: the data's side and channels, the layout's width
# multiple, the network's name (G or its EMA copy).
_RUN_DECIDES = ["resolution", "in_channels", "out_channels", "channel_multiple", "name"]


@gin.configurable(denylist=_RUN_DECIDES)
class Pix2PixGenerator(contract.NoBlocks, keras.Model):
    """U-Net: input images -> output images in [-1, 1], NHWC, the side halved down to 1 x 1
    and doubled back, each decoder level fed the encoder's activations of its side.

    Args:
      resolution: the images' side, a power of 2 from 32 (log2 of it levels: 256 is the
        reference's unet_256, 128 its unet_128).
      in_channels, out_channels: the input's and the output's channels.
      ch: the outermost level's width (ngf); a level is twice the one outside it, up to 8 ch.
      dropout: rate in the decoder levels of 8 ch between the innermost and the three
        outermost ones (the paper's noise; 0 turns it off).
      spectral_norm: spectrally normalise every convolution (not in the paper).
      sync_bn, bn_momentum, init, bn_epsilon: as BigGAN's (families/biggan/networks.py); the
        reference's are no sync, momentum 0.9 (its 0.1), 'N02', 1e-5.
      channel_multiple: every width rounded up to a multiple of this (the layout's).
    """

    state_copies = 4  # with its EMA copy, as BigGAN's generator
    dim_z = 0  # it takes no noise vector: dropout is pix2pix's noise

    def __init__(self, resolution: int = 256, in_channels: int = 3, out_channels: int = 3,
                 ch: int = 64, dropout: float = 0.5, spectral_norm: bool = False,
                 sync_bn: bool = False, bn_momentum: float = 0.9, init: str = "N02",
                 bn_epsilon: float = 1e-5, channel_multiple: int = 1,
                 name: str = "generator"):
        super().__init__(name=name)
        depth = round(math.log2(resolution)) if resolution > 0 else 0
        if resolution < 32 or 2 ** depth != resolution:
            raise ConfigError(f"Pix2PixGenerator.resolution={resolution}: a power of 2 from "
                              f"32 (the U-Net halves it to 1 x 1)")
        if not 0.0 <= dropout < 1.0:
            raise ConfigError(f"Pix2PixGenerator.dropout={dropout}: a rate in [0, 1)")
        numerics = _numerics(init, bn_epsilon)
        conv = dict(numerics=numerics, spectral_norm=spectral_norm)
        self.resolution, self.in_channels, self.out_channels = resolution, in_channels, out_channels
        # Level i's inner width.
        widths = [round_up(min(ch * 2 ** i, 8 * ch), channel_multiple)
                  for i in range(depth)]
        self.down = [Conv4x4(w, use_bias=False, name=f"down{i}", **conv)
                     for i, w in enumerate(widths)]
        # Neither the outermost level (the image itself) nor the innermost (1 x 1) is normed.
        self.down_norm = [_batch_norm(f"down_norm{i}", sync_bn, bn_momentum, numerics)
                          if 0 < i < depth - 1 else None for i in range(depth)]
        self.up = [UpConv4x4(widths[i - 1] if i else out_channels, use_bias=i == 0,
                             name=f"up{i}", **conv) for i in range(depth)]
        self.up_norm = [_batch_norm(f"up_norm{i}", sync_bn, bn_momentum, numerics)
                        if i else None for i in range(depth)]
        self.dropout = [keras.layers.Dropout(dropout, name=f"dropout{i}")
                        if dropout and 4 <= i < depth - 1 else None for i in range(depth)]

    def call_inputs(self, batch: int) -> tf.TensorSpec:
        """What a call takes for `batch` examples: their inputs."""
        side = self.resolution
        return tf.TensorSpec([batch, side, side, self.in_channels], tf.float32)

    def call(self, images, training=False):
        skips, h = [], images
        for i, (conv, norm) in enumerate(zip(self.down, self.down_norm)):
            skips.append(h)
            h = conv(tf.nn.leaky_relu(h, 0.2) if i else h, training=training)
            if norm is not None:
                h = norm(h, training=training)
        for i in reversed(range(len(self.up))):
            h = self.up[i](tf.nn.relu(h), training=training)
            if i == 0:
                # tanh in float32 so images are exact in [-1, 1] whatever the compute dtype.
                return tf.tanh(tf.cast(h, tf.float32))
            h = self.up_norm[i](h, training=training)
            if self.dropout[i] is not None:
                h = self.dropout[i](h, training=training)
            h = tf.concat([tf.cast(skips[i], h.dtype), h], -1)


@gin.configurable(denylist=["channel_multiple", "name"])
class PatchDiscriminator(contract.NoBlocks, keras.Model):
    """PatchGAN: (images, their inputs) -> float32 logits [b, side, side, 1], one per
    70 x 70 patch with 3 layers (side = resolution / 8 - 2).

    Args:
      num_layers: stride-2 convolutions (the reference's n_layers; 3 is 'basic').
      ch: the first layer's width (ndf); each next one doubles it, up to 8 ch.
      spectral_norm, sync_bn, bn_momentum, init, bn_epsilon, channel_multiple: as
        Pix2PixGenerator's.
    """

    def __init__(self, num_layers: int = 3, ch: int = 64, spectral_norm: bool = False,
                 sync_bn: bool = False, bn_momentum: float = 0.9, init: str = "N02",
                 bn_epsilon: float = 1e-5, channel_multiple: int = 1,
                 name: str = "discriminator"):
        super().__init__(name=name)
        if num_layers < 1:
            raise ConfigError(f"PatchDiscriminator.num_layers={num_layers}: at least 1")
        numerics = _numerics(init, bn_epsilon)
        conv = dict(numerics=numerics, spectral_norm=spectral_norm)
        widths = [round_up(ch * min(2 ** n, 8), channel_multiple)
                  for n in range(num_layers + 1)]
        self.convs = [Conv4x4(w, strides=2 if n < num_layers else 1, use_bias=n == 0,
                              name=f"conv{n}", **conv) for n, w in enumerate(widths)]
        self.norms = [_batch_norm(f"norm{n}", sync_bn, bn_momentum, numerics) if n else None
                      for n in range(num_layers + 1)]
        self.out_conv = Conv4x4(1, strides=1, compute_dtype="float32", name="out_conv", **conv)

    @staticmethod
    def call_inputs(batch: int, size: int, channels: int):
        """What a call takes for `batch` examples: (images, their inputs)."""
        spec = tf.TensorSpec([batch, size, size, channels], tf.float32)
        return (spec, spec)

    @property
    def judges_groups(self) -> bool:
        """Whether `call(..., groups=n)` equals n calls: batch norm keeps each group's
        statistics apart, but spectral norm's power iteration would step once, not n times."""
        return not self.convs[0].spectral_norm

    def call(self, inputs, training=False, groups: int = 1):
        """groups > 1: the batch is that many batches judged as that many calls in order
        (batch norm's statistics each its own; only where `judges_groups`), each
        convolution run once over all of them."""
        if groups > 1 and training and not self.judges_groups:
            raise ValueError("PatchDiscriminator: groups with spectral norm would step its "
                             "power iteration once for all of them")
        images, condition = inputs
        h = tf.concat([tf.cast(condition, images.dtype), images], -1)
        for conv, norm in zip(self.convs, self.norms):
            h = conv(h, training=training)
            if norm is not None:
                h = norm(h, training=training, groups=groups)
            h = tf.nn.leaky_relu(h, 0.2)
        return self.out_conv(h, training=training)


def build(generator: Pix2PixGenerator, discriminator: PatchDiscriminator,
          batch: int = 1) -> None:
    """Creates both networks' variables with one call each (Keras makes them at the first)."""
    side = generator.resolution
    images = tf.zeros([batch, side, side, generator.in_channels])
    outputs = generator(images)
    discriminator((outputs, images))
