"""The step benchmark's numbers (benchmarks/step.py) can be traced and cannot flatter: FLOPs that
run, peaks that hold."""

from __future__ import annotations

import pytest
import tensorflow as tf

from benchmarks import step as step_bench

INPUT, KERNEL = [2, 8, 8, 4], [3, 3, 4, 6]
FORWARD = 2 * 2 * 8 * 8 * 3 * 3 * 4 * 6


def _executed(fn) -> int:
    graph = fn.get_concrete_function().graph
    return step_bench.executed_conv_flops(graph, graph.outputs)


def test_the_conv_probe_runs_every_flop_it_claims():
    run, claimed = step_bench.conv_probe(tf.float32, INPUT, KERNEL)
    assert claimed == 3 * FORWARD
    assert _executed(run) == claimed


def test_a_probe_whose_forward_feeds_nothing_is_caught():
    """Negative control: the probe as it was (the forward's value unused) runs 2 of 3 passes."""
    x = tf.random.normal(INPUT)
    w = tf.random.normal(KERNEL)

    @tf.function
    def old_probe():
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            loss = tf.reduce_sum(tf.nn.conv2d(x, w, 1, "SAME"))
        gx, gw = tape.gradient(loss, [x, w])
        return tf.reduce_sum(gx) + tf.reduce_sum(gw)
    assert _executed(old_probe) == 2 * FORWARD


def test_a_number_above_the_theoretical_peak_stops_the_suite():
    theory = dict(fp32_gflops=100.0, bf16_gflops=200.0, isa_row="row", cores=2, clock_ghz=1.5,
                  clock_source="assumed")
    runs = {"fp32": dict(achieved_gflops=90.0, theoretical_peak_gflops=100.0)}
    probes = {"float32": {"matmul_4096": 95.0}, "bfloat16": {"matmul_4096": 150.0}}
    step_bench.check_under_peak(runs, probes, theory)  # all under: fine
    probes["float32"]["conv_fwd_bwd"] = 130.0
    with pytest.raises(step_bench.BeyondPeak, match="float32 conv_fwd_bwd probe 130.0"):
        step_bench.check_under_peak(runs, probes, theory)
