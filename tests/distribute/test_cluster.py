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


@pytest.mark.parametrize("graph_optimizer", [True, False])
def test_a_parameter_server_task_serves_with_the_layouts_graph_optimizer(monkeypatch,
                                                                         graph_optimizer):
    """A worker of a parameter-server run optimises the remote functions it runs: its
    server's ConfigProto carries layout.graph_optimizer (distribute/server.py)."""
    from paragan_tf.distribute import server
    from paragan_tf.distribute import strategy as strategy_lib
    started = []

    class Server:  # records the config instead of serving forever
        def __init__(self, spec, job_name, task_index, protocol, config, start):
            started.append((job_name, task_index, config))
            self.target = "grpc://localhost:2"

        def join(self):
            pass

    monkeypatch.setattr(server.tf.distribute, "Server", Server)
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"], "ps": ["localhost:3"]},
        "task": {"type": "worker", "index": 0}}))
    assert server.serve_if_server_task(strategy_lib.StrategyConfig(kind="parameter_server"),
                                       cluster.ClusterConfig(), graph_optimizer)
    [(job, index, config)] = started
    assert (job, index) == ("worker", 0)
    assert config.graph_options.rewrite_options.disable_meta_optimizer is (not graph_optimizer)
