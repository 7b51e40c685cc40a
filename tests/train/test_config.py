"""The trainers' options (train/config.py): checked when made, the images a step reads, the
global batch split over replicas, and the asynchronous trainer's rounds in flight."""

from __future__ import annotations

import pytest

from paragan_tf.errors import ConfigError
from paragan_tf.train import config

POSITIVE = ("total_steps", "batch_size", "d_steps", "steps_per_loop", "accumulation",
            "log_every", "checkpoint_every", "max_to_keep", "max_consecutive_skips")


def test_train_settings_are_refused_by_name_when_made():
    for name in POSITIVE:
        with pytest.raises(ConfigError, match=rf"^train.{name}=0 must be positive(\n|$)"):
            config.TrainConfig(**dict(dict(total_steps=10), **{name: 0}))
    with pytest.raises(ConfigError, match=r"^train.sample_every=-1 must be >= 0 \(0: no sample "
                                          r"grids\)(\n|$)"):
        config.TrainConfig(total_steps=10, sample_every=-1)
    with pytest.raises(ConfigError, match=r"train.ema_decay=1.0 must be in \[0, 1\)"):
        config.TrainConfig(total_steps=10, ema_decay=1.0)
    with pytest.raises(ConfigError, match="train.resume_input='rewind' must be 'replay' or "
                                          "'reshuffle'"):
        config.TrainConfig(total_steps=10, resume_input="rewind")
    for name in ("clip_norm", "ortho_reg", "profile_steps", "max_minutes"):
        with pytest.raises(ConfigError, match="must be >= 0"):
            config.TrainConfig(total_steps=10, **{name: -1})
    config.TrainConfig(total_steps=10, ema_decay=0.0, clip_norm=0.0, max_minutes=0.5,
                       sample_every=0)


def test_the_ema_is_set_by_a_decay_or_a_half_life_never_both():
    with pytest.raises(ConfigError, match=r"train.ema_half_life_images=10000.0 and "
                                          r"train.ema_decay=0.99 both set"):
        config.TrainConfig(total_steps=10, ema_decay=0.99, ema_half_life_images=10000.0)
    with pytest.raises(ConfigError, match=r"train.ema_rampup=0.05 needs "
                                          r"train.ema_half_life_images"):
        config.TrainConfig(total_steps=10, ema_rampup=0.05)
    with pytest.raises(ConfigError, match=r"train.ema_half_life_images=-1 must be >= 0"):
        config.TrainConfig(total_steps=10, ema_half_life_images=-1)
    cfg = config.TrainConfig(total_steps=10, batch_size=32, accumulation=2,
                             ema_half_life_images=10000.0, ema_rampup=0.05)
    assert cfg.g_images_per_update == 64


def test_a_step_reads_batch_x_d_steps_x_accumulation_and_splits_over_replicas():
    cfg = config.TrainConfig(total_steps=10, batch_size=12, d_steps=2, accumulation=3)
    assert cfg.real_images_per_step == 72
    config.check_batch(cfg, 4)
    with pytest.raises(ConfigError, match="train.batch_size=12 is not divisible by the 5 "
                                          "replicas of this strategy; use a multiple of 5"):
        config.check_batch(cfg, 5)
    assert config.defaults(config.AsyncConfig) == dict(
        max_staleness=2, stall_timeout_secs=300.0, mode="closures", buffer_depth=4)


def test_async_settings_bound_the_rounds_in_flight_by_mode():
    assert config.AsyncConfig(max_staleness=3, buffer_depth=5).rounds_in_flight == 3
    assert config.AsyncConfig(max_staleness=3, buffer_depth=5,
                              mode="sample_buffer").rounds_in_flight == 5
    for options, message in ((dict(max_staleness=0), "async_train.max_staleness=0 must be >= 1"),
                             (dict(mode="buffer"), r"async_train.mode='buffer' is unknown; "
                                                   r"choose one of \['closures', "
                                                   r"'sample_buffer'\]"),
                             (dict(buffer_depth=0), "async_train.buffer_depth=0 must be >= 1"),
                             (dict(stall_timeout_secs=0.0), "async_train.stall_timeout_secs=0.0 "
                                                            "must be positive")):
        with pytest.raises(ConfigError, match=message):
            config.AsyncConfig(**options)
