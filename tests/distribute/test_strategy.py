"""The strategy factory (distribute/strategy.py): one device and mirrored over logical CPUs,
and the settings and TF_CONFIG it refuses by name."""

from __future__ import annotations

import json

import pytest
import tensorflow as tf

from paragan_tf.distribute import strategy as strategy_lib
from paragan_tf.errors import ConfigError


def _make(**options) -> tf.distribute.Strategy:
    return strategy_lib.make_strategy(strategy_lib.StrategyConfig(**options))


def test_one_device_and_mirrored_over_logical_cpus():
    assert _make(kind="one_device").num_replicas_in_sync == 1
    mirrored = _make(kind="mirrored", num_logical_cpus=2)
    assert isinstance(mirrored, tf.distribute.MirroredStrategy)
    assert mirrored.num_replicas_in_sync == 2
    assert _make(kind="mirrored").num_replicas_in_sync == 1


def test_unknown_kind_and_late_cpu_split_are_config_errors():
    with pytest.raises(ConfigError, match="strategy.kind='horovod'"):
        _make(kind="horovod")
    with pytest.raises(ConfigError, match="strategy.num_logical_cpus=3"):
        _make(kind="mirrored", num_logical_cpus=3)  # TF already has 2
    with pytest.raises(ConfigError, match="heartbeat_timeout_seconds applies to "
                                          "'multi_worker_mirrored' only"):
        _make(kind="one_device", heartbeat_timeout_seconds=30)


@pytest.mark.parametrize("raw,message", [
    (None, "needs the TF_CONFIG environment variable"),
    ("{not json", "TF_CONFIG is not valid JSON"),
    (json.dumps({"task": {"type": "worker", "index": 0}}), "needs a 'cluster' object"),
    (json.dumps({"cluster": {"worker": ["a:1"]}}), "needs a 'task' object"),
    (json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}}),
     "task worker:1 is not in the cluster"),
])
def test_malformed_tf_config_is_named(monkeypatch, raw, message):
    if raw is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", raw)
    with pytest.raises(ConfigError, match=message):
        _make(kind="multi_worker_mirrored")


def test_parameter_server_needs_a_ps_task(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["localhost:1"],
                                                            "chief": ["localhost:2"]},
                                                "task": {"type": "chief", "index": 0}}))
    with pytest.raises(ConfigError, match="needs at least one 'ps' task"):
        _make(kind="parameter_server")
