"""Model parallelism inside a replica: G on one device, D on another (`model_parallel.*`).

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

The variables are placed through the strategy's own `colocate_with` hook, the one way a
strategy's scope lets a variable live on a device other than the replica's: a
`numpy_dataset.SingleDevice` under OneDeviceStrategy (a plain variable there), a device
list under MultiWorkerMirrored (a mirrored variable with one copy per worker, on that
device, which its optimizer updates through the strategy like any other).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Optional

import gin
import tensorflow as tf

from paragan_tf.errors import ConfigError

PLACEMENTS = ("replica", "split")


@gin.configurable("model_parallel")
@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelParallelConfig:
    """Where the networks live within a replica (`model_parallel.*` in gin).

    Attributes:
      placement: 'replica': G and D on the replica's one device (data parallelism
        only); 'split': G, EMA G and G's optimizer on the replica's first device, D and
        its optimizer on its second (see the module doc).
    """

    placement: str = "replica"

    def __post_init__(self):
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"model_parallel.placement={self.placement!r} is unknown; "
                              f"choose one of {list(PLACEMENTS)}")

    @property
    def devices_per_replica(self) -> int:
        return 2 if self.placement == "split" else 1


@dataclasses.dataclass(frozen=True)
class Placement:
    """The devices of G's and D's variables and ops in this replica (None: the replica's)."""

    g_device: Optional[str] = None
    d_device: Optional[str] = None

    @property
    def split(self) -> bool:
        return self.g_device is not None

    def on_g(self):
        """Scope for G's ops (a no-op without a split)."""
        return tf.device(self.g_device) if self.split else contextlib.nullcontext()

    def on_d(self):
        """Scope for D's ops (a no-op without a split)."""
        return tf.device(self.d_device) if self.split else contextlib.nullcontext()

    def g_variables(self):
        """Scope (inside strategy.scope()) creating variables on G's device."""
        return _variables_on(self.g_device)

    def d_variables(self):
        """Scope (inside strategy.scope()) creating variables on D's device."""
        return _variables_on(self.d_device)

    def xla_blocker(self):
        """Why XLA cannot compile the step under this placement, or None."""
        if not self.split:
            return None
        return ("model_parallel.placement='split' spreads the step over two devices, and XLA "
                "compiles a step for one")

    def describe(self) -> str:
        if not self.split:
            return "G and D on the replica's device"
        return f"G, EMA G and G's optimizer on {self.g_device}; D and its optimizer on " \
               f"{self.d_device}"


def _variables_on(device: Optional[str]):
    if device is None:
        return contextlib.nullcontext()
    # pylint: disable=import-outside-toplevel
    from tensorflow.python.distribute import numpy_dataset

    def creator(next_creator, **kwargs):
        # The strategy's creator (below this one) places a variable that names where to
        # go instead of on the replica's device: a SingleDevice for OneDevice, an object
        # with `_devices` (as a variable has) for the mirrored strategies.
        strategy = tf.distribute.get_strategy()
        kwargs["colocate_with"] = (
            _Devices((device,)) if isinstance(strategy,
                                              tf.distribute.MultiWorkerMirroredStrategy)
            else numpy_dataset.SingleDevice(device))
        return next_creator(**kwargs)
    return tf.variable_creator_scope(creator)


@dataclasses.dataclass(frozen=True)
class _Devices:
    """What MirroredStrategy's variable creator reads of `colocate_with`: its devices."""

    _devices: tuple


KINDS = ("one_device", "multi_worker_mirrored")


def prepare_devices(config: ModelParallelConfig, strategy_kind: str) -> None:
    """Refuses what the placement cannot run under; on a CPU-only host splits the CPU into
    the replica's devices. Call before the strategy is made (before TensorFlow initialises)."""
    if config.placement == "replica":
        return
    if strategy_kind not in KINDS:
        raise ConfigError(f"model_parallel.placement={config.placement!r} is available under "
                          f"strategy.kind in {list(KINDS)} only, not {strategy_kind!r}")
    gpus = len(tf.config.list_physical_devices("GPU"))
    if strategy_kind == "multi_worker_mirrored" and gpus:
        raise ConfigError(f"model_parallel.placement={config.placement!r} under "
                          f"multi_worker_mirrored is not available on GPU workers: "
                          f"MultiWorkerMirroredStrategy makes each of the {gpus} GPUs a "
                          f"replica of its own")
    if strategy_kind == "one_device" and gpus >= config.devices_per_replica:
        return
    if gpus:
        raise ConfigError(f"model_parallel.placement={config.placement!r} needs "
                          f"{config.devices_per_replica} GPUs in this process; it sees {gpus}")
    # pylint: disable=import-outside-toplevel
    from paragan_tf.distribute import strategy as strategy_lib
    strategy_lib.split_cpu(config.devices_per_replica)


def make(config: ModelParallelConfig, strategy: tf.distribute.Strategy) -> Placement:
    """The placement of this process's replica (after prepare_devices and the strategy)."""
    if config.placement == "replica":
        return Placement()
    n = config.devices_per_replica
    if isinstance(strategy, tf.distribute.OneDeviceStrategy):
        kind = "GPU" if tf.config.list_physical_devices("GPU") else "CPU"
        devices = [d.name for d in tf.config.list_logical_devices(kind)]
    elif isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        # This worker's replica device, then the next logical CPUs of the same task.
        first = tf.DeviceSpec.from_string(strategy.extended.worker_devices[0])
        local = len(tf.config.list_logical_devices(first.device_type))
        devices = [first.replace(device_index=i).to_string() for i in range(local)]
    else:
        raise ConfigError(f"model_parallel.placement={config.placement!r} is available under "
                          f"strategy.kind in {list(KINDS)} only, not "
                          f"{type(strategy).__name__}")
    if len(devices) < n:
        raise ConfigError(f"model_parallel.placement={config.placement!r} needs {n} devices "
                          f"per replica; this process has {len(devices)}")
    return Placement(g_device=devices[0], d_device=devices[1])
