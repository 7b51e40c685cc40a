"""Simulated congested storage: latency and jitter injected per shard ("file") or per record.

ParaGAN's pipeline exists to hide a slow remote store; to measure that here
we make any source slow on purpose. A source is read as `num_shards` shards
(the files of a remote store); each read of a shard (per="file") or of each
record (per="record") first sleeps latency + jitter, jitter uniform in
[0, jitter_ms) and drawn from the shard and record index (reproducible).

The sleep is tf.data's own SleepDataset (a real thread sleep inside the
tf.data runtime, serialisable for tf.data service), not a Python callback that
would hold the GIL. It is reachable only through TensorFlow's testing module:
kept behind `_sleep_then()` so one place changes if that moves. The product
knows nothing of it: it calls whatever `input_pipeline.read_hook` it is given
on each shard's records (data/tuning.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Tuple

import gin
import tensorflow as tf
from tensorflow.python.data.experimental.ops import testing as tf_data_testing

from paragan_tf.errors import ConfigError


@gin.configurable
@dataclasses.dataclass(frozen=True, kw_only=True)
class CongestedStore:
    """A slow store: the product's read hook (`input_pipeline.read_hook =
    @CongestedStore()`, or tuning.InputConfig(read_hook=CongestedStore(...))).

    Attributes:
      latency_ms: fixed delay of each read.
      jitter_ms: extra delay, uniform in [0, jitter_ms), per read.
      per: "record" (every example read pays the delay) or "file" (opening a
        shard pays it, its records then stream).
      workers: only the input pipelines of these cluster workers read through the
        congested store (a straggler's, benchmarks/straggler.py); empty: every one.
    """

    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    per: str = "record"
    workers: Tuple[int, ...] = ()

    def __post_init__(self):
        if self.per not in ("record", "file"):
            raise ConfigError(f"CongestedStore.per={self.per!r} must be 'record' or 'file'")
        if self.latency_ms < 0 or self.jitter_ms < 0:
            raise ConfigError("CongestedStore.latency_ms and jitter_ms must be >= 0")

    def __call__(self, shard_records: tf.data.Dataset, shard: tf.Tensor) -> tf.data.Dataset:
        """The records of shard `shard`, read through the congested store."""
        if self.per == "file":
            return _sleep_then(shard_records, _delay_us(self, shard, -1))
        return shard_records.enumerate().flat_map(
            lambda i, record: _sleep_then(tf.data.Dataset.from_tensors(record),
                                          _delay_us(self, shard, i)))


def _delay_us(congestion: CongestedStore, shard: tf.Tensor, record: tf.Tensor) -> tf.Tensor:
    seed = tf.stack([tf.cast(shard, tf.int64), tf.cast(record, tf.int64)])
    jitter = tf.random.stateless_uniform([], seed, 0.0, congestion.jitter_ms)
    delay = tf.cast(1000.0 * (congestion.latency_ms + jitter), tf.int64)
    if not congestion.workers:
        return delay
    slow = tf.reduce_any(tf.equal(_worker_index(), tf.constant(congestion.workers, tf.int64)))
    return delay * tf.cast(slow, tf.int64)


def _worker_index() -> tf.Tensor:
    """The index of the cluster worker whose input pipeline this is (-1: not a worker).

    Under a parameter server the coordinator builds every worker's pipeline from one
    traced function: the index is then a value of the call on each worker.
    """
    cluster = json.loads(os.environ.get("TF_CONFIG") or "{}")
    if "ps" in cluster.get("cluster", {}):
        return tf.cast(tf.distribute.coordinator.experimental_get_current_worker_index(),
                       tf.int64)
    task = cluster.get("task", {"type": "worker", "index": 0})
    return tf.constant(task["index"] if task["type"] == "worker" else -1, tf.int64)


def _sleep_then(dataset: tf.data.Dataset, microseconds: tf.Tensor) -> tf.data.Dataset:
    """`dataset`, with a sleep before its first element."""
    # SleepDataset also sleeps before reporting its end; take(1) never asks it for that.
    gate = tf.data.Dataset.from_tensors(0).apply(tf_data_testing.sleep(microseconds)).take(1)
    return gate.flat_map(lambda _: dataset)
