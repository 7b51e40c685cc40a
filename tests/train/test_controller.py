"""The controller (train/controller.py): the loop around a trainer, its intervals and stopping."""

from __future__ import annotations

import os

import tensorflow as tf

from paragan_tf.train import experiment
from paragan_tf.train import loop


def _one_device():
    return tf.distribute.OneDeviceStrategy("/cpu:0")


def test_max_minutes_ends_the_run_as_at_its_last_step(tiny_gin, tmp_path):
    # A budget of 0.6 ms passes during the first call (one loop of 2 steps): that step is
    # then the last, with what a finished run leaves (final checkpoint, result, end record).
    from paragan_tf.train import records
    tiny_gin("train.total_steps = 1000", "train.steps_per_loop = 2", "train.log_every = 500",
             "train.checkpoint_every = 500", "train.sample_every = 500",
             "train.max_minutes = 0.00001")
    exp = experiment.build(_one_device())
    result = loop.train(exp, str(tmp_path))
    assert result["step"] == 2 and int(exp.step.numpy()) == 2
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-2")
    assert os.path.exists(os.path.join(str(tmp_path), "samples", "step_0000002.png"))
    assert [r["step"] for r in records.read(str(tmp_path), "end")] == [2]
    assert [r["step"] for r in records.read(str(tmp_path), "log")] == [2]
