"""pix2pix's objective (Isola et al. 2017): a conditional adversarial loss on the PatchGAN's
logits (one per patch, models/pix2pix.py) plus l1_weight x L1 between G's output and the
target.

As the reference's pix2pix model (pytorch-CycleGAN-and-pix2pix at 78913853,
models/pix2pix_model.py) forms them, per example (the step averages examples over the
global batch, train/step.py):

  D  0.5 x (gan(D(input, G(input)), fake) + gan(D(input, target), real))
  G  gan(D(input, G(input)), real) + l1_weight x mean |G(input) - target|

each `gan` term the mean over the example's patches: 'vanilla' the binary cross-entropy of
the logits (the paper's; the reference's BCE of D's sigmoid), 'lsgan' the squared distance
of the logits from 1 (real) or 0 (fake). The paper's l1_weight is 100.
tests/objective/test_pix2pix.py holds these against the reference's own losses.

The step takes these through objective/objectives.py's ImageToImage.
"""

from __future__ import annotations

from typing import Tuple

import tensorflow as tf

from paragan_tf.errors import ConfigError

GANS = ("vanilla", "lsgan")


def _per_example(values: tf.Tensor) -> tf.Tensor:
    """[b, ...] -> [b]: the mean over everything but the batch."""
    return tf.reduce_mean(tf.reshape(values, [tf.shape(values)[0], -1]), axis=1)


def _gan(logits: tf.Tensor, real: bool, gan: str) -> tf.Tensor:
    """The per-example adversarial loss of patch logits judged as real (or fake)."""
    logits = tf.cast(logits, tf.float32)
    if gan == "vanilla":  # -log sigmoid(x) for real, -log(1 - sigmoid(x)) for fake
        return _per_example(tf.nn.softplus(-logits if real else logits))
    if gan == "lsgan":
        return _per_example(tf.square(logits - (1.0 if real else 0.0)))
    raise ConfigError(f"pix2pix gan={gan!r} must be one of {GANS}")


def d_loss(real_logits: tf.Tensor, fake_logits: tf.Tensor, gan: str = "vanilla") -> tf.Tensor:
    """D's per-example loss [b] from its patch logits on real and on generated pairs."""
    return 0.5 * (_gan(fake_logits, False, gan) + _gan(real_logits, True, gan))


def g_loss(fake_logits: tf.Tensor, outputs: tf.Tensor, targets: tf.Tensor,
           gan: str = "vanilla", l1_weight: float = 100.0) -> Tuple[tf.Tensor, tf.Tensor]:
    """G's per-example losses [b]: (adversarial, l1_weight x L1); G's loss is their sum."""
    l1 = _per_example(tf.abs(tf.cast(outputs, tf.float32) - tf.cast(targets, tf.float32)))
    return _gan(fake_logits, True, gan), l1_weight * l1
