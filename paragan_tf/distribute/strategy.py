"""The strategy factory: which tf.distribute strategy a run uses, chosen in gin.

kinds:
  one_device             the first GPU if any, else the CPU.
  mirrored               all local GPUs; on a CPU-only machine the CPU, optionally
                         split into `num_logical_cpus` logical devices (so the
                         multi-replica code paths run, and are tested, without GPUs).
  multi_worker_mirrored  synchronous training across the processes of the cluster
                         (TF_CONFIG or Slurm, see cluster.py and README).
  parameter_server       asynchronous training (train/async_trainer.py): variables on
                         the parameter servers, closures run by the workers, this
                         process the coordinator. Worker and ps tasks run a server.
  tpu                    TPUStrategy through TPUClusterResolver(`tpu`). No TPU is
                         reachable from our CI machines, so this branch is exercised
                         only up to the resolver; everything the step does under it
                         (replica context, cross-replica reductions, per-replica
                         datasets) is the same code the mirrored tests run.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import gin
import tensorflow as tf

from paragan_tf.distribute import cluster
from paragan_tf.errors import ConfigError

KINDS = ("one_device", "mirrored", "multi_worker_mirrored", "parameter_server", "tpu")

# How long a multi_worker_mirrored task may go without a heartbeat before the whole run
# fails. TensorFlow's own 10 s turned a worker stalled by a busy shared host into a
# failed run here (a 25 s SIGSTOP of one worker reproduces it: "The following tasks are
# unhealthy (stopped sending heartbeats)"); a worker that dies is noticed at once anyway,
# through its closed connection, so a longer wait costs only hung workers' time.
HEARTBEAT_TIMEOUT_SECONDS = 60


def kind_of(strategy: tf.distribute.Strategy) -> str:
    """The `strategy.kind` that makes a strategy like `strategy` (its class name for one no
    kind makes, such as the default strategy)."""
    for kind, cls in (("tpu", tf.distribute.TPUStrategy),
                      ("parameter_server", tf.distribute.experimental.ParameterServerStrategy),
                      ("multi_worker_mirrored", tf.distribute.MultiWorkerMirroredStrategy),
                      ("mirrored", tf.distribute.MirroredStrategy),
                      ("one_device", tf.distribute.OneDeviceStrategy)):
        if isinstance(strategy, cls):
            return kind
    return type(strategy).__name__


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


def set_threads(intra_op_threads: int, inter_op_threads: int) -> None:
    """Caps this process's threads (before TensorFlow initialises); 0 leaves a default."""
    threading = tf.config.threading
    for name, value, current, setter in (
            ("intra_op_threads", intra_op_threads, threading.get_intra_op_parallelism_threads,
             threading.set_intra_op_parallelism_threads),
            ("inter_op_threads", inter_op_threads, threading.get_inter_op_parallelism_threads,
             threading.set_inter_op_parallelism_threads)):
        if not value or current() == value:
            continue
        try:
            setter(value)
        except RuntimeError:
            raise ConfigError(f"strategy.{name}={value} cannot be applied: TensorFlow is "
                              f"already initialised in this process") from None


def _coordinate(resolver, heartbeat_timeout_seconds: int) -> None:
    """Configures the coordination service as MultiWorkerMirroredStrategy would, with our
    heartbeat timeout: the strategy configures it only when nothing has yet. TensorFlow
    has no public call for this, hence the internal modules."""
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.distribute import multi_worker_util
    from tensorflow.python.eager import context

    spec = resolver.cluster_spec()
    if context.context().coordination_service is not None or not spec.as_dict():
        return
    if resolver.task_type not in ("chief", "worker"):
        return
    context.context().configure_coordination_service(
        service_type="standalone",
        service_leader=multi_worker_util.coordination_leader(spec),
        coordinated_jobs=[coordination_config_pb2.CoordinatedJob(name=job,
                                                                 num_tasks=spec.num_tasks(job))
                          for job in ("chief", "worker") if job in spec.jobs],
        heartbeat_timeout_in_ms=heartbeat_timeout_seconds * 1000)


