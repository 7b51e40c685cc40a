"""The controller (train/controller.py): the loop around a trainer, its intervals, the
progress window's means, levels and rates, and stopping on a signal, on a time budget."""

from __future__ import annotations

import os
import signal

import pytest
import tensorflow as tf

from paragan_tf.train import controller
from paragan_tf.train import experiment
from paragan_tf.train import loop
from paragan_tf.train import records
from paragan_tf.train import trainer as trainer_lib


def _one_device():
    return tf.distribute.OneDeviceStrategy("/cpu:0")


class _Counting(trainer_lib.Trainer):
    """Counts steps instead of training (loss/D is the step reached; 0.5 s of compute a
    step), up to 5 a call; sends itself SIGTERM when a call reaches `sigterm_at`."""

    steps_per_call = 5

    def __init__(self, exp, sigterm_at=None):
        super().__init__(exp)
        self.calls, self.closed, self.sigterm_at = [], False, sigterm_at

    def train(self, num_steps):
        self.calls.append(num_steps)
        self.exp.step.assign_add(num_steps)
        step = int(self.exp.step.numpy())
        if step == self.sigterm_at:
            signal.raise_signal(signal.SIGTERM)
        return trainer_lib.Progress(step, num_steps, {"loss/D": float(step),
                                                      "perf/compute_seconds": 0.5 * num_steps})

    def close(self):
        self.closed = True


def test_no_call_runs_past_an_interval_and_each_action_runs_on_its_multiples(tiny_gin,
                                                                              tmp_path):
    tiny_gin("train.total_steps = 10", "train.log_every = 4", "train.checkpoint_every = 6",
             "train.sample_every = 100", "train.max_to_keep = 10")
    exp = experiment.build(_one_device())
    trainer = _Counting(exp)
    result = controller.Controller(exp, str(tmp_path), trainer).run()
    # Up to 5 steps a call, cut at the log line at 4, the checkpoint at 6, the log at 8.
    assert trainer.calls == [4, 2, 2, 2] and trainer.closed
    logged = records.read(str(tmp_path), "log")
    assert [r["step"] for r in logged] == [4, 8, 10]  # every 4 steps, and the last
    assert [r["loss/D"] for r in logged] == [4.0, 7.0, 10.0]  # means over each line's steps
    images_per_second = 2 * exp.config.real_images_per_step  # 0.5 s a step
    assert [r["perf/step_images_per_sec"] for r in logged] == [images_per_second] * 3
    written = tf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths
    assert [os.path.basename(p) for p in written] == ["ckpt-6", "ckpt-10"]  # and the last
    assert os.path.exists(os.path.join(str(tmp_path), "samples", "step_0000010.png"))
    assert [r["step"] for r in records.read(str(tmp_path), "end")] == [10]
    assert result["step"] == 10 and result["loss/D"] == 10.0


def test_sigterm_ends_the_call_then_checkpoints_and_raises_interrupted(tiny_gin, tmp_path):
    tiny_gin("train.total_steps = 20", "train.log_every = 100", "train.checkpoint_every = 100",
             "train.sample_every = 100")
    exp = experiment.build(_one_device())
    trainer = _Counting(exp, sigterm_at=10)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(controller.Interrupted) as stopped:
        controller.Controller(exp, str(tmp_path), trainer).run()
    assert (stopped.value.signum, stopped.value.step) == (signal.SIGTERM, 10)
    assert trainer.calls == [5, 5] and trainer.closed
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-10")
    assert records.read(str(tmp_path), "end") == []  # stopped, not finished
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_window_averages_per_step_values_keeps_levels_and_times_after_tracing():
    window = controller.Window()
    window.add(trainer_lib.Progress(4, 4, {"loss/D": 1.0, "health/skipped_steps": 0.0,
                                           "perf/compute_seconds": 40.0}), timed=False)
    window.add(trainer_lib.Progress(6, 2, {"loss/D": 4.0, "health/skipped_steps": 1.0,
                                           "perf/compute_seconds": 0.5,
                                           "perf/input_wait_seconds": 0.25}), timed=True)
    window.add(trainer_lib.Progress(8, 2, {"loss/D": float("nan"), "health/skipped_steps": 2.0,
                                           "perf/compute_seconds": 0.5}), timed=True)
    metrics = window.metrics(images_per_step=16)
    assert metrics["loss/D"] == pytest.approx((4 * 1.0 + 2 * 4.0) / 6)  # the NaN steps left out
    assert metrics["health/skipped_steps"] == 2.0  # a level: as it is now
    # Rates of the calls after the one that traced (its 40 s left out): 4 steps in 1 s.
    assert metrics["perf/step_images_per_sec"] == pytest.approx(4 * 16 / 1.0)
    assert metrics["perf/input_wait_frac"] == pytest.approx(0.25)


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
