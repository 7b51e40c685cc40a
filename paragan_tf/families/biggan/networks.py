"""BigGAN Generator and projection Discriminator (Brock et al. 2019), Keras-subclassed.

Architectures follow the reference implementation (BigGAN-PyTorch at 98459431):
per resolution, the channel multipliers of each residual block. Trainable
parameter counts equal the reference's, counted by instantiating it with torch
(tests/families/test_biggan_networks.py pins them): the 32x32 CIFAR-10 BigGAN (ch=64,
per-class BN, no attention) G 4,304,387 / D 4,207,361; at ch=96, dim_z 120, shared
embedding 128, hierarchical z, attention at 64 and 1000 classes, 128 px
G 70,433,988 / D 87,982,370 and 256 px G 82,108,548 / D 99,225,890.

Beyond the reference:
- 512 px D: the reference has no 512 px discriminator table. Ours repeats its
  rule (each table prepends one more full-resolution block of the smallest
  width): [1, 1, 2, 4, 8, 8, 16, 16] x ch, 7 downsampling blocks and one not.
- 1024 px (ParaGAN's high-resolution BigGAN): one more up block in G and one
  more down block in D, both at the smallest width (1 x ch), so the 512 px
  network is the 1024 px one without its outermost block on each side:
  G [16, 16, 8, 8, 4, 2, 1, 1] -> [16, 8, 8, 4, 2, 1, 1, 1],
  D [1, 1, 1, 2, 4, 8, 8, 16, 16] with 8 downsampling blocks.
"""

from __future__ import annotations

from typing import Sequence

import gin
import tensorflow as tf
import tf_keras as keras

from paragan_tf.distribute import staging
from paragan_tf.errors import ConfigError
from paragan_tf.models import round_up
from paragan_tf.models import blocks
from paragan_tf.models import layers
from paragan_tf.models import recompute as recompute_lib

BOTTOM_WIDTH = 4

# resolution -> (in multipliers, out multipliers) of the generator's up blocks.
G_ARCH = {
    32: ([4, 4, 4], [4, 4, 4]),
    64: ([16, 16, 8, 4], [16, 8, 4, 2]),
    128: ([16, 16, 8, 4, 2], [16, 8, 4, 2, 1]),
    256: ([16, 16, 8, 8, 4, 2], [16, 8, 8, 4, 2, 1]),
    512: ([16, 16, 8, 8, 4, 2, 1], [16, 8, 8, 4, 2, 1, 1]),
    1024: ([16, 16, 8, 8, 4, 2, 1, 1], [16, 8, 8, 4, 2, 1, 1, 1]),
}
# resolution -> (out multipliers, downsample flags) of the discriminator's blocks;
# each block's input is the previous block's output (the first reads the image).
D_ARCH = {
    32: ([4, 4, 4, 4], [True, True, False, False]),
    64: ([1, 2, 4, 8, 16], [True] * 4 + [False]),
    128: ([1, 2, 4, 8, 16, 16], [True] * 5 + [False]),
    256: ([1, 2, 4, 8, 8, 16, 16], [True] * 6 + [False]),
    512: ([1, 1, 2, 4, 8, 8, 16, 16], [True] * 7 + [False]),
    1024: ([1, 1, 1, 2, 4, 8, 8, 16, 16], [True] * 8 + [False]),
}


def _widths(multipliers, ch: int, multiple: int):
    """Channel multipliers -> block widths: ch * multiplier, rounded up to `multiple`."""
    return tuple([round_up(m * ch, multiple) for m in mults] for mults in multipliers)


def _check_resolution(resolution: int, who: str) -> None:
    if resolution not in G_ARCH:
        raise ConfigError(f"{who}.resolution={resolution} is not supported; "
                          f"choose one of {sorted(G_ARCH)}")


def _numerics(who: str, init: str, embedding_init: str, bn_epsilon: float,
              sn_epsilon: float) -> layers.Numerics:
    try:
        return layers.Numerics(init, embedding_init, bn_epsilon, sn_epsilon)
    except ValueError as e:
        raise ConfigError(f"{who}.{e}") from None


