"""pix2pix's losses (families/pix2pix/losses.py) against the reference pix2pix model's own
losses (tests/golden/make_pix2pix_golden.py: its GANLoss and L1Loss, lambda_L1 = 100)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.errors import ConfigError
from paragan_tf.families.pix2pix import losses
from paragan_tf.families.pix2pix import objective as objective_lib
from tests.helpers.pix2pix_golden import float32_policy, golden  # noqa: F401 (fixtures)


@pytest.mark.parametrize("gan", ["vanilla", "lsgan"])
def test_the_losses_are_the_references(golden, gan):
    real, fake = golden["loss/real_logits"], golden["loss/fake_logits"]
    d, adversarial = getattr(losses, gan)(tf.constant(real), tf.constant(fake),
                                          tf.constant(fake))
    l1 = 100.0 * losses.l1(golden["loss/outputs"], golden["loss/targets"])
    assert d.shape == (2,) and adversarial.shape == (2,) and l1.shape == (2,)
    # The reference's means over batch and patches: ours over patches, then the batch.
    np.testing.assert_allclose(float(tf.reduce_mean(d)), golden[f"loss/d_{gan}"], rtol=1e-5)
    np.testing.assert_allclose(float(tf.reduce_mean(l1)), golden["loss/l1"], rtol=1e-5)
    np.testing.assert_allclose(float(tf.reduce_mean(adversarial + l1)),
                               golden[f"loss/g_{gan}"], rtol=1e-5)


def test_the_objectives_g_loss_weighs_l1_only(golden):
    fake = tf.constant(golden["loss/fake_logits"])
    outputs, targets = golden["loss/outputs"], golden["loss/targets"]
    real = (tf.concat([tf.zeros_like(targets), targets], -1), None)  # (input | target)
    g_100 = objective_lib.ImageToImage(losses.vanilla, 100.0).g_loss(fake, fake, outputs, real)
    g_10 = objective_lib.ImageToImage(losses.vanilla, 10.0).g_loss(fake, fake, outputs, real)
    adversarial = losses.vanilla(fake, fake, fake)[1]
    np.testing.assert_allclose((g_100 - adversarial).numpy(), 10 * (g_10 - adversarial).numpy(),
                               rtol=1e-5)
    np.testing.assert_allclose(float(tf.reduce_mean(g_100)), golden["loss/g_vanilla"],
                               rtol=1e-5)


def test_a_loss_named_as_a_string_or_a_negative_weight_is_refused_by_name():
    with pytest.raises(ConfigError, match="pix2pix_loss.gan = @vanilla"):
        objective_lib.ImageToImage("vanilla")
    with pytest.raises(ConfigError, match="pix2pix_loss.l1_weight=-1"):
        objective_lib.ImageToImage(l1_weight=-1.0)
