"""The congestion-aware input pipeline: injected latency, the tuner, and stall accounting."""

from __future__ import annotations

import dataclasses
import json
import os
import time

import numpy as np
import pytest
import tensorflow as tf

from conftest import run_binary
from benchmarks import input as input_bench
from benchmarks.congestion import CongestedStore
from paragan_tf.data import config as data_config
from paragan_tf.data import datasets
from paragan_tf.data import pipeline
from paragan_tf.data import tuning
from paragan_tf.train import experiment
from paragan_tf.train import loop

DATA = data_config.DatasetConfig(name="mnist5k", fit="pad", shuffle_buffer=100)


def _read_all(ds):
    start = time.perf_counter()
    n = sum(1 for _ in ds)
    return n, time.perf_counter() - start


def test_latency_is_injected_per_record_or_per_file():
    records = tf.data.Dataset.range(8)
    per_record = CongestedStore(latency_ms=25, per="record")
    n, seconds = _read_all(per_record(records, tf.constant(0, tf.int64)))
    assert n == 8 and seconds >= 8 * 0.025
    per_file = CongestedStore(latency_ms=150, per="file")
    n, seconds = _read_all(per_file(records, tf.constant(0, tf.int64)))
    assert n == 8 and 0.15 <= seconds < 8 * 0.15  # paid once for the shard, not per record
    jitter = CongestedStore(latency_ms=0, jitter_ms=40)
    n, seconds = _read_all(jitter(records, tf.constant(3, tf.int64)))
    assert 0 < seconds < 8 * 0.04 + 1.0


def test_tuner_doubles_while_stalled_up_to_its_ceiling_and_only_when_it_can_help():
    congested = tuning.InputConfig(read_parallelism=4, prefetch=2, max_read_parallelism=16,
                                   read_hook=CongestedStore(latency_ms=5))
    tuner = tuning.InputTuner(congested)
    assert not tuner.observe(0.01)  # below the 5 % target
    assert tuner.observe(0.4) and tuner.tuning == tuning.Tuning(8, 4)
    assert tuner.observe(0.4) and tuner.tuning == tuning.Tuning(16, 8)
    assert not tuner.observe(0.4) and tuner.tuning == tuning.Tuning(16, 8)  # ceiling
    # No more reads than shards open in the interleave: 6 shards stop it at 6.
    few = tuning.InputTuner(dataclasses.replace(congested, num_shards=6))
    assert few.observe(0.4) and few.tuning == tuning.Tuning(6, 4)
    assert not few.observe(0.4)
    # Nothing to tune: cached in-memory reads, or adaptation off.
    untuned = (tuning.InputConfig(), dataclasses.replace(congested, adaptive=False))
    for inputs in untuned:
        assert not tuning.InputTuner(inputs).observe(0.9)
    # Whose settings read_parallelism and prefetch are (the trainer reports them then).
    assert [inputs.tuned for inputs in (congested,) + untuned] == [True, False, True]


@pytest.mark.parametrize("name", input_bench.PIPELINES)
def test_sharded_pipelines_yield_the_same_kind_of_batches(name):
    """Ours and the input benchmark's two baselines, over the same slow store."""
    source = datasets.get_source("mnist5k")
    store = CongestedStore(latency_ms=0.1)
    if name == "aware":
        inputs = tuning.InputConfig(num_shards=4, read_hook=store)
        assert inputs.sharded
        ds = pipeline.real_input_fn(source, DATA, 32, seed=0, inputs=inputs)(
            tf.distribute.InputContext())
    else:
        ds = input_bench.baseline_input(source, DATA, 32, 0, store, name == "autotune")
    batches = list(ds.take(4))
    for images, labels in batches:
        assert images.shape == (32, 32, 32, 1) and images.dtype == tf.float32
        assert -1.0 <= float(tf.reduce_min(images)) and float(tf.reduce_max(images)) <= 1.0
    labels = np.concatenate([b[1].numpy() for b in batches])
    assert len(set(labels)) >= 8  # shuffled over shards, not one class after another


def _train_tiny(tiny_gin, tmp_path, *bindings):
    tiny_gin("train.total_steps = 6", "train.steps_per_loop = 2", "train.log_every = 6",
             "train.d_steps = 1", *bindings)
    exp = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
    return loop.train(exp, str(tmp_path))


def test_input_wait_fraction_separates_a_slow_store_from_cached_data(tiny_gin, tmp_path):
    # 8 records of 80 ms per step from one shard at a time (the tuner off): ~640 ms of
    # waiting per step against the tiny model's ~80 ms of compute. No checkpoints or
    # samples inside the window: host work there gives a read-ahead time to bank
    # batches. The slow store comes through the pipeline's read hook.
    quiet = ("train.checkpoint_every = 1000", "train.sample_every = 1000")
    slow = _train_tiny(tiny_gin, tmp_path / "slow", "input_pipeline.read_hook = "
                       "@CongestedStore()", "CongestedStore.latency_ms = 80.0",
                       "input_pipeline.max_read_parallelism = 1",
                       "input_pipeline.prefetch = 1", "input_pipeline.adaptive = False", *quiet)
    fast = _train_tiny(tiny_gin, tmp_path / "fast", *quiet)
    # Ratios, not absolute shares: another process on the machine slows the compute,
    # which lowers the slow store's share (0.27 once here beside two busy loops with a
    # 40 ms store) but not the gap.
    assert slow["perf/input_wait_frac"] > 0.3, slow
    assert slow["perf/input_wait_frac"] > 3 * fast["perf/input_wait_frac"], (slow, fast)
    # The slow store's reads are ours to set (and reported); cached data has none.
    assert slow["perf/read_parallelism"] == 1 and "perf/read_parallelism" not in fast


def test_input_benchmark_tuner_beats_tf_data_autotune_on_a_latency_bound_store():
    # tf.data's AUTOTUNE reads at most as many shards at once as the machine has CPUs (its
    # default cycle length; fewer in practice here); reads that wait rather than compute
    # need more. Each record waits 3.75 ms per CPU (+ up to 2 ms):
    # with one read per CPU a batch of 16 takes >= 3x the 20 ms step, whatever the CPU count.
    cpus = os.cpu_count() or 1
    result = input_bench.input_suite(latency_ms=3.75 * cpus, jitter_ms=2.0, batch=16,
                                     compute_ms=20.0, windows=6, window_steps=6,
                                     models=("latency",), progress=lambda m: None)
    latency = result["latency"]
    assert latency["sequential_stall_frac"] > 0.5
    assert latency["autotune_stall_frac"] > 0.3
    assert latency["aware_stall_frac"] < 0.5 * latency["autotune_stall_frac"], latency
    # The tuner, not its starting point, did it: it raised the reads past max(4, CPUs).
    assert latency["aware_trace"][-1]["read_parallelism"] > max(4, cpus)
    json.dumps(result)  # what bin/bench.py writes


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


def test_reading_through_local_tf_data_service_workers(tiny_gin, tmp_path):
    result = _train_tiny(tiny_gin, tmp_path, "input_pipeline.service_workers = 2")
    assert result["step"] == 6 and np.isfinite(result["loss/D"])
