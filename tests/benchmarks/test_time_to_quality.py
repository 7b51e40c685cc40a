"""The time_to_quality benchmark suite (benchmarks/time_to_quality.py) on tiny runs."""

from __future__ import annotations

import os

import numpy as np
import pytest

from paragan_tf.errors import ConfigError

# Steps each tiny run trains (two marks); FROZEN_MARGIN: how much worse a G that never moves
# must score (its FCD over the learning reference's last). Measured (AMD EPYC Zen 4, 2 cores,
# 2026-11-28, one sample grid a run): the reference's FCD 58.8 at step 20 and 43.8 at 40, the
# frozen G's 102.7 at both (2.3x); with the G rate ignored (optimizers.py using 2e-3 whatever
# the config says) the frozen config scores as the reference does, bit for bit, and the
# check fails. At 4 steps (before) the two were not told apart.
STEPS = 40
FROZEN_MARGIN = 1.5


def test_two_configs_are_trained_scored_at_every_mark_and_compared(tmp_path, mnist_classifier):
    from benchmarks import time_to_quality
    # The reference: the tiny model at a rate that moves it in a few steps, scored as trained
    # (no EMA: an average of 4 steps would still be mostly the untrained G). The second
    # recipe, told apart by its operative config, holds G still: it cannot learn, so it must
    # score worse and reach no target.
    learns = tmp_path / "tiny.gin"
    # One sample grid (at the end): tiny.gin's every 4 steps cost more than the steps do.
    learns.write_text("include 'gin/tiny.gin'\nG/optimizer.learning_rate = 2e-3\n"
                      "D/optimizer.learning_rate = 2e-3\ntrain.ema_decay = 0.0\ntrain.d_steps = 2\n"
                      f"train.total_steps = {STEPS}\ntrain.sample_every = {STEPS}\n")
    frozen = tmp_path / "tiny_frozen_g.gin"
    frozen.write_text(f"include '{learns}'\nG/optimizer.learning_rate = 1e-12\n")
    result = time_to_quality.time_to_quality(
        configs=(str(learns), str(frozen)), budget_minutes=5.0, mark_steps=STEPS // 2,
        eval_samples=100, eval_real=100, fid_samples=50, work_dir=str(tmp_path / "runs"),
        classifier_dir=mnist_classifier[0])
    tiny, other = result["runs"]["tiny"], result["runs"]["tiny_frozen_g"]
    for run in (tiny, other):
        assert run["steps"] == STEPS and [p["step"] for p in run["curve"]] == [STEPS // 2, STEPS]
        # Images D saw: step x batch 8 x 2 D steps (bound above); seconds from the run's
        # stats.jsonl.
        assert [p["images"] for p in run["curve"]] == [STEPS * 8, STEPS * 16]
        assert 0 < run["curve"][0]["seconds"] < run["curve"][1]["seconds"]
        assert all(np.isfinite(p["fcd"]) and 0 <= p["conditional_accuracy"] <= 1
                   for p in run["curve"])
        assert run["final_fid"]["step"] == STEPS and np.isfinite(run["final_fid"]["fid"])
        assert run["final_fid"]["protocol"].startswith("fid0.05k_")
        assert os.path.exists(os.path.join(run["model_dir"], "eval", "metrics.json"))
    # The suite tells the recipes apart: the frozen G is worse at every mark than the
    # reference's last, reaches no target, and has no time or speed-up in the summary.
    print("reference FCD", [p["fcd"] for p in tiny["curve"]],
          "frozen G FCD", [p["fcd"] for p in other["curve"]])
    assert all(p["fcd"] > FROZEN_MARGIN * tiny["curve"][-1]["fcd"] for p in other["curve"])
    assert other["seconds_to_target"] is None
    assert result["summary"]["tiny_frozen_g"] == dict(seconds_to_target=[None], median=None,
                                                      speedup=None)
    # The Inception statistics are named by what they embed (dataset, resolution, images):
    # one work folder serving Fashion-MNIST after mnist5k must not reuse mnist5k's.
    assert os.listdir(tmp_path / "runs").count("inception_mnist5k_32px_100.npz") == 1
    # The targets are the reference's last mark, which therefore reaches them there.
    last = tiny["curve"][-1]
    assert result["targets"]["fcd"] == last["fcd"]
    assert result["targets"]["conditional_accuracy"] == last["conditional_accuracy"]
    assert tiny["seconds_to_target"] <= last["seconds"]
    assert set(tiny["seconds_to_fcd"]) == {"10", "5", "2", "1"}
    assert result["summary"]["tiny"]["speedup"] == pytest.approx(1.0)
    # A folder of finished runs (a sweep's) is scored run by run against given targets;
    # their checkpoints were scored above already, so nothing is evaluated twice
    # (eval/metrics.json is not written again).
    written = {n: os.stat(os.path.join(r["model_dir"], "eval", "metrics.json")).st_mtime_ns
               for n, r in result["runs"].items()}
    rescored = time_to_quality.time_to_quality(
        runs=(str(tmp_path / "runs"),), fcd_target=1e9, accuracy_target=0.0, fid_samples=0,
        eval_samples=100, eval_real=100, work_dir=str(tmp_path / "runs"),
        classifier_dir=mnist_classifier[0])
    assert set(rescored["runs"]) == {"tiny", "tiny_frozen_g"} and not rescored["summary"]
    assert rescored["runs"]["tiny"]["curve"] == tiny["curve"]
    assert rescored["runs"]["tiny"]["seconds_to_target"] == tiny["curve"][0]["seconds"]
    assert written == {n: os.stat(os.path.join(r["model_dir"], "eval", "metrics.json"))
                       .st_mtime_ns for n, r in rescored["runs"].items()}
    # Both configs trained what they name.
    operative = open(os.path.join(other["model_dir"], "operative_config.gin")).read()
    assert "G/optimizer.learning_rate = 1e-12" in operative and "max_minutes = 5.0" in operative


def test_seconds_to_a_target_is_the_first_mark_meeting_both_thresholds():
    from benchmarks import time_to_quality
    curve = [dict(seconds=10.0, fcd=5.0, conditional_accuracy=0.9),
             dict(seconds=20.0, fcd=2.0, conditional_accuracy=0.5),
             dict(seconds=30.0, fcd=2.5, conditional_accuracy=0.95)]
    assert time_to_quality.seconds_to(curve, fcd=3.0, accuracy=0.9) == 30.0
    assert time_to_quality.seconds_to(curve, fcd=5.0, accuracy=0.5) == 10.0
    assert time_to_quality.seconds_to(curve, fcd=1.0, accuracy=0.5) is None


def test_bad_requests_are_refused_by_name(tmp_path):
    from benchmarks import time_to_quality
    with pytest.raises(ConfigError, match="share a file name"):
        time_to_quality.time_to_quality(configs=("gin/tiny.gin", "other/tiny.gin"),
                                        work_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="needs --fcd_target and --accuracy_target"):
        time_to_quality.time_to_quality(runs=("runs/x",), work_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="they train different data: gin/tiny.gin 'mnist5k' "
                       "at 32 px, gin/fashion_mnist64.gin 'fashion_mnist' at 64 px"):
        time_to_quality.time_to_quality(configs=("gin/tiny.gin", "gin/fashion_mnist64.gin"),
                                        work_dir=str(tmp_path))
    with pytest.raises(ConfigError, match=r"no such config \['gin/nope.gin'\]"):
        time_to_quality.time_to_quality(configs=("gin/nope.gin",), work_dir=str(tmp_path))
