"""What one train step computes from a batch, per GAN family: how G makes its images, how D
judges them beside the real ones, and the per-example losses. The step (train/step.py) owns
the tapes, the replicas, accumulation, clipping, precision and the NaN guard, and asks its
objective for everything that depends on what the networks take and return:

  ClassConditional  BigGAN: G((z, labels)); D((images, labels)) -> one logit per image, on
                    fakes and reals in one call (one power iteration per update); a loss
                    pair of objective/losses.py; D's inputs go through the augmentation
  ImageToImage      pix2pix: a real batch is pairs, [b, r, r, 2c] input first
                    (data/paired.py); G(inputs); D((images, inputs)) -> patch logits, on
                    fakes and on reals in separate calls, as the reference does (with batch
                    norm in D a joint call would mix their statistics); objective/pix2pix.py's
                    losses. The noise batches are not read: dropout is pix2pix's noise.

Batches are (images, labels) for real examples and (z, labels) for noise, as the input
pipelines make them (data/pipeline.py).
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import gin
import tensorflow as tf

from paragan_tf.data import paired
from paragan_tf.errors import ConfigError
from paragan_tf.objective import augment as augment_lib
from paragan_tf.objective import losses as losses_lib
from paragan_tf.objective import pix2pix

Batch = Tuple[tf.Tensor, tf.Tensor]
Augment = Optional[Callable[[tf.Tensor, tf.Tensor], tf.Tensor]]


class ClassConditional:
    """BigGAN's objective (see the module doc); `augment` as train/step.py's StepConfig."""

    # D's penalties (objective/d_terms.py) and augmentation apply to its D's inputs.
    takes_penalties = takes_augmentation = True

    def __init__(self, loss_fn: losses_lib.LossFn, augment: Augment = None):
        self.loss_fn, self.augment = loss_fn, augment
        # A loss that pairs G's images with real ones (relativistic) reads the real batch
        # in G's update.
        self.pairs_real = bool(getattr(loss_fn, "pairs_real", False))

    def _augmented(self, images: tf.Tensor, z: tf.Tensor, salt: int) -> tf.Tensor:
        if self.augment is None:
            return images
        return self.augment(images, augment_lib.seed_from(z, salt))

    @staticmethod
    def batch_specs(generator, batch: int, size: int, channels: int):
        """(a real batch's spec, a noise batch's) of `batch` examples (traced plans)."""
        return ((tf.TensorSpec([batch, size, size, channels], tf.float32),
                 tf.TensorSpec([batch], tf.int32)), generator.call_inputs(batch))

    def generate(self, generator, real: Optional[Batch], noise: Batch) -> tf.Tensor:
        z, labels = noise
        return generator((z, labels), training=True)

    def judge(self, discriminator, fakes: tf.Tensor, real: Batch, noise: Batch):
        """D on fakes and reals: (real logits, fake logits, D's inputs and labels, the
        fakes first: what D's penalties read)."""
        images, labels = real
        z, fake_labels = noise
        inputs = self._augmented(tf.concat([tf.cast(fakes, images.dtype), images], 0), z, 1)
        both_labels = tf.concat([fake_labels, labels], 0)
        fake_logits, real_logits = tf.split(
            discriminator((inputs, both_labels), training=True), 2)
        return real_logits, fake_logits, (inputs, both_labels)

    def d_loss(self, real_logits, fake_logits) -> tf.Tensor:
        return self.loss_fn(real_logits, fake_logits, fake_logits)[0]

    def judge_fakes(self, discriminator, fakes: tf.Tensor, real: Optional[Batch],
                    noise: Batch):
        """(D's logits of G's images, D's logits of the paired real ones or those again)."""
        z, fake_labels = noise
        if not self.pairs_real:
            logits = discriminator((self._augmented(fakes, z, 3), fake_labels),
                                   training=True)
            return logits, logits
        images, labels = real
        logits = discriminator(
            (self._augmented(tf.concat([tf.cast(fakes, images.dtype), images], 0), z, 3),
             tf.concat([fake_labels, labels], 0)), training=True)
        gen_logits, real_logits = tf.split(logits, 2)
        return gen_logits, real_logits

    def g_loss(self, gen_logits, real_logits, fakes, real) -> tf.Tensor:
        del fakes, real
        return self.loss_fn(real_logits, gen_logits, gen_logits)[1]

    @staticmethod
    def per_example(logits: tf.Tensor) -> tf.Tensor:
        """D's logits as one number per example (the step's logit metrics, ADA's signs)."""
        return logits


@gin.configurable("pix2pix_loss")
class ImageToImage:
    """pix2pix's objective (see the module doc): `gan` 'vanilla' (the paper's) or 'lsgan',
    L1 weighted by `l1_weight` (the paper's 100); `pix2pix_loss.*` in gin."""

    pairs_real = True  # G's update translates the real batch's inputs
    takes_penalties = takes_augmentation = False  # not yet: the pair would need both

    def __init__(self, gan: str = "vanilla", l1_weight: float = 100.0):
        if gan not in pix2pix.GANS or l1_weight < 0:
            raise ConfigError(f"pix2pix_loss.gan={gan!r} must be one of {pix2pix.GANS} and "
                              f"pix2pix_loss.l1_weight={l1_weight} >= 0")
        self.gan, self.l1_weight = gan, l1_weight

    @staticmethod
    def batch_specs(generator, batch: int, size: int, channels: int):
        """(a real batch's spec: pairs, a noise batch's: unread) of `batch` examples."""
        del generator
        labels = tf.TensorSpec([batch], tf.int32)
        return ((tf.TensorSpec([batch, size, size, 2 * channels], tf.float32), labels),
                (tf.TensorSpec([batch, 0], tf.float32), labels))

    def generate(self, generator, real: Batch, noise: Optional[Batch]) -> tf.Tensor:
        del noise
        inputs, _ = paired.split_pair(real[0])
        return generator(inputs, training=True)

    def judge(self, discriminator, fakes: tf.Tensor, real: Batch, noise: Optional[Batch]):
        del noise
        inputs, targets = paired.split_pair(real[0])
        fake_logits = discriminator((tf.cast(fakes, targets.dtype), inputs), training=True)
        real_logits = discriminator((targets, inputs), training=True)
        return real_logits, fake_logits, None

    def d_loss(self, real_logits, fake_logits) -> tf.Tensor:
        return pix2pix.d_loss(real_logits, fake_logits, self.gan)

    def judge_fakes(self, discriminator, fakes: tf.Tensor, real: Batch,
                    noise: Optional[Batch]):
        del noise
        inputs, _ = paired.split_pair(real[0])
        logits = discriminator((fakes, inputs), training=True)
        return logits, logits

    def g_loss(self, gen_logits, real_logits, fakes, real) -> tf.Tensor:
        del real_logits
        _, targets = paired.split_pair(real[0])
        adversarial, l1 = pix2pix.g_loss(gen_logits, fakes, targets, self.gan, self.l1_weight)
        return adversarial + l1

    @staticmethod
    def per_example(logits: tf.Tensor) -> tf.Tensor:
        return tf.reduce_mean(tf.reshape(logits, [tf.shape(logits)[0], -1]), axis=1)