def _run_block(block_fn, tensors, state, recompute: bool, device=None, staged=False):
    """block_fn(*tensors), rematerialised in the backward pass when `recompute`, on its
    pipeline stage's `device` when one is given: its forward, and its backward too when
    `staged` (every call after the one that makes the variables)."""
    def run(*tensors):
        if recompute:
            return recompute_lib.call(block_fn, tensors, state)
        return block_fn(*tensors)
    if device is None:
        return run(*tensors)
    with staging.on_device(device):
        return staging.call(run, tensors, device) if staged else run(*tensors)


class _Staged:
    """What both networks share for pipeline stages (distribute/staging.py): the device of
    each block, set by `place_blocks` before the first call, and each block's cost."""

    block_devices: Sequence[str] = ()
    block_shapes: Sequence[tuple] = ()  # (in channels, out channels, output side) per block
    # Copies of each weight a stage holds in training (the weight, Adam's two moments and,
    # for G, its EMA), and examples per element of the per-replica batch (D runs on the
    # real and the fake images at once).
    state_copies: int = 3
    examples_per_batch: int = 1

    def place_blocks(self, devices: Sequence[str]) -> None:
        """Block i (and what comes before the first or after the last) on devices[i]."""
        if len(devices) != len(self.blocks):
            raise ValueError(f"{len(devices)} devices for {len(self.blocks)} blocks")
        if self.built:
            raise ValueError("place_blocks must come before the model's first call")
        self.block_devices = tuple(devices)

    def _device(self, i: int):
        return self.block_devices[i] if self.block_devices else None

    def block_costs(self, batch: int) -> list:
        """Each block's bytes in training at a per-replica `batch`, estimated from its
        widths: its weights x `state_copies`, plus the activations it keeps (its input and
        four tensors of its output's size per example)."""
        examples, costs = batch * self.examples_per_batch, []
        for cin, cout, side in self.block_shapes:
            params = 9 * cin * cout + 9 * cout * cout + cin * cout
            costs.append(4 * (self.state_copies * params +
                              examples * side * side * (cin + 4 * cout)))
        return costs


