"""The model_parallel benchmark suite (benchmarks/model_parallel.py) on a tiny run."""

from __future__ import annotations

import pytest

from paragan_tf.errors import ConfigError


def test_the_model_parallel_suite_records_each_devices_bytes_and_the_step(tmp_path):
    from benchmarks import model_parallel
    # One mode (a dry run and a training process): the split, which has two devices.
    result = model_parallel.model_parallel(
        progress=lambda m: None, steps=4, log_every=2, modes=["split"],
        work_dir=str(tmp_path), config="gin/tiny.gin")
    row = result["modes"]["split"]
    assert set(result["modes"]) == {"split"} and row["step_seconds"] > 0
    planned, placed = row["planned_total_gib_per_device"], row["variable_gib_per_device"]
    assert [k.split(" ")[0] for k in planned] == ["G", "D"], planned
    assert all(v > 0 for v in planned.values())
    # G with its EMA copy and Adam's moments on CPU:0, D with its moments on CPU:1: the
    # run's "devices" record (the data mode, with none, records nothing).
    assert [d.rsplit(":", 1)[1] for d in placed] == ["0", "1"] and all(placed.values())
    with pytest.raises(ConfigError, match="unknown model_parallel modes"):
        model_parallel.model_parallel(modes=["zero3"])
