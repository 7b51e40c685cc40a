"""What the controller drives (train/trainer.py): a trainer must train; by default it reports
the experiment's step and skips in a row, has no steps in flight and nothing to give up."""

from __future__ import annotations

import types

import pytest
import tensorflow as tf

from paragan_tf.train import bookkeeping
from paragan_tf.train import trainer as trainer_lib


class _OneAtATime(trainer_lib.Trainer):
    """Only `train`: the rest is the interface's."""

    def train(self, num_steps):
        self.exp.step.assign_add(num_steps)
        return trainer_lib.Progress(int(self.exp.step.numpy()), num_steps)


def test_a_trainer_must_train_and_by_default_reports_the_experiments_step():
    exp = types.SimpleNamespace(step=tf.Variable(7, dtype=tf.int64), health=bookkeeping.Health(
        tf.Variable(4, dtype=tf.int64), tf.Variable(2, dtype=tf.int64)))
    with pytest.raises(TypeError, match="abstract"):
        trainer_lib.Trainer(exp)  # pylint: disable=abstract-class-instantiated
    trainer = _OneAtATime(exp)
    assert (trainer.unit, trainer.steps_per_call, trainer.is_chief, trainer.task_id) == (
        "step", 1, True, 0)
    assert trainer.train(3) == trainer_lib.Progress(10, 3, {})
    # Nothing in flight: `state` reports the step reached, as no step finished in the call,
    # and the NaN guard's skips in a row (the controller stops the run on them).
    assert trainer.state() == trainer_lib.Progress(10, 0, {}, consecutive_skips=2)
    assert (trainer.record_file, trainer.record()) == ("", None)
    trainer.close()


def test_each_report_has_its_own_metrics():
    first, second = trainer_lib.Progress(1), trainer_lib.Progress(2)
    first.metrics["loss/D"] = 1.0
    assert second.metrics == {}
