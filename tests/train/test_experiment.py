"""experiment.build's refusals of settings that cannot work together, before anything trains."""

from __future__ import annotations

import pytest

from paragan_tf.errors import ConfigError
from paragan_tf.train import experiment
from tests.helpers.training import mirrored_2


def test_global_batch_not_divisible_by_replicas_is_a_config_error(tiny_gin):
    tiny_gin("train.batch_size = 7")
    with pytest.raises(ConfigError, match=r"train.batch_size=7 .* 2 replicas"):
        experiment.build(mirrored_2())


