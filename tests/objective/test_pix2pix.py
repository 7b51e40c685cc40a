"""pix2pix's objective (objective/pix2pix.py) against the reference pix2pix model's own
losses (tests/golden/make_pix2pix_golden.py: its GANLoss and L1Loss, lambda_L1 = 100)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.errors import ConfigError
from paragan_tf.objective import pix2pix
from tests.helpers.pix2pix_golden import float32_policy, golden  # noqa: F401 (fixtures)


@pytest.mark.parametrize("gan", pix2pix.GANS)
def test_the_losses_are_the_references(golden, gan):
    real, fake = golden["loss/real_logits"], golden["loss/fake_logits"]
    d = pix2pix.d_loss(tf.constant(real), tf.constant(fake), gan)
    adversarial, l1 = pix2pix.g_loss(tf.constant(fake), golden["loss/outputs"],
                                     golden["loss/targets"], gan)
    assert d.shape == (2,) and adversarial.shape == (2,) and l1.shape == (2,)
    # The reference's means over batch and patches: ours over patches, then the batch.
    np.testing.assert_allclose(float(tf.reduce_mean(d)), golden[f"loss/d_{gan}"], rtol=1e-5)
    np.testing.assert_allclose(float(tf.reduce_mean(l1)), golden["loss/l1"], rtol=1e-5)
    np.testing.assert_allclose(float(tf.reduce_mean(adversarial + l1)),
                               golden[f"loss/g_{gan}"], rtol=1e-5)


def test_the_weight_scales_l1_only(golden):
    args = (tf.constant(golden["loss/fake_logits"]), golden["loss/outputs"],
            golden["loss/targets"])
    adversarial, l1 = pix2pix.g_loss(*args, l1_weight=100.0)
    adversarial_10, l1_10 = pix2pix.g_loss(*args, l1_weight=10.0)
    np.testing.assert_allclose(adversarial.numpy(), adversarial_10.numpy())
    np.testing.assert_allclose(l1.numpy(), 10 * l1_10.numpy(), rtol=1e-6)


def test_an_unknown_gan_is_refused_by_name():
    with pytest.raises(ConfigError, match="gan='wgan'"):
        pix2pix.d_loss(tf.zeros([1, 2, 2, 1]), tf.zeros([1, 2, 2, 1]), "wgan")
