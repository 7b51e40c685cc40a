"""The strategy factory and TF_CONFIG validation."""

from __future__ import annotations

import json

import pytest
import tensorflow as tf

from paragan_tf.distribute import cluster
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


def test_valid_tf_config_parses(monkeypatch):
    config = {"cluster": {"worker": ["localhost:1", "localhost:2"]},
              "task": {"type": "worker", "index": 1}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    assert cluster.parse_tf_config() == config


@pytest.mark.parametrize("present,missing", [
    ({}, "SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE "
         "are not set"),
    ({"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_TASKS_PER_NODE": "2"},
     "SLURM_STEP_NODELIST is not set"),
])
def test_missing_slurm_variables_are_named(monkeypatch, present, missing):
    for name in ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST",
                 "SLURM_STEP_TASKS_PER_NODE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in present.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=missing):
        cluster.resolver(cluster.ClusterConfig(source="slurm"))


def test_slurm_step_resolves_without_gpus(monkeypatch):
    # What srun sets for task 1 of a 2-task step on one node.
    for name, value in {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2",
                        "SLURM_STEP_NODELIST": "localhost",
                        "SLURM_STEP_TASKS_PER_NODE": "2"}.items():
        monkeypatch.setenv(name, value)
    resolver = cluster.resolver(cluster.ClusterConfig(source="slurm", port_base=23456))
    assert cluster.task_of(resolver) == ("worker", 1)
    assert resolver.cluster_spec().as_dict() == {"worker": ["localhost:23456", "localhost:23457"]}


def test_parameter_server_needs_a_ps_task(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["localhost:1"],
                                                            "chief": ["localhost:2"]},
                                                "task": {"type": "chief", "index": 0}}))
    with pytest.raises(ConfigError, match="needs at least one 'ps' task"):
        _make(kind="parameter_server")


def test_slurm_parameter_server_cluster_puts_chief_then_ps_then_workers(monkeypatch):
    for name, value in {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "4",
                        "SLURM_STEP_NODELIST": "localhost",
                        "SLURM_STEP_TASKS_PER_NODE": "4"}.items():
        monkeypatch.setenv(name, value)
    resolver = cluster.resolver(cluster.ClusterConfig(source="slurm", num_ps=1, port_base=30000))
    assert cluster.task_of(resolver) == ("ps", 0)
    assert resolver.cluster_spec().as_dict() == {
        "chief": ["localhost:30000"], "ps": ["localhost:30001"],
        "worker": ["localhost:30002", "localhost:30003"]}
    with pytest.raises(ConfigError, match="cluster.num_ps=3 leaves no workers"):
        cluster.resolver(cluster.ClusterConfig(source="slurm", num_ps=3))
