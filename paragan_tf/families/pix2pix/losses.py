"""pix2pix's losses (Isola et al. 2017): a conditional adversarial loss on the PatchGAN's
logits (one per patch, families/pix2pix/networks.py) plus l1_weight x L1 between G's
output and the target.

As the reference's pix2pix model (pytorch-CycleGAN-and-pix2pix at 78913853,
models/pix2pix_model.py) forms them, per example (the step averages examples over the
global batch, train/step.py):

  D  0.5 x (gan(D(input, G(input)), fake) + gan(D(input, target), real))
  G  gan(D(input, G(input)), real) + l1_weight x mean |G(input) - target|

each `gan` term the mean over the example's patches. The adversarial loss is chosen in gin
by reference, as BigGAN's (`pix2pix_loss.gan = @vanilla`): `vanilla` the binary
cross-entropy of the logits (the paper's; the reference's BCE of D's sigmoid), `lsgan` the
squared distance of the logits from 1 (real) or 0 (fake). Each returns (D's term, G's
adversarial term) per example, as objective/losses.py's functions do. The paper's
l1_weight is 100. tests/families/test_pix2pix_losses.py holds these against the
reference's own losses.
"""

from __future__ import annotations

import gin
import tensorflow as tf


def _per_example(values: tf.Tensor) -> tf.Tensor:
    """[b, ...] -> [b]: the mean over everything but the batch."""
    return tf.reduce_mean(tf.reshape(values, [tf.shape(values)[0], -1]), axis=1)


def _pair(term, real_logits: tf.Tensor, fake_logits: tf.Tensor, gen_logits: tf.Tensor):
    """(D's loss, G's adversarial loss) per example from `term(logits, real)`."""
    d = 0.5 * (term(fake_logits, False) + term(real_logits, True))
    return d, term(gen_logits, True)


def _cross_entropy(logits: tf.Tensor, real: bool) -> tf.Tensor:
    # -log sigmoid(x) for real, -log(1 - sigmoid(x)) for fake
    logits = tf.cast(logits, tf.float32)
    return _per_example(tf.nn.softplus(-logits if real else logits))


def _squared(logits: tf.Tensor, real: bool) -> tf.Tensor:
    return _per_example(tf.square(tf.cast(logits, tf.float32) - (1.0 if real else 0.0)))


@gin.configurable
def vanilla(real_logits: tf.Tensor, fake_logits: tf.Tensor, gen_logits: tf.Tensor):
    """The paper's GAN loss on patch logits: binary cross-entropy (see the module doc)."""
    return _pair(_cross_entropy, real_logits, fake_logits, gen_logits)


@gin.configurable
def lsgan(real_logits: tf.Tensor, fake_logits: tf.Tensor, gen_logits: tf.Tensor):
    """The least-squares GAN loss on patch logits (see the module doc)."""
    return _pair(_squared, real_logits, fake_logits, gen_logits)


def l1(outputs: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
    """mean |output - target| per example, float32."""
    return _per_example(tf.abs(tf.cast(outputs, tf.float32) - tf.cast(targets, tf.float32)))
