"""GAN losses, selected in gin by reference (`loss.fn = @hinge`).

Every function returns per-example losses (shape [batch]); the step function
reduces them with `tf.nn.compute_average_loss` over the *global* batch, which is
what keeps gradients identical across replica counts. The math comes from
tensorflow-gan through `tfgan_compat`, with reduction NONE. `loss()` hands the chosen
function on as a LossPair, which says whether it pairs G's images with real ones.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Tuple

import gin
import tensorflow as tf

from paragan_tf.tfgan_compat import losses_impl

_NONE = tf.compat.v1.losses.Reduction.NONE
LossFn = Callable[[tf.Tensor, tf.Tensor, tf.Tensor], Tuple[tf.Tensor, tf.Tensor]]


@gin.configurable
def hinge(real_logits: tf.Tensor, fake_logits: tf.Tensor, gen_logits: tf.Tensor):
    """Hinge loss (Lim & Ye 2017; BigGAN's choice). Returns (D loss, G loss) per example."""
    d = losses_impl.wasserstein_hinge_discriminator_loss(
        real_logits, fake_logits, loss_collection=None, reduction=_NONE)
    g = losses_impl.wasserstein_hinge_generator_loss(
        gen_logits, loss_collection=None, reduction=_NONE)
    return d, g


@gin.configurable
def non_saturating(real_logits: tf.Tensor, fake_logits: tf.Tensor, gen_logits: tf.Tensor):
    """Non-saturating logistic loss (Goodfellow et al. 2014), no label smoothing."""
    d = losses_impl.modified_discriminator_loss(
        real_logits, fake_logits, label_smoothing=0.0, loss_collection=None, reduction=_NONE)
    g = losses_impl.modified_generator_loss(gen_logits, loss_collection=None, reduction=_NONE)
    return d, g


@gin.configurable
def wasserstein(real_logits: tf.Tensor, fake_logits: tf.Tensor, gen_logits: tf.Tensor):
    """Wasserstein critic loss (Arjovsky et al. 2017); pair it with a gradient penalty."""
    d = losses_impl.wasserstein_discriminator_loss(
        real_logits, fake_logits, loss_collection=None, reduction=_NONE)
    g = losses_impl.wasserstein_generator_loss(gen_logits, loss_collection=None, reduction=_NONE)
    return d, g


@gin.configurable
def relativistic(real_logits: tf.Tensor, fake_logits: tf.Tensor, gen_logits: tf.Tensor):
    """Relativistic pairing loss (Jolicoeur-Martineau 2019; R3GAN, Huang et al. 2024).

    D: softplus(D(G(z_i)) - D(x_i)); G: softplus(D(x_i) - D(G(z_i))): each fake is
    judged against a real partner, not against a fixed threshold. R3GAN pairs it
    with R1 and R2 (`penalties.r1_gamma`, `penalties.r2_gamma`). In G's update
    `real_logits` are D's logits of the step's last real batch (train/step.py).
    """
    d = tf.nn.softplus(fake_logits - real_logits)
    g = tf.nn.softplus(real_logits - gen_logits)
    return d, g


# Losses whose G term reads D's logits of real partners (G's update takes a real batch).
PAIRS_REAL = (relativistic,)


@dataclasses.dataclass(frozen=True)
class LossPair:
    """A loss function as a step uses it: D's and G's per-example terms, and whether G's
    term pairs G's images with real ones (`pairs_real`: G's update reads a real batch)."""

    fn: LossFn
    pairs_real: bool = False

    @property
    def name(self) -> str:
        return getattr(self.fn, "__name__", repr(self.fn))

    def d(self, real_logits: tf.Tensor, fake_logits: tf.Tensor) -> tf.Tensor:
        return self.fn(real_logits, fake_logits, fake_logits)[0]

    def g(self, real_logits: tf.Tensor, gen_logits: tf.Tensor) -> tf.Tensor:
        return self.fn(real_logits, gen_logits, gen_logits)[1]


@gin.configurable
def loss(fn: LossFn = hinge) -> LossPair:
    """The loss pair chosen in gin: `loss.fn = @non_saturating`."""
    return LossPair(fn, pairs_real=fn in PAIRS_REAL)
