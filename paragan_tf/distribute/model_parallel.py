"""The model-parallel modes and their settings (`model_parallel.*`): the classes beside the
default (distribute/mode.py's `Mode`, replicated), and the one mode of a run, which
train/experiment.py's build makes once from the settings and the strategy (`prepare_devices`,
`make`) and hands down.

- `ShardedOptimizer` (`model_parallel.shard_optimizer=True`): replicated, with Adam's
  moments 1/N per replica (ZeRO stage 1, distribute/sharded_adam.py);
- `Spread` (`model_parallel.placement='split'`, `model_parallel.stages=S`, or both): each
  replica spans devices. With the split, G, EMA G and G's optimizer on the first device(s),
  D and its optimizer on the next; with S stages each network's residual blocks on S
  devices of their own (distribute/staging.py), balanced by each block's estimated bytes.
  Every op runs beside the weights it reads. On logical CPU devices (the only kind this
  machine has) the devices share the cores: it runs and is tested here, it is never faster
  here, and it has not run on GPUs.

docs/distributed.md, "Model parallelism", says how each one runs. A new mode is a class
here, listed in `MODES` (and in `PLANNED` for the scale plan to weigh it), and its test.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Sequence, Tuple

import gin
import tensorflow as tf

from paragan_tf.distribute import sharded_adam
from paragan_tf.distribute import staging
from paragan_tf.distribute import strategy as strategy_lib
from paragan_tf.distribute.mode import GIB, GRADIENT_BYTES, Mode, ModePlan, fewest
from paragan_tf.errors import ConfigError
from paragan_tf import precision as precision_lib

PLACEMENTS = ("replica", "split")


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
        stage 1, distribute/sharded_adam.py).
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
        chosen = [cls for cls in MODES if cls.chosen_by(self)]
        if len(chosen) > 1:
            raise ConfigError(f"{chosen[0](self).setting} is not available with "
                              f"{chosen[1](self).setting} (not built yet)")

    @property
    def mode_class(self) -> type:
        """The class of the mode these settings choose."""
        return next((cls for cls in MODES if cls.chosen_by(self)), Mode)


class ShardedOptimizer(Mode):
    """Replicated, with Adam's moments 1/N per replica over the N replicas (ZeRO stage 1);
    each update's new weights are all-gathered (distribute/sharded_adam.py)."""

    strategies = ("one_device", "mirrored", "multi_worker_mirrored")
    choosing = "model_parallel.shard_optimizer"

    @staticmethod
    def chosen_by(config: ModelParallelConfig) -> bool:
        return config.shard_optimizer

    @property
    def name(self) -> str:
        return "shard"

    @property
    def setting(self) -> str:
        return "model_parallel.shard_optimizer=True"

    def describe(self) -> str:
        return "G and D on the replica's device, Adam's moments 1/N per replica"

    @classmethod
    def refuse_settings(cls, config, strategy_kind, optimizers, precision) -> None:
        super().refuse_settings(config, strategy_kind, optimizers, precision)
        for optimizer in optimizers:
            cls(config).refuse_optimizer(f"{optimizer.network}/optimizer", optimizer.name,
                                         precision)

    def refuse_optimizer(self, where: str, kind: str, precision: str) -> None:
        """What the sharded Adam cannot be: another optimizer, or wrapped for loss scaling
        (`precision`: layout.precision; 'auto' is decided later, by the hardware)."""
        if kind != "adam":
            raise ConfigError(f"{self.setting} shards Adam's moments; {where}.name={kind!r} "
                              f"is not Adam")
        if precision != "auto" and precision_lib.policy(precision).loss_scaling:
            raise ConfigError(f"{self.setting} is not available with layout.precision="
                              f"{precision!r} (its loss scaling wraps a keras optimizer); "
                              f"use 'mixed_bfloat16' or 'float32'")

    def optimizer(self, where: str, kind: str, policy, **adam):
        self.refuse_optimizer(where, kind, policy.name)
        return sharded_adam.ShardedAdam(**adam)

    def apply(self, healthy, precision, grads, variables) -> None:
        # Computed on every replica's slice and kept only when healthy: no branch.
        precision.optimizer.apply(healthy, grads, variables)

    def plan(self, model, memory, count, examples, budget_bytes) -> ModePlan:
        sharded = dataclasses.replace(memory, optimizer_bytes=memory.optimizer_bytes // count)
        gathered = GRADIENT_BYTES * (model.d_steps * model.d_params + model.g_params)
        return dataclasses.replace(
            super().plan(model, sharded, count, examples, budget_bytes),
            extra_mib_per_step=(count - 1) / count * gathered / 2 ** 20)


class Spread(Mode):
    """Each replica spans devices: G and D apart (the split), each network's blocks in
    pipeline stages, or both; `g_devices` and `d_devices` are its networks' stages' devices
    in this replica (without the split D's stage i shares G's device i).

    The devices of a replica:
    - `strategy.kind='one_device'` (one process, one replica): the process's first GPUs,
      or, without GPUs, logical CPU devices made by splitting the CPU before TensorFlow
      initialises.
    - `strategy.kind='multi_worker_mirrored'` (the hybrid): every worker process is one
      replica on logical CPU devices, the first its strategy's own replica device; each
      network's gradients are all-reduced across the workers as always (the NaN guard does
      it, train/nan_guard.py). On GPU workers MultiWorkerMirroredStrategy makes every
      visible GPU a replica of its own, so the hybrid is refused there by name.
    A MirroredStrategy replica is one device by TensorFlow's design, parameter-server
    closures run on one worker device, TPU replicas are cores.
    """

    strategies = ("one_device", "multi_worker_mirrored")
    choosing = "model_parallel.placement='split', model_parallel.stages > 1"
    spread = True
    STAGES = (2, 4)  # pipeline stages per network the scale plan weighs

    @staticmethod
    def chosen_by(config: ModelParallelConfig) -> bool:
        return config.placement == "split" or config.stages > 1

    @property
    def split(self) -> bool:
        return self.config.placement == "split"

    @property
    def devices_per_replica(self) -> int:
        return self.config.stages * (2 if self.split else 1)

    @property
    def name(self) -> str:
        return f"stages{self.config.stages}" if self.config.stages > 1 else "split"

    @property
    def setting(self) -> str:
        parts = ["model_parallel.placement='split'"] if self.split else []
        if self.config.stages > 1:
            parts.append(f"model_parallel.stages={self.config.stages}")
        return " with ".join(parts)

    @property
    def g_device(self) -> Optional[str]:
        """G's first device (its stem, and the loss of G's update)."""
        return self.g_devices[0] if self.g_devices else None

    @property
    def d_device(self) -> Optional[str]:
        """D's first device."""
        return self.d_devices[0] if self.d_devices else None

    @classmethod
    def prepare(cls, config, strategy_kind) -> None:
        """On a CPU-only host splits the CPU into the replica's devices."""
        super().prepare(config, strategy_kind)
        mode = cls(config)
        gpus, n = len(tf.config.list_physical_devices("GPU")), mode.devices_per_replica
        if strategy_kind == "multi_worker_mirrored" and gpus:
            raise ConfigError(f"{mode.setting} under multi_worker_mirrored is not available "
                              f"on GPU workers: MultiWorkerMirroredStrategy makes each of the "
                              f"{gpus} GPUs a replica of its own")
        if strategy_kind == "one_device" and gpus >= n:
            return
        if gpus:
            raise ConfigError(f"{mode.setting} needs {n} GPUs in this process; it sees {gpus}")
        strategy_lib.split_cpu(n)

    @classmethod
    def make(cls, config, strategy) -> "Spread":
        mode = super().make(config, strategy)  # refuses the strategy, if it must
        n = mode.devices_per_replica
        if isinstance(strategy, tf.distribute.OneDeviceStrategy):
            kind = "GPU" if tf.config.list_physical_devices("GPU") else "CPU"
            devices = [d.name for d in tf.config.list_logical_devices(kind)]
        else:  # multi_worker_mirrored: this worker's replica device, then the next logical
            # devices of the same task.
            first = tf.DeviceSpec.from_string(strategy.extended.worker_devices[0])
            local = len(tf.config.list_logical_devices(first.device_type))
            devices = [first.replace(device_index=i).to_string() for i in range(local)]
        if len(devices) < n:
            raise ConfigError(f"{mode.setting} needs {n} devices per replica; this process "
                              f"has {len(devices)}")
        g = tuple(devices[:config.stages])
        return cls(config, g, tuple(devices[config.stages:n]) if mode.split else g)

    def xla_blocker(self) -> Optional[str]:
        return (f"{self.setting} spreads the step over several devices, and XLA compiles a "
                f"step for one")

    def describe(self) -> str:
        if len(self.g_devices) == 1:
            return (f"G, EMA G and G's optimizer on {self.g_device}; D and its optimizer on "
                    f"{self.d_device}")
        return (f"G's blocks in {len(self.g_devices)} stages on {', '.join(self.g_devices)}; "
                f"D's on {', '.join(self.d_devices)}")

    def _devices(self, owner: str) -> Tuple[str, ...]:
        return self.g_devices if self.side_of(owner) == "G" else self.d_devices

    def variables_of(self, owner: str):
        """On its side's first device."""
        return staging.variables_on(self._devices(owner)[0])

    def place_blocks(self, generator, discriminator, generator_ema, batch: int) -> None:
        """Each network's blocks over its stages, balanced by their estimated bytes at
        `batch` examples (a no-op with one stage)."""
        stages = self.config.stages
        if stages < 2:
            return
        for owner, model in (("generator", generator), ("generator_ema", generator_ema),
                             ("discriminator", discriminator)):
            if len(model.blocks) < stages:
                raise ConfigError(f"model_parallel.stages={stages}, but {model.name} has "
                                  f"{len(model.blocks)} residual blocks at this resolution")
            stage_of = staging.balance(model.block_costs(batch), stages)
            model.place_blocks([self._devices(owner)[s] for s in stage_of])

    def on_g(self):
        return tf.device(self.g_device)

    def on_d(self):
        return tf.device(self.d_device)

    def plan(self, model, memory, count, examples, budget_bytes) -> ModePlan:
        """`count` / (2 x stages) replicas; each side's plan times its largest stage's share
        of the side's estimated bytes (staging.balance on the blocks' costs). Traffic: G's
        images to D and their gradients back, and the activations crossing each stage
        boundary forward and their gradients back, once per pass of a network."""
        per_replica, stages = 2 * self.config.stages, self.config.stages
        if not self.split:
            return ModePlan(self.name, self.setting, possible=False,
                            why="the scale plan weighs stages with the split only")
        if not memory.sides or count % per_replica or \
                model.effective_batch % (count // per_replica) or \
                min(len(model.g_block_costs), len(model.d_block_costs)) < stages:
            return ModePlan(self.name, self.setting, possible=False,
                            why=f"{count} device(s) do not make replicas of {per_replica} "
                                f"that split the effective batch {model.effective_batch}"
                                + ("" if stages == 1 else
                                   f", or a network has fewer blocks than {stages} stages"))
        shares, boundaries = {"G": 1.0, "D": 1.0}, {"G": 0, "D": 0}
        for side, costs, blocks in (() if stages == 1 else (
                ("G", model.g_block_costs, model.g_blocks),
                ("D", model.d_block_costs, model.d_blocks))):
            stage_of = staging.balance(costs, stages)
            totals = [sum(c for c, s in zip(costs, stage_of) if s == k) for k in range(stages)]
            shares[side] = max(totals) / sum(totals)
            # The output of each stage's last block crosses to the next stage.
            boundaries[side] = sum(4 * cout * size * size for (_, cout, size), s, nxt in zip(
                blocks, stage_of, list(stage_of[1:]) + [stage_of[-1]]) if nxt != s)
        parts = {side: plan.share(shares[side]) if stages > 1 else plan
                 for side, plan in memory.sides.items()}

        def side_bytes(accumulation, micro, recompute):
            return {side: dataclasses.replace(plan, accumulation=accumulation).total_bytes(
                micro, recompute) for side, plan in parts.items()}
        replicas = count // per_replica
        fitted = fewest(model.effective_batch // replicas,
                        lambda *at: max(side_bytes(*at).values()) <= budget_bytes)
        if fitted is None:
            return ModePlan(self.name, self.setting, replicas=replicas)
        accumulation, micro, recompute = fitted
        # G: d_steps + 1 forwards, one backward; D: d_steps updates on real and fake (twice
        # the batch) and one for G's update, each forward and backward. G's images go to D
        # for each D update and for G's update, their gradients come back once.
        passes = {"G": model.d_steps + 2, "D": 2 * (2 * model.d_steps + 1)}
        moved = sum(passes[side] * boundaries[side] for side in passes)
        images = (model.d_steps + 2) * model.image_bytes
        return ModePlan(self.name, self.setting, fits=True, replicas=replicas,
                        accumulation=accumulation, micro_batch=micro, recompute=recompute,
                        memory_gib_per_device={side: round(b / GIB, 2) for side, b
                                               in side_bytes(*fitted).items()},
                        extra_mib_per_step=(moved + images) * micro * accumulation / 2 ** 20)

    def device_plans(self, generator, discriminator, plan, batch) -> Dict[str, object]:
        """Each network's side of `plan` (its weights, state and its share of the updates,
        scale/memory.py), split over its stages by their blocks' estimated bytes, keyed "G
        stage k (device)" (or "G (device)" with one stage). Without the split G's and D's
        stage k share a device: add the two."""
        parts = {}
        for side, model, devices in (("G", generator, self.g_devices),
                                     ("D", discriminator, self.d_devices)):
            if len(devices) == 1:
                parts[f"{side} ({devices[0]})"] = plan.sides[side]
                continue
            costs = model.block_costs(batch)
            for stage, device in enumerate(devices):
                share = sum(c for c, d in zip(costs, model.block_devices) if d == device)
                parts[f"{side} stage {stage} ({device})"] = plan.sides[side].share(
                    share / sum(costs))
        return parts


# Every mode but the default, in the order `ModelParallelConfig.mode_class` asks them.
MODES: Sequence[type] = (ShardedOptimizer, Spread)
# The modes the scale plan weighs for a target (scale/modes.py), in the order it prefers
# them: each costs more traffic than the one before.
PLANNED: Sequence[Mode] = (
    ShardedOptimizer(ModelParallelConfig(shard_optimizer=True)),
    Spread(ModelParallelConfig(placement="split")),
    *(Spread(ModelParallelConfig(placement="split", stages=k)) for k in Spread.STAGES))


def prepare_devices(config: ModelParallelConfig, strategy_kind: str) -> None:
    """Refuses what the mode cannot run under and makes the devices it needs. Call before
    the strategy is made (before TensorFlow initialises)."""
    config.mode_class.prepare(config, strategy_kind)


def make(config: ModelParallelConfig, strategy: tf.distribute.Strategy) -> Mode:
    """The mode of this process's replica (after prepare_devices and the strategy)."""
    return config.mode_class.make(config, strategy)
