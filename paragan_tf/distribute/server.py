"""The worker and parameter-server tasks of an asynchronous (parameter-server) cluster.

They run no Python training code: each starts a tf.distribute.Server and
serves until killed. The coordinator (the chief task) sends them work.
"""

from __future__ import annotations

from absl import logging
import tensorflow as tf

from paragan_tf.distribute import cluster
from paragan_tf.distribute import strategy as strategy_lib

SERVER_TASKS = ("worker", "ps")
MIN_INTER_OP_THREADS = 4


def serve_if_server_task(config: strategy_lib.StrategyConfig,
                         cluster_config: cluster.ClusterConfig,
                         graph_optimizer: bool = True) -> bool:
    """Serves forever when this process is a worker/ps task of a parameter-server run.
    `graph_optimizer`: layout.graph_optimizer, for the functions this server runs (the
    server that runs a remote function optimises it, not the coordinator).

    Returns False (at once) for every other process.
    """
    if config.kind != "parameter_server":
        return False
    resolver = cluster.resolver(cluster_config)
    task_type, index = cluster.task_of(resolver)
    if task_type not in SERVER_TASKS:
        return False
    # A server runs several remote functions at once (a closure blocks on reads from
    # the parameter servers, the coordinator fetches results, a per-worker dataset is
    # made by one function that runs another), and with one inter-op thread they
    # deadlock. TensorFlow's default is one per core this process may run on: one, on a
    # worker pinned to its core (launcher cores_per_task), which hung at the first closure.
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=config.intra_op_threads,
        inter_op_parallelism_threads=max(MIN_INTER_OP_THREADS, config.inter_op_threads))
    config.graph_options.rewrite_options.disable_meta_optimizer = not graph_optimizer
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=task_type, task_index=index,
                                  protocol=resolver.rpc_layer or "grpc", config=config,
                                  start=True)
    logging.info("%s:%d serving at %s for the coordinator", task_type, index, server.target)
    server.join()
    return True
