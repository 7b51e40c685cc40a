"""The parallel mode of a run: what every mode owns, and the default mode, `Mode`:
replicated, data parallelism only, each replica on one device. The other modes, their
settings (`model_parallel.*`) and the one that train/experiment.py's build makes once and
hands down are distribute/model_parallel.py's.

A mode owns what differs between the modes, each written once in its class:
- the strategies it runs under (`strategies`; `refuse` names the others);
- the devices of a replica (`prepare`, before TensorFlow initialises; `make`);
- where the networks' variables and blocks live and the device scopes of the step's ops
  (`variables_of`, `place_blocks`, `on_g`, `on_d`: train/step.py asks);
- each network's optimizer where the mode makes it (`optimizer`), and how an all-reduced
  update is applied (`apply`: the NaN guard asks the mode, not the optimizer's type);
- its memory and traffic plan: on a scale-plan target (`plan`; scale/modes.py weighs the
  modes model_parallel.PLANNED lists) and per device of a built run (`device_plans`: the
  dry run).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable, Dict, List, Optional, Tuple

import tensorflow as tf

from paragan_tf.distribute import strategy as strategy_lib
from paragan_tf.errors import ConfigError

# What lives with G and what with D when a replica spans devices (Mode.side_of).
G_SIDE = ("generator", "generator_ema", "g_optimizer")
D_SIDE = ("discriminator", "d_optimizer")
GRADIENT_BYTES = 4  # gradients are all-reduced in float32 under every layout
PLAN_BATCH = 16  # examples per replica at which the plan balances pipeline stages
GIB = 1024 ** 3


@dataclasses.dataclass(frozen=True)
class ModePlan:
    """One mode on one scale-plan target (every mode's plan has these fields).

    possible: whether `count` devices make replicas of this mode at all (`why` if not);
    fits: whether an example per micro-batch fits a device, with the fewest micro-batches
    (`accumulation` x `micro_batch`, `recompute` only where needed); memory per device by
    what the device holds ('replica', or a side of the replica: 'G', 'D'); the traffic the
    mode adds per step.
    """

    mode: str
    setting: str
    possible: bool = True
    why: str = ""
    fits: bool = False
    replicas: int = 0
    accumulation: int = 0
    micro_batch: int = 0
    recompute: bool = False
    memory_gib_per_device: Dict[str, float] = dataclasses.field(default_factory=dict)
    extra_mib_per_step: float = 0.0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class Mode:
    """Replicated: data parallelism only, every replica on one device (the default). The
    other modes change what differs from it."""

    strategies: Optional[Tuple[str, ...]] = None  # the strategy kinds it runs under; all
    choosing = "model_parallel.placement='replica'"  # the settings choosing it, in words
    spread = False  # whether a replica spans several devices

    def __init__(self, config=None, g_devices: Tuple[str, ...] = (),
                 d_devices: Tuple[str, ...] = ()):
        # config: the model_parallel.ModelParallelConfig that chose the mode (None: the
        # default's); g_devices, d_devices: G's and D's devices in this replica, where a
        # mode spreads it.
        self.config, self.g_devices, self.d_devices = config, g_devices, d_devices

    @staticmethod
    def chosen_by(config) -> bool:  # pylint: disable=unused-argument
        """Whether `config` chooses this mode (the default is chosen when no other is)."""
        return False

    @property
    def name(self) -> str:
        """The plan's name of this mode."""
        return "data"

    @property
    def setting(self) -> str:
        """The settings that choose this mode, as a user writes them."""
        return self.choosing

    @property
    def model_parallel(self) -> bool:
        """Whether anything beyond data parallelism places the run's state."""
        return type(self) is not Mode

    # Before and while the run is built.
    @classmethod
    def refuse(cls, config, strategy_kind: str) -> None:
        """Refuses, by name, a strategy this mode does not run under."""
        if cls.strategies is not None and strategy_kind not in cls.strategies:
            raise ConfigError(f"{cls(config).setting} is available under strategy.kind in "
                              f"{list(cls.strategies)} only, not {strategy_kind!r}")

    @classmethod
    def refuse_settings(cls, config, strategy_kind: str, optimizers, precision: str) -> None:
        """Everything this mode refuses that the run's settings alone decide: its strategy,
        and what it asks of the optimizers (G's and D's OptimizerConfig) and the precision
        (layout.precision): before any work (train/experiment.py `refuse`)."""
        del optimizers, precision  # this mode asks nothing of them
        cls.refuse(config, strategy_kind)

    @classmethod
    def prepare(cls, config, strategy_kind: str) -> None:
        """What must happen before TensorFlow initialises (the devices a replica needs)."""
        cls.refuse(config, strategy_kind)

    @classmethod
    def make(cls, config, strategy: tf.distribute.Strategy) -> "Mode":
        """This process's mode under `strategy` (after `prepare` and the strategy)."""
        cls.refuse(config, strategy_lib.kind_of(strategy))  # a strategy made elsewhere, too
        return cls(config)

    def xla_blocker(self) -> Optional[str]:
        """Why XLA cannot compile the step under this mode, or None."""
        return None

    def describe(self) -> str:
        return "G and D on the replica's device"

    # Where things live.
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
        mode keeps them."""
        return contextlib.nullcontext()

    def place_blocks(self, generator, discriminator, generator_ema, batch: int) -> None:
        """Assigns each network's blocks to devices before the models' first call."""

    def on_g(self):
        """Scope for G's ops outside its blocks."""
        return contextlib.nullcontext()

    def on_d(self):
        """Scope for D's ops outside its blocks."""
        return contextlib.nullcontext()

    # Updates.
    def optimizer(self, where: str, kind: str, policy, **adam):
        """The optimizer of one network (gin scope `where`, its `optimizer.name` `kind`, the
        run's precision `policy`: paragan_tf/precision.py) when this mode makes it, else
        None (the caller makes a keras one)."""
        return None

    def apply(self, healthy: tf.Tensor, precision, grads: List[tf.Tensor], variables) -> None:
        """Applies all-reduced `grads` to `variables` when `healthy` (the same on every
        replica), in replica context; `precision` (paragan_tf/precision.py) holds the network's
        optimizer and, under float16, updates its loss scale from `grads`, applied or not."""
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

    # Plans.
    def plan(self, model, memory, count: int, examples: int,
             budget_bytes: int) -> ModePlan:
        """This mode on `count` devices of `budget_bytes`, `examples` per device
        (`model`: scale/plan.py's Model; `memory`: its per-replica plan, scale/memory.py's
        Plan, read through its own methods: distribute/ sits below scale/)."""
        fitted = memory.fit(examples, budget_bytes)
        if fitted is None:
            return ModePlan(self.name, self.setting, replicas=count)
        accumulation, micro, recompute = fitted
        total = dataclasses.replace(memory, accumulation=accumulation).total_bytes(
            micro, recompute)
        return ModePlan(self.name, self.setting, fits=True, replicas=count,
                        accumulation=accumulation, micro_batch=micro, recompute=recompute,
                        memory_gib_per_device={"replica": round(total / GIB, 2)})

    def device_plans(self, generator, discriminator, plan,
                     batch: int) -> Dict[str, object]:
        """The memory plan of each device of a built replica at `batch` examples, keyed
        by what the device holds (one device: the whole plan)."""
        return {"replica": plan}


def fewest(examples: int, fits: Callable[[int, int, bool], bool]
           ) -> Optional[Tuple[int, int, bool]]:
    """The first (accumulation, micro-batch, recompute) that `fits`, fewest micro-batches
    first, without recompute before with it; None if none does."""
    divisors = [a for a in range(1, examples + 1) if examples % a == 0]
    for recompute in (False, True):
        for accumulation in divisors:
            if fits(accumulation, examples // accumulation, recompute):
                return accumulation, examples // accumulation, recompute
    return None
