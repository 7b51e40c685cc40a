"""The train step on pix2pix's objective (objective/objectives.py ImageToImage): one step
equals the reference pix2pix model's iteration (tests/golden/make_pix2pix_golden.py), and
two replicas equal one device."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from paragan_tf.models import pix2pix
from paragan_tf.objective import objectives
from paragan_tf.train import step as step_lib
from tests.helpers.pix2pix_golden import float32_policy, golden  # noqa: F401 (fixtures)


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


def _trained(strategy, weights: dict, pairs, sync_bn: bool) -> dict:
    """The networks' weights after one SGD step on `pairs` under `strategy`."""
    with strategy.scope():
        g = pix2pix.Pix2PixGenerator(resolution=32, in_channels=1, out_channels=1, ch=2,
                                     dropout=0.0, sync_bn=sync_bn)
        d = pix2pix.PatchDiscriminator(ch=2, sync_bn=sync_bn)
        pix2pix.build(g, d)
        g_optimizer, d_optimizer = keras.optimizers.SGD(0.1), keras.optimizers.SGD(0.1)
    _assign((g, d), weights)
    step = step_lib.GANStep(g, d, g_optimizer, d_optimizer, objectives.ImageToImage(),
                            step_lib.StepConfig(global_batch_size=len(pairs)))
    batches = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((pairs, tf.zeros([len(pairs)], tf.int32)))
        .batch(len(pairs)))
    tf.function(lambda real: strategy.run(lambda r: step([r], [None, None]), args=(real,)))(
        next(iter(batches)))
    return {v.name: v.numpy() for m in (g, d) for v in m.trainable_variables}


@pytest.mark.parametrize("sync_bn", [True, False])
def test_two_replicas_match_one_device_with_synchronised_batch_norm(golden, sync_bn):
    """With batch norm synchronised across replicas, two replicas of 2 pairs update as one
    device of 4 (the largest difference against the largest update under 1e-3); without it
    they do not (each replica normalises its own 2), so the comparison can fail."""
    from tests.helpers.training import mirrored_2  # pylint: disable=import-outside-toplevel
    weights = {k[len("step/before/"):]: v for k, v in golden.items()
               if k.startswith("step/before/")}
    pairs = tf.constant(golden["step/pairs"])
    one = _trained(tf.distribute.OneDeviceStrategy("/cpu:0"), weights, pairs, sync_bn)
    two = _trained(mirrored_2(), weights, pairs, sync_bn)
    offs = {}
    for network in ("generator/", "discriminator/"):
        names = [n for n in one if n.startswith(network)]
        initial = {n: weights["/".join(n.split("/")[1:3]).split(":")[0]] for n in names}
        moved = max(float(np.max(np.abs(one[n] - initial[n]))) for n in names)
        assert moved > 1e-3, network  # the step did something measurable
        offs[network] = max(float(np.max(np.abs(two[n] - one[n]))) for n in names) / moved
    print(f"sync_bn={sync_bn}: largest difference / largest update {offs}")
    if sync_bn:  # measured 2.5e-7 (G) and 4.7e-6 (D) on an AVX-512 CPU, oneDNN on
        assert max(offs.values()) < 1e-3, offs
    else:  # measured 7.7e-3 for G
        assert max(offs.values()) > 1e-3, offs


def test_what_pix2pixs_objective_does_not_take_is_refused_by_name():
    from paragan_tf.errors import ConfigError  # pylint: disable=import-outside-toplevel
    from paragan_tf.objective import penalties  # pylint: disable=import-outside-toplevel
    g, d = _networks()
    args = (g, d, keras.optimizers.SGD(0.1), keras.optimizers.SGD(0.1),
            objectives.ImageToImage())
    with pytest.raises(ConfigError, match="penalties.* apply to BigGAN's objective"):
        step_lib.GANStep(*args, step_lib.StepConfig(4, penalties=penalties.Penalties(
            r1_gamma=1.0)))
    with pytest.raises(ConfigError, match="augment.* applies to BigGAN's objective"):
        step_lib.GANStep(*args, step_lib.StepConfig(4, augment=lambda x, seed: x))
