"""The step benchmark's numbers (benchmarks/step.py) can be traced and cannot flatter: FLOPs that
run, peaks that hold; and bin/bench.py's step suite end to end on the tiny config, its JSON and
machine record."""

from __future__ import annotations

import json

import pytest
import tensorflow as tf

from benchmarks import step as step_bench
from tests.helpers.clusters import run_binary  # waits while the run prints, no fixed timeout

INPUT, KERNEL = [2, 8, 8, 4], [3, 3, 4, 6]
FORWARD = 2 * 2 * 8 * 8 * 3 * 3 * 4 * 6  # a SAME conv's
VALID_FORWARD = 2 * 2 * 6 * 6 * 3 * 3 * 4 * 6  # the probe's: every counted tap runs


def _executed(fn) -> int:
    graph = fn.get_concrete_function().graph
    return step_bench.executed_conv_flops(graph, graph.outputs)


def test_the_conv_probe_runs_every_flop_it_claims():
    run, claimed = step_bench.conv_probe(tf.float32, INPUT, KERNEL)
    assert claimed == 3 * VALID_FORWARD
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


# Starts bin/bench.py: left to `make test`, out of Bazel's unit run (tests/bazel_pytest.py).
@pytest.mark.slow
def test_step_benchmark_binary_on_the_tiny_config(tmp_path):
    out = tmp_path / "step.json"
    proc = run_binary("bench.py", "--suite=step", "--gin_file=gin/tiny.gin", "--steps=1",
                      "--layouts=fp32,bf16", f"--output={out}",
                      f"--profile_dir={tmp_path / 'profile'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    for key in ("probe_peak_fp32_gflops", "probe_peak_bf16_gflops", "mfu_fp32",
                "best_speedup_vs_fp32", "cpu_features"):
        assert key in result, key
    record = result["machine"]
    assert record["physical_cores"] >= 1 and record["logical_cpus"] >= record["physical_cores"]
    assert record["tensorflow"] == tf.__version__ and record["git_commit"]
    assert len(record["load_before"]) == 3 and len(record["load_after"]) == 3
    assert set(record["isa"]) == {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16",
                                  "amx_tile"}
    assert "--suite=step" in record["command"]
    for name in ("fp32", "bf16"):
        run = result["layouts"][name]
        assert run["sec_per_step"] > 0 and run["images_per_sec"] > 0
        assert run["achieved_gflops"] > 0 and run["train_step_flops"] > 0
    assert result["layouts"]["fp32"]["speedup_vs_fp32"] == 1.0
    assert result["layouts"]["bf16"]["layout"]["precision"] == "mixed_bfloat16"
    # MFU against the hardware: a tiny model on 2 cores reaches a few per cent at most, and no
    # figure may pass the theoretical peak (the suite refuses to write one that does).
    theory = result["theoretical_peak"]
    for run in result["layouts"].values():
        assert 0 < run["achieved_gflops"] <= run["theoretical_peak_gflops"]
        assert run["mfu"] == pytest.approx(run["achieved_gflops"] / run["theoretical_peak_gflops"])
    assert 0 < result["mfu_fp32"] < 1
    assert result["layouts"]["fp32"]["theoretical_peak_gflops"] == theory["fp32_gflops"]
    for dtype, key in (("float32", "fp32_gflops"), ("bfloat16", "bf16_gflops")):
        assert 0 < max(result["peak_probes"][dtype].values()) <= theory[key]
    shares = result["layouts"]["fp32"]["profile"]["op_time_share"]
    assert any("Conv2D" in op for op in shares)  # the model's convolutions show up
    assert 0 < sum(shares.values()) <= 1.0 + 1e-9  # the top op types' shares of busy time


@pytest.mark.slow
def test_the_step_benchmarks_auto_is_what_a_first_training_run_chooses(tmp_path, monkeypatch):
    """`auto` takes the layout tuner's choice for the step, as bin/train.py does (here a
    cached one whose precision is not the rule's), not the rules alone."""
    from paragan_tf.layout import cache as layout_cache  # pylint: disable=C0415
    from paragan_tf.layout import rules as layout_lib  # pylint: disable=C0415
    from paragan_tf.measure import tuning as layout_tuning  # pylint: disable=C0415
    from paragan_tf.layout.choice import Choice  # pylint: disable=C0415
    from paragan_tf.train import experiment  # pylint: disable=C0415
    monkeypatch.setenv("PARAGAN_TF_LAYOUT_CACHE", str(tmp_path / "layouts.json"))
    experiment.parse(["gin/tiny.gin", "gin/layouts/auto.gin"], [])
    settings = experiment.Settings.read()
    hardware = layout_lib.detect()
    rule, _ = layout_lib.rule_precision(hardware)
    key, facts = layout_tuning.cache_key(
        hardware, layout_tuning.step_shape(settings, rule),
        layout_tuning.pinned(settings.layout.pins(), settings.strategy))
    other = "float32" if rule != "float32" else "mixed_bfloat16"
    cached = Choice(xla=False, onednn=layout_lib.onednn_in_effect(hardware), precision=other)
    assert layout_cache.write(key, dict(facts, choice=cached.settings())) is None
    out = tmp_path / "step.json"
    proc = run_binary("bench.py", "--suite=step", "--gin_file=gin/tiny.gin", "--steps=1",
                      "--layouts=auto", f"--output={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    layout = json.loads(out.read_text())["layouts"]["auto"]["layout"]
    assert (layout["precision"], layout["source"]) == (other, "cache"), layout
