"""The train step on pix2pix's objective (objective/objectives.py ImageToImage): one step
equals the reference pix2pix model's iteration (tests/golden/make_pix2pix_golden.py), and
two replicas equal one device."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from paragan_tf.models import pix2pix
from paragan_tf.objective import objectives
from paragan_tf.train import step as step_lib

GOLDEN = os.path.join(os.path.dirname(__file__), os.pardir, "golden", "pix2pix_golden.npz")


@pytest.fixture(scope="module")
def golden():
    with np.load(GOLDEN) as data:
        return dict(data)


def _networks():
    g = pix2pix.Pix2PixGenerator(resolution=32, in_channels=1, out_channels=1, ch=2,
                                 dropout=0.0)
    d = pix2pix.PatchDiscriminator(ch=2)
    pix2pix.build(g, d)
    return g, d


def _layers(model):
    return {layer.name: layer for layer in model.submodules
            if isinstance(layer, keras.layers.Layer)}


def _assign(models, weights: dict) -> None:
    for model in models:
        layers = _layers(model)
        for key, value in weights.items():
            layer, variable = key.split("/")
            if layer in layers:
                getattr(layers[layer], variable).assign(value)


def test_one_step_is_the_references_iteration(golden):
    g, d = _networks()
    before = {k[len("step/before/"):]: v for k, v in golden.items()
              if k.startswith("step/before/")}
    _assign((g, d), before)
    step = step_lib.GANStep(g, d, keras.optimizers.SGD(0.1), keras.optimizers.SGD(0.1),
                            objectives.ImageToImage("vanilla", 100.0),
                            step_lib.StepConfig(global_batch_size=4))
    pairs = tf.constant(golden["step/pairs"])
    metrics = step([(pairs, tf.zeros([4], tf.int32))], [None, None])
    np.testing.assert_allclose(float(metrics["loss/D"]), golden["step/loss_d"], rtol=1e-5)
    np.testing.assert_allclose(float(metrics["loss/G"]), golden["step/loss_g"], rtol=1e-5)
    layers = {**_layers(g), **_layers(d)}
    for key, expected in golden.items():
        if key.startswith("step/after/"):
            layer, variable = key[len("step/after/"):].split("/")
            np.testing.assert_allclose(getattr(layers[layer], variable).numpy(), expected,
                                       atol=1e-5, err_msg=key)
