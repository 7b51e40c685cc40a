"""The cluster's description (distribute/cluster.py): TF_CONFIG read as given, and a Slurm
step's variables resolved into a cluster or named when missing."""

from __future__ import annotations

import json

import pytest

from paragan_tf.distribute import cluster
from paragan_tf.errors import ConfigError


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
