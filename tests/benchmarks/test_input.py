"""The input benchmark (benchmarks/input.py): its baselines beside our pipeline, and the tuner
against tf.data's AUTOTUNE on a latency-bound store."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import input as input_bench
from benchmarks.congestion import CongestedStore
from paragan_tf.data import config as data_config
from paragan_tf.data import datasets
from paragan_tf.data import pipeline
from paragan_tf.data import tuning

DATA = data_config.DatasetConfig(name="mnist5k", fit="pad", shuffle_buffer=100)


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


def test_input_benchmark_tuner_beats_tf_data_autotune_on_a_latency_bound_store():
    # tf.data's AUTOTUNE reads at most as many shards at once as the machine has CPUs (its
    # default cycle length; fewer in practice here); reads that wait rather than compute
    # need more. Each record waits 3.75 ms per CPU (+ up to 2 ms):
    # with one read per CPU a batch of 16 takes >= 3x the 20 ms step, whatever the CPU count.
    # Ten windows: under a loaded test run the tuner's doublings took more than six to settle
    # (a last-window stall of 0.48 against AUTOTUNE's 0.94 once). The margin is 0.75 x
    # AUTOTUNE's stall: alone on the Intel Xeon family 6 model 106 the tuner's was 0.11
    # against 0.93 (2026-11-29), but in a full `make test` beside two busy workers its reads
    # starve too, and it once stalled 0.665 against 0.985 (0.68 x). A tuner that does nothing
    # stalls as AUTOTUNE does and fails this and the read count below.
    cpus = os.cpu_count() or 1
    result = input_bench.input_suite(latency_ms=3.75 * cpus, jitter_ms=2.0, batch=16,
                                     compute_ms=20.0, windows=10, window_steps=6,
                                     models=("latency",), progress=lambda m: None)
    latency = result["latency"]
    assert latency["sequential_stall_frac"] > 0.5
    assert latency["autotune_stall_frac"] > 0.3
    assert latency["aware_stall_frac"] < 0.75 * latency["autotune_stall_frac"], latency
    # The tuner, not its starting point, did it: it raised the reads past max(4, CPUs).
    assert latency["aware_trace"][-1]["read_parallelism"] > max(4, cpus)
    json.dumps(result)  # what bin/bench.py writes


@pytest.mark.parametrize("task,slowed", [({"type": "worker", "index": 1}, True),
                                         ({"type": "worker", "index": 0}, False),
                                         ({"type": "chief", "index": 0}, False)])
def test_a_store_congested_for_one_worker_slows_that_worker_only(monkeypatch, task, slowed):
    """benchmarks/straggler.py's slow_input: CongestedStore.workers, under
    MultiWorkerMirrored (each worker's own process and TF_CONFIG; the parameter-server
    path, one traced function for every worker, runs in
    tests/benchmarks/test_async_quality.py)."""
    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": task}))
    store = CongestedStore(latency_ms=400.0, workers=(1,))
    records = store(tf.data.Dataset.range(2), tf.constant(0, tf.int64))
    next(iter(records))  # start-up (tracing) is not timed
    started = time.monotonic()
    assert list(store(tf.data.Dataset.range(2), tf.constant(0, tf.int64)).as_numpy_iterator()) \
        == [0, 1]
    took = time.monotonic() - started
    assert (took > 0.7) == slowed, took  # two reads of 400 ms, or none
