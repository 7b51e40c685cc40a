"""The roofline of a train step (scale/roofline.py): each op's FLOPs and bytes from its
shapes, only the ops a run executes, and the step's FLOPs against the FLOP counter's rule."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.scale import flops as flops_lib
from paragan_tf.scale import roofline
from paragan_tf.measure import built
from paragan_tf.scale import graphs
from paragan_tf.train import experiment


def _graph(fn, *shapes):
    specs = [tf.TensorSpec(shape) for shape in shapes]
    return tf.function(fn, autograph=False).get_concrete_function(*specs).graph


def test_a_convolution_costs_its_multiply_adds_and_its_tensors():
    b = graphs.PROBE_BATCH
    cost = roofline.update_cost(_graph(lambda x, k: tf.nn.conv2d(x, k, 1, "SAME"),
                                       [b, 8, 8, 3], [3, 3, 3, 4]))
    # Per example: 8 x 8 outputs of 4 channels, each 3 x 3 x 3 multiply-adds; the input
    # (8 x 8 x 3) and output (8 x 8 x 4) floats per example, the kernel's 108 once.
    np.testing.assert_allclose(cost.flops, [[0, 2 * 8 * 8 * 4 * 27]])
    np.testing.assert_allclose(cost.bytes, [[4 * 108, 4 * (8 * 8 * 3 + 8 * 8 * 4)]])
    flops, moved = cost.at(10)
    assert cost.seconds(10, 1e9, 1e15) == pytest.approx(flops[0] / 1e9)  # compute-bound
    assert cost.seconds(10, 1e15, 1e6) == pytest.approx(moved[0] / 1e6)  # memory-bound


def test_ops_no_output_needs_are_not_counted():
    b = graphs.PROBE_BATCH

    def fn(x, k):
        tf.nn.conv2d(x, k, 1, "SAME")  # traced, never run: nothing reads it
        return tf.matmul(tf.reshape(x, [b, -1]), tf.ones([192, 2]))
    cost = roofline.update_cost(_graph(fn, [b, 8, 8, 3], [3, 3, 3, 4]))
    assert cost.flops.sum(axis=0)[1] == pytest.approx(2 * 192 * 2)  # the matmul alone


def test_the_step_s_matrix_flops_agree_with_the_flop_counter(tiny_gin):
    """The roofline counts the backward ops the trace holds; the FLOP counter (scale/
    flops.py) counts the forward and applies 2x for the backward. They agree within 5 %
    (the counter also counts elementwise FLOPs and input gradients nothing needs)."""
    tiny_gin()
    exp = experiment.build(strategy=tf.distribute.OneDeviceStrategy("/cpu:0"),
                           check_data=False)
    cost = roofline.cost_of(built.update_graphs(exp))
    for batch in (1, 8):
        counted = flops_lib.forward(exp.generator, exp.discriminator, batch).train_step(2, 3)
        ratio = cost.totals(batch, d_steps=2, accumulation=3)["flops"] / counted
        assert 0.95 < ratio < 1.0, ratio
