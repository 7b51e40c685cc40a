"""The input benchmark: a fixed compute step fed through a congested store, naive vs aware.

The data are the real mnist5k digits at 32x32, read through the training
pipeline (data/pipeline.py) with latency and jitter injected per record
(data/congestion.py). The "step" is fixed work independent of the data's
values (a chain of matmuls, ~`compute_ms` here, measured and reported), so
the stall fraction depends only on the pipeline:

  stall_frac = time blocked in next(iterator) / (blocked + computing)

naive   shards read one after another, sequential decode, no prefetch.
aware   parallel interleave over shards, AUTOTUNE decode, prefetch; the
        InputTuner of the trainer doubles read parallelism and prefetch after
        every window whose stall exceeds its target, rebuilding the iterator,
        exactly as bin/train.py does at log boundaries.

Each mode reports the stall of its last window (the steady state) and the
per-window trace; the aware trace shows the tuner's settings.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, List

import tensorflow as tf

from paragan_tf.data import congestion as congestion_lib
from paragan_tf.data import datasets
from paragan_tf.data import pipeline
from paragan_tf.data import tuning


def _compute_step(target_ms: float) -> Callable[[tf.Tensor], None]:
    """A fixed amount of matmul work (independent of the pixels), about target_ms long here."""
    w = tf.random.stateless_normal([512, 512], [7, 8]) / 23.0

    def make(repeats):
        @tf.function
        def step(images):
            x = tf.reshape(images, [tf.shape(images)[0], -1])[:, :512]
            x = tf.tile(x, [4, 1])
            for _ in range(repeats):
                x = tf.tanh(tf.matmul(x, w))
            return tf.reduce_sum(x)
        return step
    probe = make(10)
    sample = tf.zeros([64, 32, 32, 1])
    probe(sample).numpy()
    start = time.perf_counter()
    for _ in range(5):
        probe(sample).numpy()
    per_repeat = (time.perf_counter() - start) / 50
    step = make(max(1, round(target_ms / 1000 / per_repeat)))
    step(sample).numpy()
    return lambda images: step(images).numpy()


def _windows(make_iterator, compute, tuner, windows: int, window_steps: int,
             progress, label: str) -> List[dict]:
    trace, generation = [], 0
    iterator = make_iterator(generation)
    next(iterator)  # pipeline start-up (thread pools, first shard opens) is not a step
    for w in range(windows):
        wait = busy = 0.0
        for _ in range(window_steps):
            t0 = time.perf_counter()
            images, _ = next(iterator)
            t1 = time.perf_counter()
            compute(images)
            t2 = time.perf_counter()
            wait, busy = wait + t1 - t0, busy + t2 - t1
        stall = wait / (wait + busy)
        entry = dict(window=w, stall_frac=stall, compute_ms=1000 * busy / window_steps,
                     wait_ms=1000 * wait / window_steps)
        settings = "sequential reads, no prefetch"
        if tuner.config.mode == "aware":
            entry.update(dataclasses.asdict(tuner.tuning))
            settings = (f"read parallelism {tuner.tuning.read_parallelism}, "
                        f"prefetch {tuner.tuning.prefetch}")
        trace.append(entry)
        progress(f"{label} window {w}: stall {100 * stall:.1f}% ({settings})")
        if tuner.observe(stall):
            generation += 1
            iterator = make_iterator(generation)
            next(iterator)
    return trace


def input_suite(latency_ms: float = 10.0, jitter_ms: float = 5.0, per: str = "record",
                batch: int = 64, compute_ms: float = 100.0, windows: int = 5,
                window_steps: int = 10, progress=print) -> dict:
    """Stall fraction of the naive and the congestion-aware pipeline under injected latency."""
    source = datasets.get_source("mnist5k")
    data = pipeline.DatasetConfig("mnist5k", None, "train", 32, "pad", False, 10_000, False)
    congestion = congestion_lib.Congestion(latency_ms, jitter_ms, per)
    compute = _compute_step(compute_ms)
    result = {"suite": "input", "dataset": "mnist5k", "batch": batch,
              "injected": dataclasses.asdict(congestion),
              "mean_read_ms_per_batch": batch * (latency_ms + jitter_ms / 2)
              if per == "record" else None}
    for mode in ("naive", "aware"):
        inputs = dataclasses.replace(tuning.InputConfig(), mode=mode, congestion=congestion)
        tuner = tuning.InputTuner(inputs)

        def make_iterator(generation, inputs=inputs, tuner=tuner):
            fn = pipeline.real_input_fn(source, data, batch, seed=generation, inputs=inputs,
                                        tuning=tuner.tuning)
            return iter(fn(tf.distribute.InputContext()))
        # The naive pipeline never changes: one window after start-up is its steady state.
        trace = _windows(make_iterator, compute, tuner, windows if mode == "aware" else 2,
                         window_steps, progress, mode)
        result[f"{mode}_stall_frac"] = trace[-1]["stall_frac"]
        result[f"{mode}_trace"] = trace
    return result
