"""The learning gate's negative controls (benchmarks/probes/learning_gate_breaks.py) reach
what the train step uses: swapped logits change the step's D loss to the swapped one, a
frozen G or D stays where it was while the other network moves. (That each then fails the
gate itself, and by the expected check, is benchmarks/probes/broken_variants.sh's
gate_* variants: the gate trains for minutes.)"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from benchmarks.probes import learning_gate_breaks
from paragan_tf.train import experiment
from paragan_tf.train import step as step_lib


def _tiny(tiny_gin):
    tiny_gin()
    return experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))


def _batches(exp):
    rng = np.random.default_rng(0)
    real = (tf.constant(rng.uniform(-1, 1, (8, 32, 32, 1)), tf.float32),
            tf.constant(rng.integers(0, 10, 8), tf.int32))
    noise = [(tf.constant(rng.normal(size=(8, exp.generator.dim_z)), tf.float32),
              tf.constant(rng.integers(0, 10, 8), tf.int32)) for _ in range(2)]
    return real, noise


def test_swapped_logits_change_the_d_loss_the_step_computes(tiny_gin):
    """The objective's D loss is what the step adds up (train/step.py d_micro)."""
    exp = _tiny(tiny_gin)
    _, noise = _batches(exp)
    logits = (tf.constant([2.0, -1.0]), tf.constant([-3.0, 0.5]))
    plain = float(tf.reduce_mean(exp.objective.d_loss(*logits, None, noise[0])))
    original = exp.objective.loss.fn
    learning_gate_breaks.break_experiment(exp, "swap_logits")
    swapped = float(tf.reduce_mean(exp.objective.d_loss(*logits, None, noise[0])))
    reversed_ = float(tf.reduce_mean(original(logits[1], logits[0], logits[0])[0]))
    assert swapped != pytest.approx(plain) and swapped == pytest.approx(reversed_)


@pytest.mark.parametrize("variant,frozen,moving", [("freeze_g", "generator", "discriminator"),
                                                   ("freeze_d", "discriminator", "generator")])
def test_a_frozen_network_stays_where_it_was_while_the_other_moves(tiny_gin, variant, frozen,
                                                                    moving):
    exp = _tiny(tiny_gin)
    real, noise = _batches(exp)
    learning_gate_breaks.break_experiment(exp, variant)
    before = {name: [v.numpy() for v in getattr(exp, name).trainable_variables]
              for name in (frozen, moving)}
    step_lib.for_experiment(exp)([real], noise)
    after = {name: [v.numpy() for v in getattr(exp, name).trainable_variables]
             for name in (frozen, moving)}
    assert all(np.array_equal(a, b) for a, b in zip(before[frozen], after[frozen]))
    assert any(not np.array_equal(a, b) for a, b in zip(before[moving], after[moving]))