@gin.configurable("strategy")
@dataclasses.dataclass(frozen=True, kw_only=True)
class StrategyConfig:
    """Which strategy a run uses, and how this process uses its cores (`strategy.*`).

    Attributes:
      kind: one of KINDS.
      num_logical_cpus: for `mirrored` on a machine without GPUs, how many
        logical CPU devices to make (0: one replica on the CPU).
      tpu: TPU name or grpc address for `tpu` ("" or "local" on a TPU VM).
      intra_op_threads: threads per op in this process (0: TensorFlow's
        default, all cores). Set 1 when several processes share a machine.
      inter_op_threads: ops run at once in this process (0: TensorFlow's default,
        all cores); with intra_op_threads, what caps a process's cores. Keep it >= 2
        under multi_worker_mirrored: its input is fetched by an inter-op thread, which
        with only one waits for each step to end.
      min_shard_bytes: `parameter_server` only: variables larger than this are
        split over the parameter servers (at most one shard per server).
      heartbeat_timeout_seconds: `multi_worker_mirrored` only: how long a task may be
        silent before the run fails (None: HEARTBEAT_TIMEOUT_SECONDS).
    """

    kind: str = "one_device"
    num_logical_cpus: int = 0
    tpu: Optional[str] = None
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    min_shard_bytes: int = 1 << 20
    heartbeat_timeout_seconds: Optional[int] = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ConfigError(f"strategy.kind={self.kind!r} is unknown; choose one of "
                              f"{list(KINDS)}")
        if self.heartbeat_timeout_seconds is not None:
            if self.kind != "multi_worker_mirrored":
                raise ConfigError(f"strategy.heartbeat_timeout_seconds applies to "
                                  f"'multi_worker_mirrored' only, not to strategy.kind="
                                  f"{self.kind!r}")
            if self.heartbeat_timeout_seconds <= 0:
                raise ConfigError(f"strategy.heartbeat_timeout_seconds="
                                  f"{self.heartbeat_timeout_seconds} must be positive")

    @property
    def multi_process(self) -> bool:
        return self.kind in ("multi_worker_mirrored", "parameter_server")


def local_copies(variable) -> Sequence[tf.Variable]:
    """A variable's copies in this process: one per local replica for a distributed
    variable (which may hold a different value in each: sharded Adam's moments,
    distribute/sharded_adam.py), the variable itself otherwise."""
    if isinstance(variable, tf.distribute.DistributedValues):
        return variable.values
    return (variable,)


def make_strategy(config: StrategyConfig,
                  cluster_config: Optional[cluster.ClusterConfig] = None
                  ) -> tf.distribute.Strategy:
    """Builds the strategy `config` names (the cluster from `cluster_config`, or TF_CONFIG)."""
    kind, tpu, num_logical_cpus = config.kind, config.tpu, config.num_logical_cpus
    cluster_config = cluster_config or cluster.ClusterConfig()
    set_threads(config.intra_op_threads, config.inter_op_threads)
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
        resolver = cluster.resolver(cluster_config)
        _coordinate(resolver, config.heartbeat_timeout_seconds or HEARTBEAT_TIMEOUT_SECONDS)
        return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    if kind == "parameter_server":
        resolver = cluster.resolver(cluster_config)
        num_ps = len(resolver.cluster_spec().as_dict().get("ps", []))
        if not num_ps:
            raise ConfigError("strategy.kind='parameter_server' needs at least one 'ps' task in "
                              "the cluster")
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=config.min_shard_bytes, max_shards=num_ps)
        return tf.distribute.experimental.ParameterServerStrategy(
            resolver, variable_partitioner=partitioner)
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"strategy.kind='tpu' with strategy.tpu={tpu!r}: no TPU reachable "
                          f"({first[:200]})") from None
    return tf.distribute.TPUStrategy(resolver)
