"""The async_quality benchmark suite (benchmarks/async_quality.py) on a tiny budget."""

from __future__ import annotations

import re

import numpy as np
import pytest

from paragan_tf.errors import ConfigError


@pytest.mark.slow
def test_the_async_quality_suite_on_a_tiny_budget(tmp_path, mnist_classifier):
    from benchmarks import async_quality
    result = async_quality.async_quality(
        budget_minutes=0.25, per_worker_batch=8, arms=("sample_buffer",),
        conditions=("straggler",), eval_samples=250, work_dir=str(tmp_path),
        classifier_dir=mnist_classifier[0], config="gin/tiny.gin", log_every=5)
    arm = result["arms"]["sample_buffer"]["straggler"]
    print(arm)
    assert arm["images_per_sec"] > 0 and arm["steps"] > 10
    assert np.isfinite(arm["fcd"]) and 0.0 <= arm["conditional_accuracy"] <= 1.0
    closures = arm["closures_by_worker"]
    assert set(closures) == {"worker:0", "worker:1"}
    assert sum(closures.values()) >= 3 * arm["steps"]
    # The sample-buffer trainer end to end: filled, ages reported, a checkpoint on SIGTERM.
    log = (tmp_path / "sample_buffer_straggler.log").read_text()
    assert "asynchronous training (mode 'sample_buffer')" in log
    assert "a sample buffer of 4 batches, as many rounds in flight" in log
    assert "sample buffer: 4 of 4 slots filled from the current G" in log
    ages = [float(a) for a in re.findall(r"sample age ([\d.]+)", log)]
    assert ages and all(0.0 <= a <= 4 * 2 for a in ages), ages
    assert re.search(rf"stopped by signal 15 at step {arm['steps']}; checkpoint saved", log)
    assert (tmp_path / "sample_buffer_straggler" / f"ckpt-{arm['steps']}.index").exists()
    with pytest.raises(ConfigError, match="unknown arms"):
        async_quality.async_quality(arms=("nope",), work_dir=str(tmp_path))
