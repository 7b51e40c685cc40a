"""Checkpoints (train/checkpoints.py): a round trip restores every variable; none is written with
non-finite weights or half-loaded; an unreadable newest falls back; a preemption counter is
read elsewhere. (Killing real processes: tests/e2e/test_crash_resume.py.)"""

from __future__ import annotations

import os

import gin
import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.errors import ConfigError
from paragan_tf.errors import Diverged
from paragan_tf.train import checkpoints
from paragan_tf.train import experiment
from paragan_tf.train import driver


def _weights(exp):
    return {v.name: v.numpy() for m in (exp.generator, exp.discriminator, exp.generator_ema)
            for v in m.variables}


def _one_device():
    return tf.distribute.OneDeviceStrategy("/cpu:0")


def test_checkpoint_round_trip_restores_every_variable(tiny_gin, tmp_path):
    tiny_gin("train.total_steps = 2")
    exp = experiment.build(_one_device())
    driver.train(exp, str(tmp_path))
    saved = _weights(exp)
    saved_slots = [v.numpy() for v in exp.g_optimizer.variables]
    gin.clear_config()
    tiny_gin("train.total_steps = 2", "train.seed = 99")  # different init, same architecture
    fresh = experiment.build(_one_device())
    assert any(not np.array_equal(saved[n], v) for n, v in _weights(fresh).items())
    ckpt = checkpoints.Checkpointer(str(tmp_path), 3, **fresh.trackables())
    assert ckpt.restore_latest().endswith("ckpt-2")
    for name, value in _weights(fresh).items():
        np.testing.assert_array_equal(value, saved[name], err_msg=name)
    for a, b in zip(fresh.g_optimizer.variables, saved_slots):
        np.testing.assert_array_equal(a.numpy(), b)
    assert int(fresh.step.numpy()) == 2


def test_a_checkpoint_with_non_finite_weights_is_never_written(tiny_gin, tmp_path):
    tiny_gin()
    exp = experiment.build(_one_device())
    ckpt = checkpoints.Checkpointer(str(tmp_path), 3, **exp.trackables())
    ckpt.save(1)
    kernel = exp.discriminator.trainable_variables[0]
    kernel.assign(tf.fill(kernel.shape, float("inf")))
    with pytest.raises(Diverged, match=r"not writing the checkpoint of step 2: .*NaN or Inf"):
        ckpt.save(2)
    assert ckpt.latest.endswith("ckpt-1")
    assert not tf.io.gfile.glob(os.path.join(str(tmp_path), "ckpt-2*"))


def test_another_architecture_fails_loudly_and_nothing_is_half_loaded(tiny_gin, tmp_path):
    tiny_gin()
    exp = experiment.build(_one_device())
    checkpoints.Checkpointer(str(tmp_path), 3, **exp.trackables()).save(2)
    gin.clear_config()
    tiny_gin("Discriminator.ch = 8", "train.seed = 5")  # wider D, same G
    other = experiment.build(_one_device())
    before = _weights(other)
    ckpt = checkpoints.Checkpointer(str(tmp_path), 3, **other.trackables())
    with pytest.raises(ConfigError, match="does not match this run's models"):
        ckpt.restore_latest()
    # G matches the checkpoint and may have been assigned before D failed: it was put back.
    for name, value in _weights(other).items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)
    assert int(other.step.numpy()) == 0


def test_an_unreadable_newest_checkpoint_falls_back_to_the_one_before(tiny_gin, tmp_path):
    tiny_gin()
    exp = experiment.build(_one_device())
    ckpt = checkpoints.Checkpointer(str(tmp_path), 3, **exp.trackables())
    exp.step.assign(1)
    ckpt.save(1)
    at_one = _weights(exp)
    exp.step.assign(2)
    exp.generator.trainable_variables[0].assign_add(
        tf.ones_like(exp.generator.trainable_variables[0]))
    ckpt.save(2)
    data, = tf.io.gfile.glob(os.path.join(str(tmp_path), "ckpt-2.data-*"))
    with open(data, "r+b") as f:  # a damaged disk: the data file loses its tail
        f.truncate(os.path.getsize(data) // 2)
    fresh = checkpoints.Checkpointer(str(tmp_path), 3, **exp.trackables())
    assert fresh.restore_latest().endswith("ckpt-1")
    assert int(exp.step.numpy()) == 1
    for name, value in _weights(exp).items():
        np.testing.assert_array_equal(value, at_one[name], err_msg=name)


def test_a_checkpoint_with_the_preemption_counter_restores_elsewhere(tiny_gin, tmp_path):
    """A MultiWorkerMirrored run stopped by SIGTERM saves TensorFlow's preemption counter
    too; one-device readers (bin/eval.py, sample.py, export.py) must still restore it."""
    tiny_gin()
    exp = experiment.build(_one_device())
    for extra, ok in (("checkpointed_runs", True), ("something_else", False)):
        folder = str(tmp_path / extra)
        written = tf.train.Checkpoint(**exp.trackables(),
                                      **{extra: tf.Variable(3, dtype=tf.int64)})
        tf.train.CheckpointManager(written, folder, 3, checkpoint_name="ckpt").save(7)
        saver = checkpoints.Checkpointer(folder, 3, **exp.trackables())
        if ok:
            assert saver.restore(os.path.join(folder, "ckpt-7")).endswith("ckpt-7")
        else:  # the negative control: any other extra object is still a mismatch
            with pytest.raises(ConfigError, match="does not match this run's models"):
                saver.restore(os.path.join(folder, "ckpt-7"))


@pytest.mark.parametrize("saved,restored", [("mixed_bfloat16", "mixed_float16"),
                                            ("mixed_float16", "float32")])
def test_a_change_of_precision_restores_all_but_the_float16_loss_scale(
        tiny_gin, tmp_path, policy, saved, restored):
    """A run started on a V100 (`auto`: float16 with loss scaling) resumes on an A100
    (bfloat16) and back: only the loss scale is on one side alone; a new one starts."""
    tiny_gin("train.total_steps = 2", f"layout.precision = '{saved}'")
    exp = experiment.build(_one_device())
    driver.train(exp, str(tmp_path))
    weights = _weights(exp)
    gin.clear_config()
    tiny_gin("train.seed = 99", f"layout.precision = '{restored}'")
    other = experiment.build(_one_device())
    saver = checkpoints.Checkpointer(str(tmp_path), 3, **other.trackables())
    assert saver.restore_latest().endswith("ckpt-2")
    for name, value in _weights(other).items():
        np.testing.assert_array_equal(value, weights[name], err_msg=name)
    assert int(other.step.numpy()) == 2
    # The negative control: the loss scale is the only object let through; with one more
    # object beside it the same change of precision is a mismatch.
    folder = str(tmp_path / "extra")
    written = tf.train.Checkpoint(**exp.trackables(), something_else=tf.Variable(3))
    tf.train.CheckpointManager(written, folder, 3, checkpoint_name="ckpt").save(7)
    with pytest.raises(ConfigError, match="does not match this run's models"):
        checkpoints.Checkpointer(folder, 3, **other.trackables()).restore(
            os.path.join(folder, "ckpt-7"))
