"""pix2pix's networks (families/pix2pix/networks.py) against the reference's: parameter
counts at full width, and the outputs of small networks carrying the reference's weights, in
training and evaluation mode (tests/golden/make_pix2pix_golden.py made both with the
reference's code)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from paragan_tf.errors import ConfigError
from paragan_tf import models
from paragan_tf.families.pix2pix import networks as pix2pix
from tests.helpers.pix2pix_golden import as_held
from tests.helpers.pix2pix_golden import float32_policy, golden  # noqa: F401 (fixtures)


@pytest.mark.parametrize("resolution", [256, 128, 64])
def test_generator_parameters_match_the_references(golden, resolution):
    g = pix2pix.Pix2PixGenerator(resolution=resolution)
    g(tf.zeros([1, resolution, resolution, 3]))
    assert models.count_trainable(g) == int(golden[f"params/unet_{resolution}"])


@pytest.mark.parametrize("channels", [3, 1])
def test_discriminator_parameters_match_the_references(golden, channels):
    d = pix2pix.PatchDiscriminator()
    images = tf.zeros([1, 64, 64, channels])
    logits = d((images, images))
    assert logits.shape == (1, 6, 6, 1) and logits.dtype == tf.float32
    assert models.count_trainable(d) == int(golden[f"params/basic_d_{2 * channels}"])


def _load(model: keras.Model, golden: dict) -> None:
    """Sets every variable of `model` from the golden's weights/<layer>/<variable> (those of
    layers it does not have are the other network's)."""
    layers = {layer.name: layer for layer in model.submodules
              if isinstance(layer, keras.layers.Layer)}
    assigned = set()
    for key, value in golden.items():
        if not key.startswith("weights/"):
            continue
        _, layer, variable = key.split("/")
        if layer in layers:
            target = getattr(layers[layer], variable)
            target.assign(as_held(layers[layer], variable, value))
            assigned.add(id(target))
    assert assigned == {id(v) for v in model.variables}, "a variable the golden does not set"


def test_outputs_match_the_references_in_both_modes(golden):
    g = pix2pix.Pix2PixGenerator(resolution=32, ch=2, dropout=0.0)
    d = pix2pix.PatchDiscriminator(ch=2)
    pix2pix.build(g, d)
    _load(g, golden)  # the layers' names tell G's weights from D's
    _load(d, golden)
    x = tf.constant(golden["x"])
    for training, mode in ((False, "eval"), (True, "train")):
        out = g(x, training=training)
        np.testing.assert_allclose(out.numpy(), golden[f"g_{mode}"], atol=1e-5)
        logits = d((out, x), training=training)
        np.testing.assert_allclose(logits.numpy(), golden[f"d_{mode}"], atol=1e-5)


def test_dropout_is_noise_in_training_only():
    g = pix2pix.Pix2PixGenerator(resolution=64, ch=2)  # 6 levels: dropout at level 4
    x = tf.random.uniform([2, 64, 64, 3], -1, 1, seed=1)
    assert sum(layer is not None for layer in g.dropout) == 1
    np.testing.assert_array_equal(g(x).numpy(), g(x).numpy())
    assert np.abs(g(x, training=True).numpy() - g(x, training=True).numpy()).max() > 1e-4


def test_discriminator_judges_groups_as_separate_calls_unless_spectrally_normed():
    images = tf.random.stateless_uniform([4, 32, 32, 1], [1, 2], -1, 1)
    inputs = tf.random.stateless_uniform([4, 32, 32, 1], [3, 4], -1, 1)
    grouped, apart = pix2pix.PatchDiscriminator(ch=2), pix2pix.PatchDiscriminator(ch=2)
    for d in (grouped, apart):
        d((images, inputs))
    apart.set_weights(grouped.get_weights())
    assert grouped.judges_groups
    both = grouped((images, inputs), training=True, groups=2)
    calls = [apart((images[i:i + 2], inputs[i:i + 2]), training=True) for i in (0, 2)]
    np.testing.assert_allclose(both, tf.concat(calls, 0), atol=1e-5)
    normed = pix2pix.PatchDiscriminator(ch=2, spectral_norm=True)
    assert not normed.judges_groups  # its power iteration would step once for both
    with pytest.raises(ValueError, match="spectral norm"):
        normed((images, inputs), training=True, groups=2)


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ConfigError, match="resolution=48"):
        pix2pix.Pix2PixGenerator(resolution=48)
    with pytest.raises(ConfigError, match="resolution=16"):
        pix2pix.Pix2PixGenerator(resolution=16)
    with pytest.raises(ConfigError, match="dropout=1"):
        pix2pix.Pix2PixGenerator(dropout=1.0)
    with pytest.raises(ConfigError, match="num_layers=0"):
        pix2pix.PatchDiscriminator(num_layers=0)
    with pytest.raises(ConfigError, match="init"):
        pix2pix.PatchDiscriminator(init="kaiming")


@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_computes_low_and_returns_float32(policy, golden, precision):
    """Under a mixed policy the convolutions run in 16 bits on float32 variables, and images
    and logits come out float32, close to the float32 networks' outputs."""
    policy(precision)
    g = pix2pix.Pix2PixGenerator(resolution=32, ch=2, dropout=0.0)
    d = pix2pix.PatchDiscriminator(ch=2)
    pix2pix.build(g, d)
    _load(g, golden)
    _load(d, golden)
    assert {v.dtype for v in g.variables + d.variables} == {tf.float32}
    x = tf.constant(golden["x"])
    out = g(x, training=True)
    logits = d((out, x), training=True)
    assert out.dtype == tf.float32 and logits.dtype == tf.float32
    assert g.down[0](x).dtype == keras.mixed_precision.global_policy().compute_dtype
    # Measured: within 0.006 at bfloat16, 0.0012 at float16 (logits up to 0.94, images 0.31).
    np.testing.assert_allclose(out.numpy(), golden["g_train"], atol=0.03)
    np.testing.assert_allclose(logits.numpy(), golden["d_train"], atol=0.03)
