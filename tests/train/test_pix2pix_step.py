"""The train step on pix2pix's objective (families/pix2pix/objective.py ImageToImage): one
step equals the reference pix2pix model's iteration (tests/golden/make_pix2pix_golden.py),
with dropout and the moving statistics too (G runs once per iteration), and two replicas
equal one device."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from paragan_tf.families.pix2pix import losses
from paragan_tf.families.pix2pix import networks as pix2pix
from paragan_tf.families.pix2pix import objective as objective_lib
from paragan_tf.train import step as step_lib
from tests.helpers.pix2pix_golden import as_held
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
                getattr(layers[layer], variable).assign(as_held(layers[layer], variable, value))


def test_one_step_is_the_references_iteration(golden):
    g, d = _networks()
    before = {k[len("step/before/"):]: v for k, v in golden.items()
              if k.startswith("step/before/")}
    _assign((g, d), before)
    step = step_lib.GANStep(g, d, keras.optimizers.SGD(0.1), keras.optimizers.SGD(0.1),
                            objective_lib.ImageToImage(losses.vanilla, 100.0),
                            step_lib.StepConfig(global_batch_size=4))
    pairs = tf.constant(golden["step/pairs"])
    metrics = step([(pairs, tf.zeros([4], tf.int32))], [None, None])
    np.testing.assert_allclose(float(metrics["loss/D"]), golden["step/loss_d"], rtol=1e-5)
    np.testing.assert_allclose(float(metrics["loss/G"]), golden["step/loss_g"], rtol=1e-5)
    layers = {**_layers(g), **_layers(d)}
    for key, expected in golden.items():
        if key.startswith("step/after/"):
            layer, variable = key[len("step/after/"):].split("/")
            held = getattr(layers[layer], variable).numpy()
            np.testing.assert_allclose(as_held(layers[layer], variable, held), expected,
                                       atol=1e-5, err_msg=key)


def _trained(strategy, weights: dict, pairs, sync_bn: bool):
    """The networks' weights (before, after) one SGD step on `pairs` under `strategy`."""
    with strategy.scope():
        g = pix2pix.Pix2PixGenerator(resolution=32, in_channels=1, out_channels=1, ch=2,
                                     dropout=0.0, sync_bn=sync_bn)
        d = pix2pix.PatchDiscriminator(ch=2, sync_bn=sync_bn)
        pix2pix.build(g, d)
        g_optimizer, d_optimizer = keras.optimizers.SGD(0.1), keras.optimizers.SGD(0.1)
    _assign((g, d), weights)
    before = {v.name: v.numpy() for m in (g, d) for v in m.trainable_variables}
    step = step_lib.GANStep(g, d, g_optimizer, d_optimizer, objective_lib.ImageToImage(),
                            step_lib.StepConfig(global_batch_size=len(pairs)))
    batches = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((pairs, tf.zeros([len(pairs)], tf.int32)))
        .batch(len(pairs)))
    tf.function(lambda real: strategy.run(lambda r: step([r], [None, None]), args=(real,)))(
        next(iter(batches)))
    return before, {v.name: v.numpy() for m in (g, d) for v in m.trainable_variables}


@pytest.mark.parametrize("sync_bn", [True, False])
def test_two_replicas_match_one_device_with_synchronised_batch_norm(golden, sync_bn):
    """With batch norm synchronised across replicas, two replicas of 2 pairs update as one
    device of 4 (the largest difference against the largest update under 1e-3); without it
    they do not (each replica normalises its own 2), so the comparison can fail."""
    from tests.helpers.training import mirrored_2  # pylint: disable=import-outside-toplevel
    weights = {k[len("step/before/"):]: v for k, v in golden.items()
               if k.startswith("step/before/")}
    pairs = tf.constant(golden["step/pairs"])
    initial, one = _trained(tf.distribute.OneDeviceStrategy("/cpu:0"), weights, pairs, sync_bn)
    _, two = _trained(mirrored_2(), weights, pairs, sync_bn)
    offs = {}
    for network in ("generator/", "discriminator/"):
        names = [n for n in one if n.startswith(network)]
        moved = max(float(np.max(np.abs(one[n] - initial[n]))) for n in names)
        assert moved > 1e-3, network  # the step did something measurable
        offs[network] = max(float(np.max(np.abs(two[n] - one[n]))) for n in names) / moved
    print(f"sync_bn={sync_bn}: largest difference / largest update {offs}")
    if sync_bn:  # measured 2.5e-7 (G) and 4.7e-6 (D) on an AVX-512 CPU, oneDNN on
        assert max(offs.values()) < 1e-3, offs
    else:  # measured 7.7e-3 for G
        assert max(offs.values()) > 1e-3, offs


