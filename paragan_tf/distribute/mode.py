"""The parallel mode of a run: one object, made once by train/experiment.py's build from the
`model_parallel.*` settings and the strategy, and handed to everything that depends on it.

`Mode` owns what differs between the modes: what each strategy refuses (written once, here),
the devices of a replica, where the networks' variables and blocks live, the device scopes
of the step's ops (train/step.py asks it), and how an update is applied (the NaN guard asks
it: all-reduced gradients through the keras optimizer on every replica, or Adam's moments
sharded over the replicas, distribute/sharded_adam.py).

The modes:
- replicated (the default): data parallelism only, each replica on one device.
- sharded optimizer state (`model_parallel.shard_optimizer=True`): replicated, with Adam's
  moments 1/N per replica (ZeRO stage 1).
- G/D split and pipeline stages (below), alone or together; not with sharding.

With `model_parallel.placement='split'` each replica spans two devices: G, the EMA
generator and G's optimizer state live on the first, D and its optimizer state on the
second, and every op of the step runs beside the weights it reads (train/step.py):

- D's update: G's forward for the fakes on G's device, D's forward, loss and backward
  on D's device.
- G's update: G's forward under its own tape on G's device; D's forward and loss under
  a second tape on D's device, differentiated to the images only; then G's backward
  from those image gradients (`output_gradients`) on G's device. One tape over both
  networks would leave D's backward ops without a device: they would land on the
  first device and hold D's activations there.

With `model_parallel.stages=S` each network's residual blocks are split further into S
contiguous pipeline stages on devices of their own (distribute/staging.py: each block's forward
and backward on its stage's device), balanced by each block's estimated bytes (its
weights, their Adam moments and EMA copy, its activations at the per-replica batch): G's
stages on devices 0..S-1 and, with the split, D's on S..2S-1; without it D's stage i
shares device i with G's.

So each device holds one network, its optimizer state and its activations: the gain is
memory. Accumulated micro-batches (`train.accumulation`) are independent, so G's next
micro-batch can run while D works on the previous one; on separate accelerators that
overlaps the two networks' work. On logical CPU devices (the only kind this machine
has) both devices share the same cores: the split runs and is tested here, but it is
never faster here, and it has not been run on GPUs.

The devices of a replica:
- `strategy.kind='one_device'` (one process, one replica): the process's first two GPUs, or,
  without GPUs, two logical CPU devices made by splitting the CPU before TensorFlow
  initialises.
- `strategy.kind='multi_worker_mirrored'` (the hybrid): every worker process is one replica
  on two logical CPU devices, G on the first (the strategy's own replica device) and D on
  the second; each network's gradients are all-reduced across the workers as always (the
  NaN guard does it, train/nan_guard.py). On GPU workers MultiWorkerMirroredStrategy makes
  every visible GPU a replica of its own, so the hybrid is refused there by name; it has
  not been run on GPUs.
Other strategies are refused by name: a MirroredStrategy replica is one device by
TensorFlow's design, parameter-server closures run on one worker device, TPU replicas are
cores.

The variables are placed as distribute/staging.py's `variables_on` places them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import List, Optional, Tuple

import gin
import tensorflow as tf

from paragan_tf.distribute import sharded_adam
from paragan_tf.distribute import staging
from paragan_tf.distribute import strategy as strategy_lib
from paragan_tf.errors import ConfigError

PLACEMENTS = ("replica", "split")
# What lives with G and what with D when a replica spans devices (Mode.side_of).
G_SIDE = ("generator", "generator_ema", "g_optimizer")
D_SIDE = ("discriminator", "d_optimizer")


@gin.configurable("model_parallel")
@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelParallelConfig:
    """Where the networks live within a replica (`model_parallel.*` in gin).

    Attributes:
      placement: 'replica': G and D on the replica's devices together (data parallelism
        only, unless `stages` > 1); 'split': G, EMA G and G's optimizer on the replica's
        first device(s), D and its optimizer on the next (see the module doc).
      stages: pipeline stages per network: its residual blocks over this many devices.
      shard_optimizer: keep Adam's moments 1/N per replica over the N replicas (ZeRO
        stage 1, distribute/sharded_adam.py); under one_device, mirrored and
        multi_worker_mirrored, with the replica placement and one stage.
    """

    placement: str = "replica"
    stages: int = 1
    shard_optimizer: bool = False

    def __post_init__(self):
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"model_parallel.placement={self.placement!r} is unknown; "
                              f"choose one of {list(PLACEMENTS)}")
        if self.stages < 1:
            raise ConfigError(f"model_parallel.stages={self.stages} must be >= 1")
        if self.shard_optimizer and self.spread:
            raise ConfigError(f"model_parallel.shard_optimizer=True is not available with "
                              f"model_parallel.placement={self.placement!r} and "
                              f"model_parallel.stages={self.stages} (not built yet); shard "
                              f"with one device per replica")

    @property
    def spread(self) -> bool:
        """Whether a replica spans more than one device."""
        return self.devices_per_replica > 1

    @property
    def devices_per_replica(self) -> int:
        return self.stages * (2 if self.placement == "split" else 1)

    def xla_blocker(self) -> Optional[str]:
        """Why XLA cannot compile a step under these settings, or None."""
        if not self.spread:
            return None
        return ("model_parallel.placement='split' or model_parallel.stages > 1 spreads the "
                "step over several devices, and XLA compiles a step for one")


@dataclasses.dataclass(frozen=True)
class Mode:
    """This process's parallel mode: its settings and the devices of G's and D's stages in
    this replica (none: the replica's own device)."""

    config: ModelParallelConfig = ModelParallelConfig()
    g_devices: Tuple[str, ...] = ()
    d_devices: Tuple[str, ...] = ()

    @property
    def spread(self) -> bool:
        """Whether the replica spans several devices (G and D apart, or in stages)."""
        return bool(self.g_devices)

    @property
    def shards_optimizer(self) -> bool:
        """Whether each replica keeps 1/N of Adam's moments."""
        return self.config.shard_optimizer

    @property
    def model_parallel(self) -> bool:
        """Whether anything beyond data parallelism places the run's state."""
        return self.spread or self.shards_optimizer

    @property
    def g_device(self) -> Optional[str]:
        """G's first device (its stem, and the loss of G's update), or None."""
        return self.g_devices[0] if self.g_devices else None

    @property
    def d_device(self) -> Optional[str]:
        """D's first device, or None."""
        return self.d_devices[0] if self.d_devices else None

    def on_g(self):
        """Scope for G's ops outside its blocks (a no-op without a placement)."""
        return tf.device(self.g_device) if self.spread else contextlib.nullcontext()

    def on_d(self):
        """Scope for D's ops outside its blocks (a no-op without a placement)."""
        return tf.device(self.d_device) if self.spread else contextlib.nullcontext()

    def side_of(self, owner: str) -> str:
        """'G' or 'D': the side whose device(s) keep the variables of `owner` ('generator',
        'generator_ema', 'discriminator', or an optimizer: 'g_optimizer', 'd_optimizer')
        when a replica spans devices (the memory plan's sides, scale/memory.py, too)."""
        if owner in G_SIDE:
            return "G"
        if owner in D_SIDE:
            return "D"
        raise ValueError(f"{owner!r} is none of {G_SIDE + D_SIDE}")

    def variables_of(self, owner: str):
        """Scope (inside strategy.scope()) creating the variables of `owner` where this
        mode keeps them: on its side's first device."""
        return staging.variables_on(self.g_device if self.side_of(owner) == "G"
                                    else self.d_device)

    def place_blocks(self, generator, discriminator, generator_ema, batch: int) -> None:
        """Assigns each network's blocks to its stages, balanced by their estimated bytes
        at `batch` examples (before the models' first call; a no-op with one stage)."""
        if len(self.g_devices) < 2:
            return
        stages = len(self.g_devices)
        devices_of = {"G": self.g_devices, "D": self.d_devices}
        for model, devices in ((generator, devices_of[self.side_of("generator")]),
                               (generator_ema, devices_of[self.side_of("generator_ema")]),
                               (discriminator, devices_of[self.side_of("discriminator")])):
            if len(model.blocks) < stages:
                raise ConfigError(f"model_parallel.stages={stages}, but {model.name} has "
                                  f"{len(model.blocks)} residual blocks at this resolution")
            stage_of = staging.balance(model.block_costs(batch), stages)
            model.place_blocks([devices[s] for s in stage_of])

    def xla_blocker(self) -> Optional[str]:
        """Why XLA cannot compile the step under this mode, or None."""
        return self.config.xla_blocker()

    def sharded_adam(self, where: str, kind: str, compute_dtype: str, **adam):
        """The optimizer of one network (gin scope `where`, its `optimizer.name` `kind`)
        when this mode shards Adam's moments, else None (the caller makes a keras one)."""
        if not self.shards_optimizer:
            return None
        if kind != "adam":
            raise ConfigError(f"model_parallel.shard_optimizer shards Adam's moments; "
                              f"{where}.name={kind!r} is not Adam")
        if compute_dtype == "float16":
            raise ConfigError("model_parallel.shard_optimizer is not available with "
                              "layout.precision='mixed_float16' (its loss scaling wraps a "
                              "keras optimizer); use 'mixed_bfloat16' or 'float32'")
        return sharded_adam.ShardedAdam(**adam)

    def apply(self, healthy: tf.Tensor, precision, grads: List[tf.Tensor], variables) -> None:
        """Applies all-reduced `grads` to `variables` when `healthy` (the same on every
        replica), in replica context; `precision` (train/precision.py) holds the network's
        optimizer and, under float16, updates its loss scale from `grads`, applied or not."""
        if self.shards_optimizer:
            # Computed on every replica's slice and kept only when healthy: no branch.
            precision.optimizer.apply(healthy, grads, variables)
            return

        def apply(grads):
            precision.inner.apply_gradients(zip(grads, variables),
                                            skip_gradients_aggregation=True)

        # The condition lives in cross-replica context, where a branch may hold the
        # optimizer's synchronisation point (as tf-keras' LossScaleOptimizer does it):
        # under MirroredStrategy a tf.cond around apply_gradients in replica context fails.
        def cross_replica(strategy, healthy, grads):
            # From the all-reduced unscaled gradients, in the cross-replica context the
            # rule needs. Not the wrapper's apply_gradients: that one decides the skip on
            # its own (the guard also sees the loss and the step's other updates) and counts
            # a skipped update in `iterations`.
            precision.update(grads)
            healthy = strategy.experimental_local_results(healthy)[0]

            def update():
                strategy.extended.call_for_each_replica(apply, args=(grads,))
                return tf.constant(True)
            return tf.cond(healthy, update, lambda: tf.constant(False))
        tf.distribute.get_replica_context().merge_call(cross_replica, args=(healthy, grads))

    def describe(self) -> str:
        if not self.spread:
            return "G and D on the replica's device"
        if len(self.g_devices) == 1:
            return (f"G, EMA G and G's optimizer on {self.g_device}; D and its optimizer on "
                    f"{self.d_device}")
        return (f"G's blocks in {len(self.g_devices)} stages on {', '.join(self.g_devices)}; "
                f"D's on {', '.join(self.d_devices)}")


KINDS = ("one_device", "multi_worker_mirrored")


SHARD_KINDS = ("one_device", "mirrored", "multi_worker_mirrored")


def refuse(config: ModelParallelConfig, strategy_kind: str) -> None:
    """Refuses, by name, the model parallelism that `strategy_kind` cannot run (the one place
    these refusals are written)."""
    if config.shard_optimizer and strategy_kind not in SHARD_KINDS:
        raise ConfigError(f"model_parallel.shard_optimizer=True is available under "
                          f"strategy.kind in {list(SHARD_KINDS)} only, not {strategy_kind!r}")
    if config.spread and strategy_kind not in KINDS:
        raise ConfigError(f"{_what(config)} is available under strategy.kind in {list(KINDS)} "
                          f"only, not {strategy_kind!r}")


def prepare_devices(config: ModelParallelConfig, strategy_kind: str) -> None:
    """Refuses what the placement cannot run under; on a CPU-only host splits the CPU into
    the replica's devices. Call before the strategy is made (before TensorFlow initialises)."""
    refuse(config, strategy_kind)
    if not config.spread:
        return
    what = _what(config)
    gpus = len(tf.config.list_physical_devices("GPU"))
    n = config.devices_per_replica
    if strategy_kind == "multi_worker_mirrored" and gpus:
        raise ConfigError(f"{what} under multi_worker_mirrored is not available on GPU "
                          f"workers: MultiWorkerMirroredStrategy makes each of the {gpus} "
                          f"GPUs a replica of its own")
    if strategy_kind == "one_device" and gpus >= n:
        return
    if gpus:
        raise ConfigError(f"{what} needs {n} GPUs in this process; it sees {gpus}")
    strategy_lib.split_cpu(n)


def _what(config: ModelParallelConfig) -> str:
    """The settings that spread a replica, as a user wrote them."""
    parts = ([f"model_parallel.placement={config.placement!r}"]
             if config.placement != "replica" else [])
    if config.stages > 1:
        parts.append(f"model_parallel.stages={config.stages}")
    return " with ".join(parts)


def make(config: ModelParallelConfig, strategy: tf.distribute.Strategy) -> Mode:
    """The mode of this process's replica (after prepare_devices and the strategy)."""
    refuse(config, strategy_lib.kind_of(strategy))  # a strategy made elsewhere, too
    if not config.spread:
        return Mode(config)
    n, what = config.devices_per_replica, _what(config)
    if isinstance(strategy, tf.distribute.OneDeviceStrategy):
        kind = "GPU" if tf.config.list_physical_devices("GPU") else "CPU"
        devices = [d.name for d in tf.config.list_logical_devices(kind)]
    else:  # multi_worker_mirrored: this worker's replica device, then the next logical
        # CPUs of the same task.
        first = tf.DeviceSpec.from_string(strategy.extended.worker_devices[0])
        local = len(tf.config.list_logical_devices(first.device_type))
        devices = [first.replace(device_index=i).to_string() for i in range(local)]
    if len(devices) < n:
        raise ConfigError(f"{what} needs {n} devices per replica; this process has "
                          f"{len(devices)}")
    g = tuple(devices[:config.stages])
    d = tuple(devices[config.stages:n]) if config.placement == "split" else g
    return Mode(config, g_devices=g, d_devices=d)
