"""The controller (train/controller.py): first with fake parts (a trainer that returns
scripted progress, a checkpointer that records its saves; no model, no TensorFlow
training) for the order of the actions at a boundary, the end of a run, SIGTERM and
divergence; then assembled by train/driver.py around a real experiment, with a trainer
that counts steps instead of training, for its intervals, the progress window's means
and rates, SIGTERM and the time budget."""

from __future__ import annotations

import os
import signal

import pytest
import tensorflow as tf

from paragan_tf.errors import Diverged, Interrupted
from paragan_tf.train import controller as controller_lib
from paragan_tf.train import driver
from paragan_tf.train import experiment
from paragan_tf.train import run_files
from paragan_tf.train import trainer as trainer_lib


class FakeTrainer(trainer_lib.Trainer):
    """Steps finish when `train` returns (as the synchronous trainer's), unless `lag` > 0:
    then the last `lag` scheduled steps finish only in `state()` (as rounds do)."""

    def __init__(self, events, steps_per_call=2, lag=0, skips_at=None, signal_at=None):
        # No Experiment: everything the controller reads comes from here.
        self.events, self.steps_per_call, self.lag = events, steps_per_call, lag
        self.skips_at, self.signal_at = skips_at or {}, signal_at
        self.scheduled = self.finished = 0
        self.closed = 0

    def _progress(self, before):
        skips = self.skips_at.get(self.finished, 0)
        return trainer_lib.Progress(self.finished, self.finished - before,
                                    {"loss/D": 1.0, "perf/compute_seconds": 0.01}, skips)

    def train(self, num_steps):
        self.events.append(("train", num_steps))
        before = self.finished
        self.scheduled += num_steps
        self.finished = max(self.finished, self.scheduled - self.lag)
        if self.signal_at is not None and self.scheduled >= self.signal_at:
            self.signal_at = None
            os.kill(os.getpid(), signal.SIGTERM)
        return self._progress(before)

    def state(self):
        self.events.append(("state", self.scheduled))
        before, self.finished = self.finished, self.scheduled
        return self._progress(before)

    def levels(self):
        return {"health/skipped_steps": 0.0}

    def end_window(self):
        self.events.append(("end_window", self.finished))

    def record(self):
        return {"finished": self.finished}

    record_file = "fake_trainer.json"

    def close(self):
        self.closed += 1


class FakeCheckpointer:
    def __init__(self, events):
        self.events, self.saved_step, self.latest = events, None, None

    def save(self, step):
        self.events.append(("save", step))
        self.saved_step, self.latest = step, f"ckpt-{step}"
        return self.latest


def _controller(events, trainer, tmp_path, total=10, log_every=5, checkpoint_every=5,
                sample_every=5, eval_every=10, **schedule):
    def samples(step):
        events.append(("samples", step))

    def evaluate(step, path):
        events.append(("evaluate", step, path))
        return {"fcd": 0.5}

    results = []
    actions = [controller_lib.Action("samples", sample_every, samples),
               controller_lib.Action("evaluation", eval_every, evaluate, on_checkpoint=True)]
    controller = controller_lib.Controller(
        trainer, FakeCheckpointer(events),
        controller_lib.Schedule(total, images_per_step=4, log_every=log_every,
                                checkpoint_every=checkpoint_every, **schedule),
        stats=run_files.Stats(str(tmp_path)), actions=actions, on_end=results.append)
    return controller, results


def _logged(events):
    """The steps the progress lines were at (each log ends a window)."""
    return [e[1] for e in events if e[0] == "end_window"]


