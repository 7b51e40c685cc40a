"""The async_quality benchmark suite (benchmarks/async_quality.py, ParaGAN's ablation) on a
tiny budget: real local clusters, workers pinned to a core each."""

from __future__ import annotations

import re

import numpy as np
import pytest

from paragan_tf.errors import ConfigError


def _suite(tmp_path, classifier, mode, condition, budget_minutes=0.25, checkpoint_images=400):
    from benchmarks import async_quality
    return async_quality.async_quality(
        budget_minutes=budget_minutes, per_worker_batch=8, arms=(mode,), policies=("plain",),
        conditions=(condition,), repeats=1, eval_samples=250, work_dir=str(tmp_path),
        classifier_dir=classifier, config="gin/tiny.gin", log_every=5,
        checkpoint_images=checkpoint_images)


@pytest.mark.slow
def test_the_sample_buffer_under_a_congested_store_on_one_worker(tmp_path, mnist_classifier,
                                                                 monkeypatch):
    from benchmarks import straggler
    # 4 reads of 1.5 s at once: worker:1's D closures (8 real images) wait 3 s each, so it
    # ran 4-8 in the 15 s against worker:0's 21-22, alone or beside two busy loops
    # (2026-11-29). (Its first batch waits for a shuffle window of 64 reads: 24 s.)
    monkeypatch.setattr(straggler, "INPUT_LATENCY_MS", 1500.0)
    result = _suite(tmp_path, mnist_classifier[0], "sample_buffer", "slow_input")
    [run] = result["runs"]["sample_buffer"]["plain"]["slow_input"]
    print(run)
    assert run["images_per_sec"] > 0 and run["steps"] > 10
    # Stopped at the deadline, 15 s after the first record: the rounds in flight settle
    # first, one of them a read of worker:1's slow store (3 s): 16.4-18.2 s here, alone
    # and in the full suite (2026-11-29). Rounds finish in order, so one such read can
    # also hold every later round just before the deadline, and the last one finished
    # ends up to 3 s early (13.2 s under a load of two more processes, 2026-12-07).
    # Counted from the launch it would be over 40 s.
    assert 15.0 - 3.0 <= run["training_seconds"] <= 24.0, run["training_seconds"]
    assert np.isfinite(run["fcd"]) and 0.0 <= run["conditional_accuracy"] <= 1.0
    assert result["slow_input"]["latency_ms"] == 1500.0
    closures = run["closures_by_worker"]
    assert set(closures) == {"worker:0", "worker:1"}
    assert sum(closures.values()) >= (run["d_steps"] + 1) * run["steps"]  # D steps + G
    # Only worker:1 reads through the slow store (CongestedStore.workers, resolved on
    # each worker from the one function the coordinator traced): it runs fewer of the
    # closures that read (D); G closures read nothing and go to whichever worker is free.
    d_closures = run["d_closures_by_worker"]
    assert sum(d_closures.values()) >= run["d_steps"] * run["steps"]
    assert d_closures["worker:1"] < 0.75 * d_closures["worker:0"], d_closures
    # The coordinator and the server are measured beside the pinned workers.
    assert set(run["cpu_seconds"]) == {"worker:0", "worker:1", "chief:0", "ps:0"}
    assert all(seconds > 0 for seconds in run["cpu_seconds"].values()), run["cpu_seconds"]
    summary = result["summary"]["sample_buffer"]["plain"]["slow_input"]
    assert summary["images_per_sec"] == {"median": run["images_per_sec"],
                                         "min": run["images_per_sec"],
                                         "max": run["images_per_sec"]}
    # The sample-buffer trainer end to end: filled, ages reported, a checkpoint on SIGTERM.
    log = (tmp_path / "sample_buffer_plain_slow_input_0.log").read_text()
    assert "started worker:1" in log and "on cores" in log
    assert "asynchronous training (mode 'sample_buffer')" in log
    assert "a sample buffer of 4 batches, as many rounds in flight" in log
    assert "sample buffer: 4 of 4 slots filled from the current G" in log
    ages = [float(a) for a in re.findall(r"sample age ([\d.]+)", log)]
    assert ages and all(0.0 <= a <= 4 * 2 for a in ages), ages
    assert re.search(rf"stopped by signal 15 at step {run['steps']}; checkpoint saved", log)
    assert (tmp_path / "sample_buffer_plain_slow_input_0" / f"ckpt-{run['steps']}.index").exists()
    with pytest.raises(ConfigError, match="unknown arms"):
        _suite(tmp_path, mnist_classifier[0], "nope", "even")


@pytest.mark.slow
def test_a_synchronous_job_that_loses_a_worker_is_relaunched_and_resumes(tmp_path,
                                                                         mnist_classifier):
    # Killed 15 s in, after the first periodic checkpoints (every 25 steps of 16 images,
    # ~3 s here); the relaunch trains from ~35 s (2026-11-29).
    result = _suite(tmp_path, mnist_classifier[0], "sync", "restart", budget_minutes=0.75)
    [run] = result["runs"]["sync"]["plain"]["restart"]
    print(run)
    log = (tmp_path / "sync_plain_restart_0.log").read_text()
    # Two launches: the first loses worker:1 (SIGKILL) and is torn down, the second
    # resumes from the run's last periodic checkpoint and is stopped at the budget.
    assert log.count("started worker:1") == 2, log[-3000:]
    resumed = int(re.search(r"resumed from \S*ckpt-(\d+) at step", log).group(1))
    assert run["steps"] > resumed > 0
    # Stopped at the deadline, 45 s after the first record, the relaunch inside the window:
    # its training ends within two calls of 5 steps (the workers save at the next call):
    # 45.6-47.7 s here, alone and in the full suite (2026-11-29). Counted from the launch
    # it would be over 60 s.
    assert 45.0 <= run["training_seconds"] <= 55.0, run["training_seconds"]
    # The quality curve: every checkpoint scored at the second its step was reached; the
    # steps the relaunch trained again are placed by the relaunch's records.
    curve = run["curve"]
    assert [p["step"] for p in curve] == sorted({p["step"] for p in curve})
    assert [p["seconds"] for p in curve] == sorted(p["seconds"] for p in curve)
    assert curve[-1]["step"] == run["steps"] and curve[-1]["seconds"] == run["training_seconds"]
    assert all(p["step"] % 25 == 0 for p in curve[:-1]) and resumed in [p["step"] for p in curve]
    after = [p for p in curve if p["step"] > resumed][0]
    assert after["seconds"] > 15.0, curve  # reached again only after the relaunch
    assert all(np.isfinite(p["fcd"]) for p in curve)
    # CPU per image over the metered window, not the nominal budget.
    workers = run["cpu_seconds"]["worker:0"] + run["cpu_seconds"]["worker:1"]
    assert run["worker_cpu_ms_per_image"] == pytest.approx(
        1000 * workers / (run["images_per_sec"] * run["cpu_window_seconds"]))
    assert 38.0 < run["cpu_window_seconds"] <= 47.0
