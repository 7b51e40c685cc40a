"""The plans trace the real step (measure/traced.py): GANStep's own micro-updates through
the run's objective, so a run with R1 plans R1's pass (its memory and its FLOPs), and a
lazy R1 is planned on the step it is due."""

from __future__ import annotations

import tensorflow as tf

from paragan_tf.measure import built
from paragan_tf.scale import flops as flops_lib
from paragan_tf.scale import graphs as graphs_lib
from paragan_tf.scale import memory as memory_lib
from paragan_tf.scale import roofline
from paragan_tf.train import experiment
from tests.helpers.training import parse_tiny


def _traced(*bindings):
    parse_tiny(*bindings)
    exp = experiment.build(strategy=tf.distribute.OneDeviceStrategy("/cpu:0"),
                           check_data=False)
    graphs = built.update_graphs(exp)
    acts = memory_lib.update_activations(graphs)[None]
    return exp, roofline.cost_of(graphs), {name: a.at(8) for name, a in acts.items()}


def test_r1_grows_the_plan_by_its_pass_through_d():
    exp, plain_cost, plain = _traced()
    _, r1_cost, r1 = _traced("penalties.r1_gamma = 1.0")
    _, lazy_cost, lazy = _traced("penalties.r1_gamma = 1.0", "penalties.lazy_interval = 4")
    # R1 is D's: G's update is traced unchanged; D's holds more at once.
    assert r1["g_update"] == plain["g_update"]
    assert r1["d_update"] > plain["d_update"]
    # Its FLOPs: D again on the reals and fakes, the input gradient and D's gradient through
    # it (a second-order pass): more than 2 of D's forward passes on both halves and under 8
    # (5.9 on gin/tiny.gin).
    b = graphs_lib.PROBE_BATCH
    extra = (r1_cost.totals(b, 1, 1)["flops"] - plain_cost.totals(b, 1, 1)["flops"])
    d_both = flops_lib.forward(exp.generator, exp.discriminator, b).d_both
    print(f"live bytes at batch 8: plain {plain}, with R1 {r1}; R1's extra FLOPs "
          f"{extra / d_both:.2f} of D's forward on both halves")
    assert 2 * d_both < extra < 8 * d_both, extra / d_both
    # Spaced out (a tf.cond in the step), it is traced where due: the same plan.
    assert lazy == r1
    assert lazy_cost.totals(b, 1, 1)["flops"] == r1_cost.totals(b, 1, 1)["flops"]
