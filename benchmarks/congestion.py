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
    """

    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    per: str = "record"

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
    return tf.cast(1000.0 * (congestion.latency_ms + jitter), tf.int64)


def _sleep_then(dataset: tf.data.Dataset, microseconds: tf.Tensor) -> tf.data.Dataset:
    """`dataset`, with a sleep before its first element."""
    # SleepDataset also sleeps before reporting its end; take(1) never asks it for that.
    gate = tf.data.Dataset.from_tensors(0).apply(tf_data_testing.sleep(microseconds)).take(1)
    return gate.flat_map(lambda _: dataset)
