"""The dataset options (data/config.py): each checked when made, refused by name."""

from __future__ import annotations

import pytest

from paragan_tf.data import config
from paragan_tf.errors import ConfigError


@pytest.mark.parametrize("options,message", [
    (dict(fit="stretch"), "dataset.fit='stretch' must be auto, pad or resize"),
    (dict(resolution=0), "dataset.resolution=0 must be positive"),
    (dict(channels=2), r"dataset.channels=2 must be 1, 3 or 0 \(as the data is\)"),
    (dict(scan_images="sometimes"), "dataset.scan_images='sometimes' must be auto, full or lazy"),
    (dict(per_class_limit=-1), r"dataset.per_class_limit=-1 must be >= 0 \(0: every example\)"),
], ids=["fit", "resolution", "channels", "scan_images", "per_class_limit"])
def test_a_bad_dataset_option_is_refused_by_name(options, message):
    with pytest.raises(ConfigError, match=message):
        config.DatasetConfig(**options)


def test_the_defaults_and_every_allowed_value_pass():
    assert config.DatasetConfig().name == "mnist5k"
    for fit in ("auto", "pad", "resize"):
        for channels in (0, 1, 3):
            for scan in ("auto", "full", "lazy"):
                config.DatasetConfig(fit=fit, channels=channels, scan_images=scan,
                                     resolution=1, per_class_limit=0)
