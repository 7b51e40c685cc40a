"""The input pipeline's settings, and the tuner that reacts to measured input stalls.

docs/design.md section 4: measure, per step, how long training waited for input; when
that wait grows (a congested store), raise read parallelism and prefetch depth,
and report it. The trainer (train/sync_trainer.py) measures `perf/input_wait_frac` per
log window and feeds it to `InputTuner.observe`; when the tuning changes it
builds a new input iterator with it (data/pipeline.py reads the settings).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional

from absl import logging
import gin
import tensorflow as tf

from paragan_tf.errors import ConfigError


# The seam where a benchmark slows the store down (benchmarks/congestion.py): called on
# each shard's records as they are read, with the shard's index.
ReadHook = Callable[[tf.data.Dataset, tf.Tensor], tf.data.Dataset]


@gin.configurable("input_pipeline", denylist=["prepared"])
@dataclasses.dataclass(frozen=True, kw_only=True)
class InputConfig:
    """The congestion-aware pipeline's settings (`input_pipeline.*`; docs/design.md section 4).

    Shards are read by a parallel interleave, decoded and resized with AUTOTUNE
    parallelism and prefetched; with `adaptive`, read parallelism and prefetch
    are doubled while the measured input stall exceeds `target_stall`. In-memory
    sources are decoded once and cached: nothing to tune there. A prepared
    dataset, or a store slowed by `read_hook`, is read shard by shard every epoch.

    Attributes:
      num_shards: the source is read as this many shards ("files").
      read_parallelism: shards read at once; 0: start at max(4, CPU count) (reads
        wait on storage, not on cores).
      prefetch: per-replica batches prefetched; 0: start at 2.
      adaptive: double read parallelism and prefetch (a new input iterator at
        the next log boundary) while perf/input_wait_frac > target_stall.
      target_stall: the input wait fraction the tuner aims below.
      max_read_parallelism: the tuner's ceiling (prefetch goes to the same); reads
        stop at num_shards too, the most shards the interleave holds open.
      service_workers: read through this many tf.data service workers started
        on 127.0.0.1 (data/service.py); 0: in the trainer's own tf.data runtime.
        Each service worker shuffles with its own random seed (identical seeds
        would make every worker deliver the same stream).
      deterministic: sharded reads deliver records in a fixed order (a function
        of the seed, the shard count and max_read_parallelism, the interleave's
        cycle length), so a resumed run continues at the exact example it
        stopped at; False: records as they arrive (a slow read does not hold
        back the others; a resume continues "in distribution").
      read_hook: see ReadHook; None: records as stored. Set, the source is read
        shard by shard every epoch, as a store too large to cache would be.
      prepared: the source is a prepared dataset, always streamed from its store
        (set from the source, not a setting).
    """

    num_shards: int = 16
    read_parallelism: int = 0
    prefetch: int = 0
    adaptive: bool = True
    target_stall: float = 0.05
    max_read_parallelism: int = 64
    service_workers: int = 0
    deterministic: bool = True
    read_hook: Optional[ReadHook] = None
    prepared: bool = False

    def __post_init__(self):
        if (self.num_shards < 1 or self.read_parallelism < 0 or self.prefetch < 0
                or self.max_read_parallelism < 1 or self.service_workers < 0):
            raise ConfigError("input_pipeline: num_shards and max_read_parallelism must be "
                              ">= 1, read_parallelism, prefetch and service_workers >= 0")

    @property
    def sharded(self) -> bool:
        """Read shard by shard every epoch (else: in-memory arrays are cached, encoded
        files are shuffled by name and decoded as read)."""
        return self.read_hook is not None or self.prepared

    @property
    def read_ceiling(self) -> int:
        """The most shards read at once: no more than the interleave holds open."""
        return min(self.max_read_parallelism, self.num_shards)

    @property
    def tuned(self) -> bool:
        """Read parallelism and prefetch are ours to set (and the tuner's to raise)."""
        return self.sharded


@dataclasses.dataclass(frozen=True)
class Tuning:
    """The knobs the tuner turns: shards read at once and batches prefetched."""

    read_parallelism: int
    prefetch: int


class InputTuner:
    """Raises read parallelism and prefetch depth while the measured input stall is too high."""

    def __init__(self, config: InputConfig):
        self.config = config
        self.tuning = Tuning(min(config.read_parallelism or max(4, os.cpu_count() or 1),
                                 config.read_ceiling), config.prefetch or 2)

    def observe(self, stall_frac: float) -> bool:
        """Feeds one window's input wait fraction; True when the tuning changed."""
        cfg, old = self.config, self.tuning
        if not (cfg.adaptive and cfg.tuned):
            return False
        if stall_frac <= cfg.target_stall or old.read_parallelism >= cfg.read_ceiling:
            return False
        self.tuning = Tuning(min(2 * old.read_parallelism, cfg.read_ceiling),
                             min(2 * old.prefetch, cfg.max_read_parallelism))
        logging.info("input stalls %.1f%% of the time (target %.1f%%): read parallelism "
                     "%d -> %d, prefetch %d -> %d", 100 * stall_frac, 100 * cfg.target_stall,
                     old.read_parallelism, self.tuning.read_parallelism, old.prefetch,
                     self.tuning.prefetch)
        return True
