"""Recompute (models/recompute.py): the same gradients and state, far fewer saved activations."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from paragan_tf.families.biggan import networks as biggan
from paragan_tf.objective import losses
from paragan_tf.families.biggan import objective as objective_lib
from paragan_tf.measure import traced
from paragan_tf.scale import memory
from paragan_tf.train import step as step_lib
from tests.helpers.paper_biggan import _paper_models


def _gradients_and_state(recompute: bool):
    keras.utils.set_random_seed(1)
    g, d = _paper_models(64, ch_g=4, ch_d=8, classes=5, dim_z=20, recompute=recompute)
    z = tf.random.stateless_normal([3, 20], [3, 4])
    labels = tf.constant([0, 2, 4])

    @tf.function
    def grads():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(d((g((z, labels), training=True), labels), training=True) ** 2)
        return loss, tape.gradient(loss, g.trainable_variables + d.trainable_variables)
    loss, gradients = grads()
    state = [v.numpy() for v in g.non_trainable_variables + d.non_trainable_variables]
    return float(loss), [tf.convert_to_tensor(x).numpy() for x in gradients], state


def test_recompute_gives_the_same_gradients_and_state():
    loss, grads, state = _gradients_and_state(False)
    loss_rc, grads_rc, state_rc = _gradients_and_state(True)
    assert loss_rc == pytest.approx(loss, rel=1e-5)
    scale = max(float(np.abs(x).max()) for x in grads)
    # Round-off, amplified by batch-3 BN in G: 3.5e-7 of the largest gradient with
    # TF_ENABLE_ONEDNN_OPTS=0, 1.7e-3 with oneDNN's kernels on an Intel Xeon (AMX,
    # 2026-11-25; its recomputation runs other conv kernels). A recomputation that does
    # not restore the state first leaves the gradients alike: the state check below
    # catches that (0.17 off).
    for plain, recomputed in zip(grads, grads_rc):
        np.testing.assert_allclose(recomputed, plain, atol=1e-2 * scale)
    # SN vectors and BN statistics advance once, as without recompute (a recomputation
    # that did not restore them advanced the BN statistics twice: 0.15 off).
    for plain, recomputed in zip(state, state_rc):
        np.testing.assert_allclose(recomputed, plain, atol=1e-5)


def test_recompute_keeps_only_block_inputs_for_the_backward_pass():
    """The point of recompute: the backward pass reads far fewer forward tensors."""
    def saved_bytes(recompute):
        # Attention at 32 px: at 64 its 4096 x 1024 map per example dominates both plans.
        g = biggan.Generator(resolution=128, num_classes=5, ch=4, dim_z=24, shared_dim=8,
                             hierarchical_z=True, attention_resolutions=(32,),
                             recompute=recompute)
        d = biggan.Discriminator(resolution=128, num_classes=5, ch=8,
                                 attention_resolutions=(32,), recompute=recompute)
        biggan.build(g, d, 3)
        hinge = objective_lib.ClassConditional(losses.LossPair(losses.hinge))
        step = step_lib.GANStep(g, d, keras.optimizers.Adam(), keras.optimizers.Adam(), hinge,
                                step_lib.StepConfig(2))
        acts = memory.update_activations(traced.update_graphs(step, recompute))[None]
        return {name: a.at(2) for name, a in acts.items()}
    plain, recomputed = saved_bytes(False), saved_bytes(True)
    # Measured: G's update 24.6 -> 10.6 MB; D's 23.0 -> 16.1 MB (its update also runs G's
    # forward pass for the fakes, which keeps nothing and so gains nothing).
    assert recomputed["g_update"] < 0.5 * plain["g_update"]
    assert recomputed["d_update"] < 0.8 * plain["d_update"]