# `recompute` is a trainer choice (train.recompute), not part of the architecture.
@gin.configurable(denylist=["recompute"])
class Generator(_Staged, keras.Model):
    """Class-conditional BigGAN generator: (z, labels) -> images in [-1, 1], NHWC.

    labels: int class ids [b], or float class weights [b, num_classes] (rows
    summing to 1) to condition on a mix of classes (class interpolation).

    Args:
      resolution: output height and width (32, 64, 128, 256, 512 or 1024).
      num_classes: number of classes; normally taken from the dataset.
      out_channels: image channels; normally taken from the dataset.
      ch: base width; block widths are ch times the paper's multipliers.
      dim_z: latent size.
      shared_dim: size of the shared class embedding; 0 means per-class BN
        gains/biases (the CIFAR reference), >0 means BN gains/biases are linear
        maps of [shared embedding, z chunk].
      hierarchical_z: split z into one chunk for the stem and one per block
        (dim_z must divide evenly: the reference silently drops the remainder,
        120 -> 119 at 256 px, we ask for the divisible size instead).
      attention_resolutions: resolutions after whose block to self-attend.
      sync_bn: cross-replica batch statistics.
      bn_momentum: momentum of the BN moving averages used at inference.
      channel_multiple: block widths rounded up to a multiple of this (set by the
        layout, see layout/rules.py).
      init, embedding_init, bn_epsilon, sn_epsilon: reference numerics, see
        layers.Numerics (BigGAN-PyTorch's G_init, BN_eps, SN_eps). The shared
        embedding is initialised with `init`, as the reference's.
      recompute: rematerialise each residual block (with its attention) in the
        backward pass (train.recompute sets it; see recompute.py).
    """

    state_copies = 4  # with its EMA copy

    def __init__(self, resolution: int = gin.REQUIRED, num_classes: int = gin.REQUIRED,
                 out_channels: int = 3, ch: int = 64, dim_z: int = 128, shared_dim: int = 0,
                 hierarchical_z: bool = False, attention_resolutions: Sequence[int] = (),
                 sync_bn: bool = False, bn_momentum: float = 0.9, channel_multiple: int = 1,
                 init: str = "ortho", embedding_init: str = "init", bn_epsilon: float = 1e-5,
                 sn_epsilon: float = 1e-12, recompute: bool = False,
                 name: str = "generator"):
        super().__init__(name=name)
        _check_resolution(resolution, "Generator")
        numerics = _numerics("Generator", init, embedding_init, bn_epsilon, sn_epsilon)
        self.recompute = recompute
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
        # float32 whatever the policy: the embedding is concatenated with float32 z
        # chunks (under mixed_bfloat16 a bf16 embedding made that concat fail).
        self.shared = (keras.layers.Embedding(num_classes, shared_dim, name="shared",
                                              embeddings_initializer=numerics.initializer(),
                                              dtype="float32")
                       if shared_dim else None)
        conditioning = "vector" if shared_dim else "class"
        self.linear = layers.SNDense(BOTTOM_WIDTH * BOTTOM_WIDTH * in_widths[0], name="linear",
                                     numerics=numerics)
        self.stem_shape = (BOTTOM_WIDTH, BOTTOM_WIDTH, in_widths[0])
        self.blocks, self.attention = [], []
        self.block_shapes = tuple((cin, cout, BOTTOM_WIDTH * 2 ** (i + 1))
                                  for i, (cin, cout) in enumerate(zip(in_widths, out_widths)))
        for i, (cin, cout) in enumerate(zip(in_widths, out_widths)):
            self.blocks.append(blocks.GBlock(
                cin, cout, upsample=True, conditioning=conditioning,
                num_classes=num_classes, sync_bn=sync_bn, bn_momentum=bn_momentum,
                numerics=numerics, name=f"block{i}"))
            self.attention.append(blocks.maybe_attention(
                BOTTOM_WIDTH * 2 ** (i + 1), attention_resolutions, f"attention{i}", numerics))
        self.out_bn = layers.ConditionalBatchNorm("none", sync=sync_bn, momentum=bn_momentum,
                                                  numerics=numerics, name="out_bn")
        self.out_conv = layers.SNConv2D(out_channels, 3, name="out_conv", numerics=numerics)

    def _call(self, inputs, training):
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
        for i, (block, attention, condition) in enumerate(zip(self.blocks, self.attention,
                                                              conditions)):
            h = self._block(block, attention, h, condition, training, self._device(i))
        def head(h):
            h = tf.nn.relu(self.out_bn(h, training=training))
            # tanh in float32 so images are exact in [-1, 1] whatever the compute dtype.
            return tf.tanh(tf.cast(self.out_conv(h, training=training), tf.float32))
        # On the last stage, backward too: at full resolution it is the largest tensor.
        return _run_block(head, (h,), None, False, self._device(-1), self.built)

    @property
    def out_channels(self) -> int:
        return self.out_conv.filters

    def call_inputs(self, batch: int):
        """What a call takes for `batch` samples: (z, labels)."""
        return (tf.TensorSpec([batch, self.dim_z], tf.float32),
                tf.TensorSpec([batch], tf.int32))

    def call(self, inputs, training=False):
        with staging.on_device(self._device(0)):  # the stem, on the first stage
            return self._call(inputs, training)

    def _block(self, block, attention, h, condition, training, device):
        # Integer class ids stay in the closure (no gradient); a float condition
        # (shared embedding + z chunk) is an input, so the embedding gets its gradient.
        float_condition = condition.dtype.is_floating

        def run(h, *maybe_condition):
            h = block(h, maybe_condition[0] if float_condition else condition,
                      training=training)
            return h if attention is None else attention(h, training=training)
        tensors = (h, condition) if float_condition else (h,)
        return _run_block(run, tensors, recompute_lib.block_state(block, attention),
                          self.recompute and training, device, self.built)


