"""The synchronous trainer (train/sync_trainer.py): a diverging run stops,
the same seed is bit for bit the same and a resumed run equals an uninterrupted one, and
the input's share of the step time is measured."""

from __future__ import annotations

import os
import shutil

import gin
import numpy as np
import pytest
import tensorflow as tf

from benchmarks import congestion  # noqa: F401  (registers @CongestedStore with gin)
from paragan_tf.errors import Diverged
from paragan_tf.train import experiment
from paragan_tf.train import driver
from tests.helpers.training import train_tiny


def _weights(exp):
    return {v.name: v.numpy() for m in (exp.generator, exp.discriminator, exp.generator_ema)
            for v in m.variables}


def _one_device():
    return tf.distribute.OneDeviceStrategy("/cpu:0")


def test_diverging_run_stops_after_k_skipped_steps_with_only_finite_checkpoints(
        tiny_gin, tmp_path):
    # A D learning rate of 1e38 puts D's weights near float32's limit after one
    # update; from then on its spectral norm and logits are Inf/NaN every step.
    tiny_gin("train.total_steps = 40", "train.checkpoint_every = 1", "train.log_every = 1",
             "train.steps_per_loop = 8", "train.max_consecutive_skips = 3",
             "D/optimizer.learning_rate = 1e38", "train.max_to_keep = 100")
    exp = experiment.build(_one_device())
    with pytest.raises(Diverged, match=r"3 consecutive steps .*max_consecutive_skips=3"):
        driver.train(exp, str(tmp_path))
    skipped = int(exp.health.skipped.numpy())
    assert skipped == 3 and int(exp.health.consecutive.numpy()) == 3
    assert int(exp.step.numpy()) < 40
    written = tf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths
    assert written
    for path in written:
        reader = tf.train.load_checkpoint(path)
        for name, dtype in reader.get_variable_to_dtype_map().items():
            if dtype.is_floating:
                assert np.all(np.isfinite(reader.get_tensor(name))), (path, name)
    events = tf.io.gfile.glob(os.path.join(str(tmp_path), "events.out.tfevents.*"))
    tags = {v.tag for e in events for ev in tf.compat.v1.train.summary_iterator(e)
            for v in ev.summary.value}
    assert "health/skipped_steps" in tags


def _train(tiny_gin, model_dir, total_steps, *extra):
    """Trains (or resumes) to total_steps; returns the experiment."""
    gin.clear_config()
    tiny_gin(f"train.total_steps = {total_steps}", "train.d_steps = 2",
             "dataset.random_flip = True", "train.checkpoint_every = 100",
             "train.sample_every = 100", *extra)
    exp = experiment.build(_one_device())
    driver.train(exp, str(model_dir))
    return exp


@pytest.mark.slow
def test_same_seed_is_bitwise_deterministic_and_resume_equals_an_uninterrupted_run(
        tiny_gin, tmp_path):
    """One CPU device: identical weights, bit for bit (tolerance 0). Resuming restores
    every variable exactly (optimizer step counts included) and replays both input
    streams to the checkpoint's position, and the CPU kernels of this model are
    deterministic here without enable_op_determinism, so nothing may differ. Two
    separately built runs of the same seed (a, c) agreeing is the determinism check; c
    stopping at 3 and resuming is the resume check. A copy of c's step-3 checkpoint
    resumed with `resume_input='reshuffle'` sees other data and must differ: the
    comparison can fail."""
    straight = _weights(_train(tiny_gin, tmp_path / "a", 6))
    _train(tiny_gin, tmp_path / "c", 3)
    shutil.copytree(tmp_path / "c", tmp_path / "d")
    exp = _train(tiny_gin, tmp_path / "c", 6)
    resumed = _weights(exp)
    reshuffled = _weights(_train(tiny_gin, tmp_path / "d", 6,
                                 "train.resume_input = 'reshuffle'"))
    for name in straight:
        np.testing.assert_array_equal(resumed[name], straight[name], err_msg=name)
    assert any(not np.array_equal(reshuffled[n], straight[n]) for n in straight)
    # 3 restored + 3 new updates (2 D steps per G step), saved as ckpt-6.
    assert int(exp.g_optimizer.iterations.numpy()) == 6
    assert int(exp.d_optimizer.iterations.numpy()) == 12
    assert tf.train.latest_checkpoint(str(tmp_path / "c")).endswith("ckpt-6")


def test_input_wait_fraction_separates_a_slow_store_from_cached_data(tiny_gin, tmp_path):
    # 8 records of 80 ms per step from one shard at a time (the tuner off): ~640 ms of
    # waiting per step against the tiny model's ~80 ms of compute. No checkpoints or
    # samples inside the window: host work there gives a read-ahead time to bank
    # batches. The slow store comes through the pipeline's read hook.
    quiet = ("train.checkpoint_every = 1000", "train.sample_every = 1000")
    slow = train_tiny(tiny_gin, tmp_path / "slow", "input_pipeline.read_hook = "
                       "@CongestedStore()", "CongestedStore.latency_ms = 80.0",
                       "input_pipeline.max_read_parallelism = 1",
                       "input_pipeline.prefetch = 1", "input_pipeline.adaptive = False", *quiet)
    fast = train_tiny(tiny_gin, tmp_path / "fast", *quiet)
    # Ratios, not absolute shares: another process on the machine slows the compute,
    # which lowers the slow store's share (0.27 once here beside two busy loops with a
    # 40 ms store) but not the gap.
    assert slow["perf/input_wait_frac"] > 0.3, slow
    assert slow["perf/input_wait_frac"] > 3 * fast["perf/input_wait_frac"], (slow, fast)
    # The slow store's reads are ours to set (and reported); cached data has none.
    assert slow["perf/read_parallelism"] == 1 and "perf/read_parallelism" not in fast
