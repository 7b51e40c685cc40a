"""The strategy factory: which tf.distribute strategy a run uses, chosen in gin.

kinds:
  one_device             the first GPU if any, else the CPU.
  mirrored               all local GPUs; on a CPU-only machine the CPU, optionally
                         split into `num_logical_cpus` logical devices (so the
                         multi-replica code paths run, and are tested, without GPUs).
  multi_worker_mirrored  synchronous training across the processes named in
                         TF_CONFIG (see README: several machines).
  tpu                    TPUStrategy through TPUClusterResolver(`tpu`). No TPU is
                         reachable from our CI machines, so this branch is exercised
                         only up to the resolver; everything the step does under it
                         (replica context, cross-replica reductions, per-replica
                         datasets) is the same code the mirrored tests run.
"""

from __future__ import annotations

import json
import os
from typing import Optional

import gin
import tensorflow as tf

from paragan_tf.errors import ConfigError

KINDS = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")


def split_cpu(num_devices: int) -> None:
    """Splits the physical CPU into `num_devices` logical CPUs (before TF initialises)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu)
    if current is not None and len(current) == num_devices:
        return
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * num_devices)
    except RuntimeError:
        have = len(tf.config.list_logical_devices("CPU"))
        raise ConfigError(
            f"strategy.num_logical_cpus={num_devices} cannot be applied: TensorFlow already "
            f"initialised {have} CPU device(s) in this process; build the strategy before "
            f"running any TensorFlow op") from None


def parse_tf_config() -> dict:
    """TF_CONFIG as a dict, validated enough to name what is wrong."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        raise ConfigError("strategy.kind='multi_worker_mirrored' needs the TF_CONFIG environment "
                          "variable (cluster and task); see README 'Several machines'")
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(f"TF_CONFIG is not valid JSON ({e.msg} at character {e.pos})") from None
    if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict):
        raise ConfigError("TF_CONFIG needs a 'cluster' object mapping job names to address lists")
    task = config.get("task")
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise ConfigError("TF_CONFIG needs a 'task' object with 'type' and 'index'")
    jobs = config["cluster"].get(task["type"])
    if not isinstance(jobs, list) or not 0 <= int(task["index"]) < len(jobs):
        raise ConfigError(f"TF_CONFIG task {task['type']}:{task['index']} is not in the cluster "
                          f"{ {k: len(v) for k, v in config['cluster'].items()} }")
    return config


@gin.configurable("strategy")
def make_strategy(kind: str = "one_device", num_logical_cpus: int = 0,
                  tpu: Optional[str] = None) -> tf.distribute.Strategy:
    """Builds the strategy named by `strategy.kind`.

    Args:
      kind: one of KINDS.
      num_logical_cpus: for `mirrored` on a machine without GPUs, how many
        logical CPU devices to make (0: one replica on the CPU).
      tpu: TPU name or grpc address for `tpu` ("" or "local" on a TPU VM).
    """
    if kind not in KINDS:
        raise ConfigError(f"strategy.kind={kind!r} is unknown; choose one of {list(KINDS)}")
    gpus = tf.config.list_physical_devices("GPU")
    if kind == "one_device":
        return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
    if kind == "mirrored":
        if gpus:
            return tf.distribute.MirroredStrategy()
        if num_logical_cpus > 1:
            split_cpu(num_logical_cpus)
        devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        if num_logical_cpus > 1:
            devices = devices[:num_logical_cpus]
        else:
            devices = devices[:1]
        return tf.distribute.MirroredStrategy(
            devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
    if kind == "multi_worker_mirrored":
        parse_tf_config()
        return tf.distribute.MultiWorkerMirroredStrategy()
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"strategy.kind='tpu' with strategy.tpu={tpu!r}: no TPU reachable "
                          f"({first[:200]})") from None
    return tf.distribute.TPUStrategy(resolver)
