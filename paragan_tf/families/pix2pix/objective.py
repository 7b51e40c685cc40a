"""pix2pix's objective: what one train step computes from a batch of pairs.

A real batch is pairs, [b, r, r, 2c] input first (data/paired.py); G(inputs) makes the
outputs; D((images, inputs)) gives patch logits, on the outputs and on the targets as the
reference's separate calls do: one call in groups where D allows it, batch norm's
statistics each batch's own (a plain joint call would mix them); the losses are
families/pix2pix/losses.py's. The noise batches are not read: dropout is pix2pix's noise.
As the reference's iteration, G runs once per micro-batch: its outputs are judged in D's
update and then differentiated in G's (`reuses_fakes`), so both see one dropout mask and
batch norm's moving statistics move once.
"""

from __future__ import annotations

import gin
import tensorflow as tf

from paragan_tf.data import paired
from paragan_tf.errors import ConfigError
from paragan_tf.families import contract
from paragan_tf.families.pix2pix import losses
from paragan_tf.objective import losses as losses_lib


@gin.configurable("pix2pix_loss")
class ImageToImage(contract.Objective):
    """pix2pix's objective (see the module doc): `gan` the adversarial loss by reference
    (@vanilla, the paper's, or @lsgan), L1 weighted by `l1_weight` (the paper's 100);
    `pix2pix_loss.*` in gin."""

    pairs_real = True  # G's update translates the real batch's inputs
    reuses_fakes = True

    def __init__(self, gan: losses_lib.LossFn = losses.vanilla, l1_weight: float = 100.0):
        if isinstance(gan, str):
            raise ConfigError(f"pix2pix_loss.gan={gan!r}: the loss is chosen by reference "
                              f"now, pix2pix_loss.gan = @{gan}")
        if l1_weight < 0:
            raise ConfigError(f"pix2pix_loss.l1_weight={l1_weight} must be >= 0")
        self.gan, self.l1_weight = losses_lib.LossPair(gan), l1_weight

    def batch_specs(self, generator, batch: int, size: int, channels: int):
        """(a real batch's spec: pairs, a noise batch's: unread)."""
        del generator
        labels = tf.TensorSpec([batch], tf.int32)
        return ((tf.TensorSpec([batch, size, size, 2 * channels], tf.float32), labels),
                (tf.TensorSpec([batch, 0], tf.float32), labels))

    def generate(self, generator, real, noise) -> tf.Tensor:
        del noise
        inputs, _ = paired.split_pair(real[0])
        return generator(inputs, training=True)

    def judge(self, discriminator, fakes: tf.Tensor, real, noise):
        del noise
        inputs, targets = paired.split_pair(real[0])
        fakes = tf.cast(fakes, targets.dtype)
        if discriminator.judges_groups:
            # One call on both batches, batch norm's statistics each its own: the two calls'
            # values with each convolution run once (docs/benchmarks.md, "D judges both
            # batches in one call").
            both = discriminator(
                (tf.concat([fakes, targets], 0), tf.concat([inputs, inputs], 0)),
                training=True, groups=2)
            fake_logits, real_logits = tf.split(both, 2)
        else:
            fake_logits = discriminator((fakes, inputs), training=True)
            real_logits = discriminator((targets, inputs), training=True)
        return real_logits, fake_logits, None

    def d_loss(self, real_logits, fake_logits, seen, noise) -> tf.Tensor:
        del seen, noise
        return self.gan.d(real_logits, fake_logits)

    def judge_fakes(self, discriminator, fakes: tf.Tensor, real, noise):
        del noise
        inputs, _ = paired.split_pair(real[0])
        logits = discriminator((fakes, inputs), training=True)
        return logits, logits

    def g_loss(self, gen_logits, real_logits, fakes, real) -> tf.Tensor:
        _, targets = paired.split_pair(real[0])
        return self.gan.g(real_logits, gen_logits) + self.l1_weight * losses.l1(fakes, targets)

    @staticmethod
    def per_example(logits: tf.Tensor) -> tf.Tensor:
        return tf.reduce_mean(tf.reshape(logits, [tf.shape(logits)[0], -1]), axis=1)
