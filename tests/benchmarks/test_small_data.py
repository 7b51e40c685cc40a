"""The small_data benchmark suite (benchmarks/small_data.py) on a tiny run."""

from __future__ import annotations

import os

import numpy as np
import pytest

from paragan_tf.errors import ConfigError


def test_the_small_data_suite_on_a_tiny_run(tmp_path, mnist_classifier):
    from tests.helpers.training import declared_for
    from benchmarks import small_data
    stand_in = declared_for(mnist_classifier[0], str(tmp_path / "classifier"), "fashion_mnist")
    # One arm (each is a training and an evaluation process): the one with most settings.
    # FID: the time_to_quality suite's test covers it (Inception would double this test).
    result = small_data.small_data(
        steps=4, per_class=5, arms=("diffaugment_lecam",), mark_steps=2, eval_samples=250,
        eval_real=250, fid_samples=0, work_dir=str(tmp_path / "runs"),
        classifier_dir=stand_in, config="gin/tiny.gin", log_every=2)
    arm = result["arms"]["diffaugment_lecam"]
    assert set(result["arms"]) == {"diffaugment_lecam"}
    assert arm["steps"] == 4 and arm["seconds"] > 0
    for key in ("fcd", "intra_class_fcd", "precision", "recall", "conditional_accuracy",
                "logit_gap"):
        assert np.isfinite(arm[key]), key
    assert arm["protocol"] == "fcd0.25k_test0.25k"
    # The curve: every checkpoint scored, the last one the final numbers.
    assert [p["step"] for p in arm["curve"]] == [2, 4]
    assert all(np.isfinite(p["logit_gap"]) and p["seconds"] > 0 for p in arm["curve"])
    assert arm["curve"][-1]["fcd"] == arm["fcd"] and "fid" not in arm
    assert os.path.exists(arm["grid"]) and arm["grid"].endswith("step_0000004.png")
    # It trained what it names, on the 50-image subset.
    log = (tmp_path / "runs" / "diffaugment_lecam.log").read_text()
    assert "training on 50 examples of fashion_mnist split 'train'" in log
    operative = (tmp_path / "runs" / "diffaugment_lecam" / "operative_config.gin").read_text()
    assert "lecam_weight = 0.3" in operative and "'color,translation,cutout'" in operative
    assert small_data.ARMS["none"] == []
    with pytest.raises(ConfigError, match="unknown arms"):
        small_data.small_data(arms=("nope",), work_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="mark_steps"):
        small_data.small_data(steps=100, mark_steps=200, work_dir=str(tmp_path))
