"""BigGAN's objective: what one train step computes from a batch of labelled images.

G((z, labels)) makes the fakes; D((images, labels)) gives one logit per image, on fakes and
reals in one call (one power iteration per update); the loss is a pair of
objective/losses.py (`loss.fn`); D's inputs go through the augmentation (DiffAugment or
ADA) and D's extra terms (objective/d_terms.py: R1/R2, LeCam, bCR, and the state that follows
D's outputs) are this objective's own, added to D's loss in each micro-batch.
"""

from __future__ import annotations

from typing import Callable, Optional

import tensorflow as tf

from paragan_tf.families import contract
from paragan_tf.objective import augment as augment_lib
from paragan_tf.objective import d_terms as d_terms_lib
from paragan_tf.objective import losses as losses_lib

Augment = Optional[Callable[[tf.Tensor, tf.Tensor], tf.Tensor]]


class ClassConditional(contract.Objective):
    """BigGAN's objective (see the module doc).

    loss: the loss pair; augment: what D's inputs go through (None: nothing);
    d_terms: D's penalties and the state following its outputs (None: none).
    """

    def __init__(self, loss: losses_lib.LossPair, augment: Augment = None,
                 d_terms: Optional[d_terms_lib.DTerms] = None):
        self.loss, self.augment, self.d_terms = loss, augment, d_terms
        # A loss that pairs G's images with real ones (relativistic) reads the real batch
        # in G's update.
        self.pairs_real = loss.pairs_real

    def _augmented(self, images: tf.Tensor, z: tf.Tensor, salt: int) -> tf.Tensor:
        if self.augment is None:
            return images
        return self.augment(images, augment_lib.seed_from(z, salt))

    def batch_specs(self, generator, batch: int, size: int, channels: int):
        return ((tf.TensorSpec([batch, size, size, channels], tf.float32),
                 tf.TensorSpec([batch], tf.int32)), generator.call_inputs(batch))

    def generate(self, generator, real, noise) -> tf.Tensor:
        z, labels = noise
        return generator((z, labels), training=True)

    def judge(self, discriminator, fakes: tf.Tensor, real, noise):
        """D on fakes and reals: (real logits, fake logits, D's inputs and labels, the
        fakes first: what D's penalties read)."""
        images, labels = real
        z, fake_labels = noise
        inputs = self._augmented(tf.concat([tf.cast(fakes, images.dtype), images], 0), z, 1)
        both_labels = tf.concat([fake_labels, labels], 0)
        fake_logits, real_logits = tf.split(
            discriminator((inputs, both_labels), training=True), 2)
        return real_logits, fake_logits, (inputs, both_labels)

    def d_loss(self, real_logits, fake_logits, seen, noise) -> tf.Tensor:
        loss = self.loss.d(real_logits, fake_logits)
        if self.d_terms is not None and self.d_terms.any:  # they read what D saw
            loss += self.d_terms.terms(*seen, real_logits, fake_logits, noise[0])
        return loss

    def after_d_update(self, real_sum, fake_sum, sign_sum, count: float, applied) -> None:
        if self.d_terms is not None:
            self.d_terms.after_update(real_sum, fake_sum, sign_sum, count, applied)

    def judge_fakes(self, discriminator, fakes: tf.Tensor, real, noise):
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
        return self.loss.g(real_logits, gen_logits)