class _MaskSequence(keras.layers.Layer):
    """Dropout whose masks come from a fixed sequence, the next one at each training-mode
    pass: the golden's, so the reference's masks are ours, pass for pass."""

    def __init__(self, masks):
        super().__init__()
        self.masks = tf.constant(masks)
        self.calls = tf.Variable(0, trainable=False)

    def call(self, x, training=False):
        if not training:
            return x
        mask = tf.gather(self.masks, self.calls)  # a pass beyond the sequence fails
        self.calls.assign_add(1)
        return x * mask


class _TwoForwards(objective_lib.ImageToImage):
    """The step before pix2pix's G ran once: G's update made its images anew."""

    reuses_fakes = False


def _dropout_step(golden, objective):
    """(the step's metrics, the variables after it by layer/variable, G's passes) of the
    golden's iteration with dropout through `objective`."""
    g = pix2pix.Pix2PixGenerator(resolution=64, in_channels=1, out_channels=1, ch=2)
    d = pix2pix.PatchDiscriminator(ch=2)
    pix2pix.build(g, d)
    assert [i for i, layer in enumerate(g.dropout) if layer is not None] == [4]
    g.dropout[4] = _MaskSequence(golden["dropout_step/masks"])
    _assign((g, d), {k[len("dropout_step/before/"):]: v for k, v in golden.items()
                     if k.startswith("dropout_step/before/")})
    step = step_lib.GANStep(g, d, keras.optimizers.SGD(0.1), keras.optimizers.SGD(0.1),
                            objective, step_lib.StepConfig(global_batch_size=4))
    pairs = tf.constant(golden["dropout_step/pairs"])
    metrics = step([(pairs, tf.zeros([4], tf.int32))], [None, None])
    layers = {**_layers(g), **_layers(d)}
    after = {}
    for key in (k[len("dropout_step/after/"):] for k in golden
                if k.startswith("dropout_step/after/")):
        layer, variable = key.split("/")
        after[key] = as_held(layers[layer], variable, getattr(layers[layer], variable).numpy())
    return metrics, after, int(g.dropout[4].calls.numpy())


def _largest_difference(golden, after) -> float:
    return max(float(np.max(np.abs(value - golden["dropout_step/after/" + key])))
               for key, value in after.items())


def test_one_step_with_dropout_runs_g_once_as_the_references_iteration(golden):
    """One dropout mask and one move of G's batch-norm statistics per iteration, as the
    reference's (G's output judged in D's update is the one G's update differentiates);
    the moving statistics are compared too (torch's unbiased moving variance)."""
    metrics, after, calls = _dropout_step(golden, objective_lib.ImageToImage())
    assert calls == int(golden["dropout_step/calls"]) == 1
    np.testing.assert_allclose(float(metrics["loss/D"]), golden["dropout_step/loss_d"],
                               rtol=1e-5)
    np.testing.assert_allclose(float(metrics["loss/G"]), golden["dropout_step/loss_g"],
                               rtol=1e-5)
    assert any("moving_variance" in key for key in after)
    assert _largest_difference(golden, after) < 1e-5


def test_the_double_forward_is_off_the_reference(golden):
    """The negative control: G's update making its images anew (a second dropout mask, the
    moving statistics moved twice) ends far from the reference's weights."""
    metrics, after, calls = _dropout_step(golden, _TwoForwards())
    off = _largest_difference(golden, after)
    print(f"the double forward: {calls} G passes, loss/G {float(metrics['loss/G']):.4f} "
          f"(the reference's {float(golden['dropout_step/loss_g']):.4f}), largest weight "
          f"difference {off:.3g}")
    assert calls == 2 and off > 1e-2