@gin.configurable(denylist=["recompute"])
class Discriminator(_Staged, keras.Model):
    """Projection discriminator: (images, labels) -> float32 logits of shape [batch].

    Args:
      resolution: input height and width (32, 64, 128, 256, 512 or 1024).
      num_classes: number of classes; normally taken from the dataset.
      ch: base width.
      attention_resolutions: resolutions after whose block to self-attend.
      channel_multiple: block widths rounded up to a multiple of this (layout/rules.py).
      init, sn_epsilon: reference numerics (BigGAN-PyTorch's D_init, SN_eps); the
        projection embedding is initialised with `init` too.
      recompute: rematerialise each residual block in the backward pass.
    """

    examples_per_batch = 2  # real and fake images at once

    def __init__(self, resolution: int = gin.REQUIRED, num_classes: int = gin.REQUIRED,
                 ch: int = 64, attention_resolutions: Sequence[int] = (),
                 channel_multiple: int = 1, init: str = "ortho", sn_epsilon: float = 1e-12,
                 recompute: bool = False, name: str = "discriminator"):
        super().__init__(name=name)
        _check_resolution(resolution, "Discriminator")
        numerics = _numerics("Discriminator", init, "init", 1e-5, sn_epsilon)
        self.recompute = recompute
        out_mult, down = D_ARCH[resolution]
        (widths,) = _widths((out_mult,), ch, channel_multiple)
        self.blocks, self.attention, shapes = [], [], []
        in_channels, size = None, resolution
        for i, (cout, downsample) in enumerate(zip(widths, down)):
            shapes.append((in_channels or 3, cout, size // 2 if downsample else size))
            self.blocks.append(blocks.DBlock(
                # The image (in_channels None) never matches a block width: shortcut conv.
                in_channels or 0, cout, downsample=downsample,
                preactivation=i > 0, numerics=numerics, name=f"block{i}"))
            size = size // 2 if downsample else size
            self.attention.append(blocks.maybe_attention(size, attention_resolutions,
                                                         f"attention{i}", numerics))
            in_channels = cout
        self.block_shapes = tuple(shapes)
        # The logits are computed in float32 whatever the layout (mixed precision).
        self.linear = layers.SNDense(1, name="linear", compute_dtype="float32",
                                     numerics=numerics)
        self.embed = layers.SNEmbedding(num_classes, in_channels, name="embed",
                                        compute_dtype="float32", numerics=numerics)

    @staticmethod
    def call_inputs(batch: int, size: int, channels: int):
        """What a call takes for `batch` images: (images, labels)."""
        return (tf.TensorSpec([batch, size, size, channels], tf.float32),
                tf.TensorSpec([batch], tf.int32))

    def call(self, inputs, training=False):
        images, labels = inputs
        h = images
        for i, (block, attention) in enumerate(zip(self.blocks, self.attention)):
            def run(h, block=block, attention=attention):
                h = block(h, training=training)
                return h if attention is None else attention(h, training=training)
            h = _run_block(run, (h,), recompute_lib.block_state(block, attention),
                           self.recompute and training, self._device(i), self.built)
        def head(h):
            h = tf.reduce_sum(tf.cast(tf.nn.relu(h), tf.float32), axis=[1, 2])  # sum pool
            logits = tf.cast(self.linear(h, training=training), tf.float32)[:, 0]
            projection = tf.reduce_sum(
                tf.cast(self.embed(labels, training=training), tf.float32) * h, axis=1)
            return logits + projection
        return _run_block(head, (h,), None, False, self._device(-1), self.built)  # last stage


def build(generator: Generator, discriminator: Discriminator, image_channels: int) -> None:
    """Creates every variable by one tiny forward pass (needed before restore/optimizer.build)."""
    build_generator(generator)
    build_discriminator(discriminator, generator.resolution, image_channels)


def build_generator(generator: Generator) -> None:
    """Creates G's variables by one tiny forward pass."""
    generator((tf.zeros([2, generator.dim_z]), tf.zeros([2], tf.int32)), training=False)


def build_discriminator(discriminator: Discriminator, size: int, image_channels: int) -> None:
    """Creates D's variables by one tiny forward pass on `size` x `size` images."""
    discriminator((tf.zeros([2, size, size, image_channels]), tf.zeros([2], tf.int32)),
                  training=False)