def test_actions_run_in_order_at_each_boundary_and_the_run_settles_once(tmp_path):
    events = []
    trainer = FakeTrainer(events, steps_per_call=3)
    controller, results = _controller(events, trainer, tmp_path)
    result = controller.run()
    # Calls never cross a boundary: 3 + 2 to step 5, 3 + 2 to step 10.
    assert [e[1] for e in events if e[0] == "train"] == [3, 2, 3, 2]
    at_5 = events[events.index(("train", 2)) + 1:events.index(("save", 5)) + 1]
    # The log line (ending the trainer's window), the grid, then the checkpoint of
    # settled steps.
    assert at_5 == [("end_window", 5), ("samples", 5), ("state", 5), ("save", 5)]
    tail = events[events.index(("save", 5)) + 1:]
    # At the last step: everything finished first (one state() call serves the last
    # line, the checkpoint and the end), then the log line, samples, the checkpoint, and
    # the evaluation of that checkpoint; nothing is saved twice.
    assert tail == [("train", 3), ("train", 2), ("state", 10), ("end_window", 10),
                    ("samples", 10), ("save", 10), ("evaluate", 10, "ckpt-10")]
    assert [e[1] for e in events if e[0] == "state"] == [0, 5, 10]
    assert result["step"] == 10 and result["fcd"] == 0.5 and result["loss/D"] == 1.0
    assert results == [result] and trainer.closed == 1
    assert [r["kind"] for r in run_files.read(str(tmp_path))] == ["log", "log", "end"]
    # A log line holds the window's means and the trainer's levels as they are then.
    assert all(r["loss/D"] == 1.0 and r["health/skipped_steps"] == 0.0
               for r in run_files.read(str(tmp_path), "log"))
    assert (tmp_path / "fake_trainer.json").read_text().count('"finished": 10') == 1


def test_an_evaluation_off_the_checkpoint_interval_saves_its_own_checkpoint(tmp_path):
    events = []
    controller, _ = _controller(events, FakeTrainer(events), tmp_path, total=6, log_every=3,
                                checkpoint_every=0, sample_every=0, eval_every=3)
    controller.run()
    assert [e for e in events if e[0] in ("save", "evaluate")] == [
        ("save", 3), ("evaluate", 3, "ckpt-3"), ("save", 6), ("evaluate", 6, "ckpt-6")]


def test_late_steps_are_settled_before_a_checkpoint_and_at_the_end(tmp_path):
    """Rounds that finish after `train` returns (lag 1): a checkpoint holds every
    scheduled step; the log line reports only finished steps."""
    events = []
    trainer = FakeTrainer(events, steps_per_call=1, lag=1)
    controller, _ = _controller(events, trainer, tmp_path, total=4, log_every=2,
                                checkpoint_every=4, sample_every=0, eval_every=0)
    result = controller.run()
    assert _logged(events) == [1, 4]  # at step 2 one round is still in flight
    assert ("state", 4) in events and events[-1] == ("save", 4)
    assert result["step"] == 4


def test_sigterm_saves_at_the_step_reached_and_raises_interrupted(tmp_path):
    events = []
    trainer = FakeTrainer(events, steps_per_call=1, signal_at=3)
    controller, results = _controller(events, trainer, tmp_path, total=10)
    with pytest.raises(Interrupted) as raised:
        controller.run()
    assert raised.value.signum == signal.SIGTERM and raised.value.step == 3
    assert [e for e in events if e[0] == "train"] == [("train", 1)] * 3
    assert events[-1] == ("save", 3) and trainer.closed == 1 and results == []


def test_divergence_raises_naming_the_newest_checkpoint_and_saves_nothing_more(tmp_path):
    events = []
    trainer = FakeTrainer(events, steps_per_call=1, skips_at={7: 3})
    controller, results = _controller(events, trainer, tmp_path, max_consecutive_skips=3)
    with pytest.raises(Diverged, match=r"3 consecutive steps \(to step 7\) .*"
                                       r"max_consecutive_skips=3\); the newest checkpoint "
                                       r"\(ckpt-5\)"):
        controller.run()
    assert [e for e in events if e[0] == "save"] == [("save", 5)]
    assert trainer.closed == 1 and results == []


