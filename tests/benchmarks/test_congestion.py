"""The simulated congested store (benchmarks/congestion.py): latency per record or per file."""

from __future__ import annotations

import time

import tensorflow as tf

from benchmarks.congestion import CongestedStore


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
