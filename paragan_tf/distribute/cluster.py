"""Who is in the cluster and which task this process is: TF_CONFIG or Slurm.

TF_CONFIG is the standard path (our launcher, Kubernetes, any scheduler that
can set an environment variable per process). Slurm is resolved from the
SLURM_* variables of an `srun` step by TensorFlow's SlurmClusterResolver.
Both fail at start-up with one line naming what is missing or malformed.
"""

from __future__ import annotations

import dataclasses
import json
import os

import gin
import tensorflow as tf

from paragan_tf.errors import ConfigError

SOURCES = ("tf_config", "slurm")


def parse_tf_config() -> dict:
    """TF_CONFIG as a dict, validated enough to name what is wrong."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        raise ConfigError("a multi-process strategy needs the TF_CONFIG environment variable "
                          "(cluster and task); see README 'Several machines'")
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


def _slurm_resolver(num_ps: int, port_base: int):
    # Checked here rather than inside TensorFlow so the message names every
    # missing variable at once and says what to do.
    needed = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST",
              "SLURM_STEP_TASKS_PER_NODE")
    missing = [name for name in needed if name not in os.environ]
    if missing:
        raise ConfigError(f"cluster.source='slurm' but {', '.join(missing)} "
                          f"{'is' if len(missing) == 1 else 'are'} not set; launch each task "
                          f"with srun (see README 'Slurm')")
    num_tasks = int(os.environ["SLURM_STEP_NUM_TASKS"])
    if num_ps:
        workers = num_tasks - 1 - num_ps
        if workers < 1:
            raise ConfigError(f"cluster.num_ps={num_ps} leaves no workers among the "
                              f"{num_tasks} Slurm tasks (one is the chief)")
        jobs = {"chief": 1, "worker": workers, "ps": num_ps}
    else:
        jobs = {"worker": num_tasks}
    gpus = int(os.environ.get("SLURM_GPUS_ON_NODE", "0") or 0)
    if gpus:
        devices = dict(gpus_per_node=gpus, auto_set_gpu=True)
    else:
        # CPU-only nodes: the defaults call nvidia-smi and fail, and the resolver
        # places at most gpus_per_node / gpus_per_task tasks on a node, so claim
        # one pretend GPU per task and never set CUDA_VISIBLE_DEVICES.
        devices = dict(gpus_per_node=num_tasks, gpus_per_task=1, auto_set_gpu=False)
    try:
        slurm = tf.distribute.cluster_resolver.SlurmClusterResolver(
            jobs=jobs, port_base=port_base, **devices)
        slurm.cluster_spec()  # resolves the hosts and sets task_type/task_id
        return slurm
    except (RuntimeError, ValueError) as e:
        raise ConfigError(f"Slurm cluster resolution failed: {e}") from None


@gin.configurable("cluster")
@dataclasses.dataclass(frozen=True, kw_only=True)
class ClusterConfig:
    """Where a multi-process run learns who is in the cluster (`cluster.*` in gin).

    Attributes:
      source: "tf_config" (the TF_CONFIG variable) or "slurm" (SLURM_* of an srun step).
      num_ps: with Slurm, how many tasks are parameter servers (task 0 is then
        the chief/coordinator, the rest workers); 0 for synchronous training.
      port_base: with Slurm, the first port used on each node.
    """

    source: str = "tf_config"
    num_ps: int = 0
    port_base: int = 8888

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ConfigError(f"cluster.source={self.source!r} is unknown; choose one of "
                              f"{list(SOURCES)}")


def resolver(config: ClusterConfig):
    """The cluster resolver of a multi-process run."""
    if config.source == "slurm":
        return _slurm_resolver(config.num_ps, config.port_base)
    parse_tf_config()
    return tf.distribute.cluster_resolver.TFConfigClusterResolver()


def task_of(cluster_resolver) -> tuple:
    """(task type, task index) of this process."""
    return cluster_resolver.task_type, int(cluster_resolver.task_id or 0)


def process_id() -> tf.Tensor:
    """The pid (a string) of the process that runs this op.

    Inside a parameter-server closure that is the worker which ran it, so the
    coordinator can tell which worker process did which work (a restarted
    worker has a new pid). Linux only: it reads /proc/self/stat.
    """
    return tf.strings.split(tf.io.read_file("/proc/self/stat"), " ")[0]


def writes_model_dir(kind: str, config: ClusterConfig) -> bool:
    """Whether this process writes the run's folder under strategy `kind`.

    Every single-process run does; in a cluster, the chief task, or worker 0 of a
    cluster without one (TensorFlow's rule for who checkpoints).
    """
    if kind not in ("multi_worker_mirrored", "parameter_server"):
        return True
    cluster_resolver = resolver(config)
    task_type, index = task_of(cluster_resolver)
    jobs = cluster_resolver.cluster_spec().as_dict()
    return task_type == "chief" or (task_type == "worker" and index == 0 and "chief" not in jobs)