def test_max_minutes_makes_the_step_reached_the_last(tmp_path):
    events = []
    controller, _ = _controller(events, FakeTrainer(events), tmp_path, total=10,
                                max_minutes=1e-9)
    result = controller.run()
    assert result["step"] == 2 and _logged(events) == [2]
    assert ("samples", 2) in events and events[-2:] == [("save", 2), ("evaluate", 2, "ckpt-2")]


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
    result = driver.assemble(exp, str(tmp_path), trainer).run()
    # Up to 5 steps a call, cut at the log line at 4, the checkpoint at 6, the log at 8.
    assert trainer.calls == [4, 2, 2, 2] and trainer.closed
    logged = run_files.read(str(tmp_path), "log")
    assert [r["step"] for r in logged] == [4, 8, 10]  # every 4 steps, and the last
    assert [r["loss/D"] for r in logged] == [4.0, 7.0, 10.0]  # means over each line's steps
    images_per_second = 2 * exp.settings.train.real_images_per_step  # 0.5 s a step
    assert [r["perf/step_images_per_sec"] for r in logged] == [images_per_second] * 3
    written = tf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths
    assert [os.path.basename(p) for p in written] == ["ckpt-6", "ckpt-10"]  # and the last
    assert os.path.exists(os.path.join(str(tmp_path), "samples", "step_0000010.png"))
    assert [r["step"] for r in run_files.read(str(tmp_path), "end")] == [10]
    assert result["step"] == 10 and result["loss/D"] == 10.0


def test_sigterm_ends_the_call_then_checkpoints_and_raises_interrupted(tiny_gin, tmp_path):
    tiny_gin("train.total_steps = 20", "train.log_every = 100", "train.checkpoint_every = 100",
             "train.sample_every = 100")
    exp = experiment.build(_one_device())
    trainer = _Counting(exp, sigterm_at=10)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as stopped:
        driver.assemble(exp, str(tmp_path), trainer).run()
    assert (stopped.value.signum, stopped.value.step) == (signal.SIGTERM, 10)
    assert trainer.calls == [5, 5] and trainer.closed
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-10")
    assert run_files.read(str(tmp_path), "end") == []  # stopped, not finished
    # The stop record: the step saved and when its training ended, before the checkpoint.
    stops = run_files.read(str(tmp_path), "stop")
    assert len(stops) == 1, stops
    stop = stops[0]
    assert (stop["step"], stop["signal"]) == (10, signal.SIGTERM)
    checkpoint_written = os.path.getmtime(tf.train.latest_checkpoint(str(tmp_path)) + ".index")
    assert stop["trained_until"] <= checkpoint_written + 0.01 <= stop["time"] + 0.02
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_window_averages_per_step_values_and_times_after_tracing():
    window = controller_lib.Window()
    window.add(trainer_lib.Progress(4, 4, {"loss/D": 1.0, "perf/compute_seconds": 40.0}),
               timed=False)
    window.add(trainer_lib.Progress(6, 2, {"loss/D": 4.0, "perf/compute_seconds": 0.5,
                                           "perf/input_wait_seconds": 0.25}), timed=True)
    window.add(trainer_lib.Progress(8, 2, {"loss/D": float("nan"),
                                           "perf/compute_seconds": 0.5}), timed=True)
    metrics = window.metrics(images_per_step=16)
    assert metrics["loss/D"] == pytest.approx((4 * 1.0 + 2 * 4.0) / 6)  # the NaN steps left out
    # Rates of the calls after the one that traced (its 40 s left out): 4 steps in 1 s.
    assert metrics["perf/step_images_per_sec"] == pytest.approx(4 * 16 / 1.0)
    assert metrics["perf/input_wait_frac"] == pytest.approx(0.25)


def test_max_minutes_ends_the_run_as_at_its_last_step(tiny_gin, tmp_path):
    # A budget of 0.6 ms passes during the first call (one loop of 2 steps): that step is
    # then the last, with what a finished run leaves (final checkpoint, result, end record).
    tiny_gin("train.total_steps = 1000", "train.steps_per_loop = 2", "train.log_every = 500",
             "train.checkpoint_every = 500", "train.sample_every = 500",
             "train.max_minutes = 0.00001")
    exp = experiment.build(_one_device())
    result = driver.train(exp, str(tmp_path))
    assert result["step"] == 2 and int(exp.step.numpy()) == 2
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-2")
    assert os.path.exists(os.path.join(str(tmp_path), "samples", "step_0000002.png"))
    assert [r["step"] for r in run_files.read(str(tmp_path), "end")] == [2]
    assert [r["step"] for r in run_files.read(str(tmp_path), "log")] == [2]
