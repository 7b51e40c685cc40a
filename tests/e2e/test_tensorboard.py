"""TensorBoard, for real: serve a tiny run's logdir on 127.0.0.1 and read its HTTP API."""

from __future__ import annotations

import logging

import pytest

from benchmarks import profile
from paragan_tf.train import experiment
from paragan_tf.train import driver
from tests.helpers.tensorboard_server import tensorboard


@pytest.mark.slow
def test_tensorboard_serves_the_runs_scalars_samples_and_config(tiny_gin, tmp_path):
    tiny_gin("train.total_steps = 4", "train.profile_steps = 2")
    # absl's records, read on the absl logger itself: earlier tests in this process may
    # have changed its level or propagation, which left pytest's caplog empty here once.
    lines, absl_logger = [], logging.getLogger("absl")
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: lines.append(record.getMessage())
    level, disabled = absl_logger.level, absl_logger.disabled
    absl_logger.addHandler(handler)
    absl_logger.setLevel(logging.INFO)
    absl_logger.disabled = False
    try:
        driver.train(experiment.build(), str(tmp_path))
    finally:
        absl_logger.removeHandler(handler)
        absl_logger.setLevel(level)
        absl_logger.disabled = disabled
    # train.profile_steps: the steps after the first log line (2) traced into the logdir,
    # where TensorBoard's Profile tab looks; the benchmarks read it the same way.
    assert f"profile of steps 2-4: {tmp_path} (TensorBoard's Profile tab)" in lines, lines
    assert any("Conv2D" in op for op in profile.op_seconds(str(tmp_path / "plugins")))
    with tensorboard(str(tmp_path)) as get:
        tags = get("/data/plugin/scalars/tags")
        scalars = set(tags["."])
        for tag in ("loss/D", "loss/G", "grad_norm/D", "grad_norm/G", "perf/images_per_sec",
                    "perf/input_wait_frac", "health/skipped_steps", "lr/G", "lr/D"):
            assert tag in scalars, (tag, sorted(scalars))
        series = get("/data/plugin/scalars/scalars?run=.&tag=loss/D")
        assert [step for _, step, _ in series] == [2, 4]
        assert "samples/ema" in get("/data/plugin/images/tags")["."]
        assert "config/operative_gin" in get("/data/plugin/text/tags")["."]
