"""The input tuner (data/tuning.py): more parallel reads while input stalls, within its limits."""

from __future__ import annotations

import dataclasses

from benchmarks.congestion import CongestedStore
from paragan_tf.data import tuning


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
