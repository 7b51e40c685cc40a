"""The asynchronous (parameter-server) trainer's rules, on real server processes on 127.0.0.1."""

from __future__ import annotations

import dataclasses
import os
import re

import gin
import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.errors import ConfigError
from paragan_tf.train import async_trainer
from paragan_tf.train import experiment

pytestmark = pytest.mark.slow


def test_sync_only_settings_are_refused_or_warned_about_by_name(tiny_gin, caplog):
    def check(*bindings):
        gin.clear_config()
        tiny_gin(*bindings)
        exp = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
        async_trainer.check_settings(exp)

    for binding, name in (("train.simultaneous = True", "train.simultaneous=True"),
                          ("train.profile_steps = 2", "train.profile_steps=2"),
                          ("eval.every_steps = 2", "eval.every_steps=2"),
                          ("input_pipeline.service_workers = 1",
                           "input_pipeline.service_workers=1"),
                          ("penalties.lecam_weight = 0.3", "penalties.lecam_weight=0.3"),
                          ("augment.ada_target = 0.6", "augment.ada_target=0.6"),
                          ("loss.fn = @relativistic", "loss.fn='@relativistic'")):
        with pytest.raises(ConfigError, match=re.escape(name) + " is not available under "
                           "strategy.kind='parameter_server'"):
            check(binding)
    with pytest.raises(ConfigError, match=r"train.accumulation=2 is not available with "
                       r"async_train.mode='sample_buffer'"):
        check("train.accumulation = 2", "async_train.mode = 'sample_buffer'")
    gin.clear_config()
    tiny_gin()
    exp = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
    gin.clear_config()  # read, not built: train.deterministic would switch on op determinism
    tiny_gin("train.resume_input = 'reshuffle'", "train.deterministic = True",
             "async_train.mode = 'sample_buffer'", "async_train.max_staleness = 3")
    settings = experiment.Settings.read()
    exp = dataclasses.replace(exp, settings=settings)
    with caplog.at_level("WARNING", logger="absl"):
        async_trainer.check_settings(exp)
    warned = " ".join(r.getMessage() for r in caplog.records)
    for name in ("train.steps_per_loop=2", "train.resume_input='reshuffle'",
                 "train.deterministic=True", "async_train.max_staleness=3"):
        assert f"{name} does not apply under strategy.kind='parameter_server'" in warned, name
    caplog.clear()
    with caplog.at_level("WARNING", logger="absl"):  # the negative control: left unbound
        check()
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "train.steps_per_loop=2 does not apply" in warned  # gin/tiny.gin binds it
    assert "resume_input" not in warned and "deterministic" not in warned
    assert "max_staleness" not in warned and "buffer_depth" not in warned


def _ps_launch(model_dir, *bindings):
    from tests.helpers.clusters import Launch
    return Launch(model_dir, "--num_ps=1", "--gin_bindings=strategy.kind='parameter_server'",
                  *[f"--gin_bindings={b}" for b in bindings])


def test_async_nan_guard_counts_skipped_rounds_and_stops_a_diverged_run(tmp_path):
    # As the synchronous test, D's learning rate makes every later D update non-finite
    # (spectral norm's power iteration overflows on weights near 1e30). The closures also
    # run DiffAugment and the lazy R1 and bCR penalties (they work in closures; LeCam and
    # the relativistic loss are refused, above). 1e30, not the synchronous test's 1e38:
    # closures that read D before another closure's update landed apply finite updates of
    # about the learning rate each, and a few of 1e38 add up past float32's 3.4e38 (a
    # loaded run once stopped on a non-finite weight at its second checkpoint instead).
    model_dir = tmp_path / "diverge"
    run = _ps_launch(model_dir, "train.total_steps=200", "train.log_every=1",
                     "train.checkpoint_every=1", "train.max_consecutive_skips=3",
                     "train.max_to_keep=300", "D/optimizer.learning_rate=1e30",
                     "augment.policy='color,translation,cutout'", "penalties.r1_gamma=1.0",
                     "penalties.lazy_interval=2", "penalties.bcr_real=1.0")
    assert run.finish() == 1, run.output()[-3000:]
    out = run.output()
    assert re.search(r"train.py: error: 3 consecutive rounds \(to round \d+\) had an update "
                     r"with a non-finite loss or gradient, skipped \(train."
                     r"max_consecutive_skips=3\); the newest checkpoint \(\S+ckpt-\d+\)", out)
    written = tf_checkpoints(model_dir)
    assert written
    for path in written:  # the skipped updates left no non-finite weights or SN vectors
        reader = tf.train.load_checkpoint(path)
        for name, dtype in reader.get_variable_to_dtype_map().items():
            if dtype.is_floating:
                assert np.all(np.isfinite(reader.get_tensor(name))), (path, name)
    events = tf.io.gfile.glob(os.path.join(str(model_dir), "events.out.tfevents.*"))
    skipped = [tf.make_ndarray(v.tensor).item() for e in events
               for ev in tf.compat.v1.train.summary_iterator(e) for v in ev.summary.value
               if v.tag == "health/skipped_steps"]
    assert skipped and max(skipped) >= 1, skipped


def tf_checkpoints(model_dir):
    state = tf.train.get_checkpoint_state(str(model_dir))
    return list(state.all_model_checkpoint_paths) if state else []
