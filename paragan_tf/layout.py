"""Hardware-aware layout (docs/design.md section 5): precision, channel rounding, XLA per device.

The layout is chosen from what `detect()` finds, never assumed:

  accelerator / unit          precision        channel multiple   XLA on the step
  TPU (MXU)                   mixed_bfloat16   128                yes (TPUs compile anyway)
  GPU, compute capability>=8  mixed_bfloat16   8                  yes
  GPU, older                  float32          8                  yes
  CPU with AMX-BF16           mixed_bfloat16   32 (AMX tile)      no
  CPU with AVX512-BF16        mixed_bfloat16   16 (512-bit lane)  no
  other CPUs                  float32          1                  no

XLA on CPU: it compiles our step under the default strategy, but its CPU
convolutions do not go through oneDNN: the 32x32 CIFAR BigGAN step measured
10.85 s with XLA vs 8.30 s without here (float32, 2 cores; `bin/bench.py
--suite=step --layouts=fp32 --gin_bindings="layout.xla='on'"`), so `auto`
leaves it off on CPUs. It never works under MirroredStrategy on logical CPU devices or
inside ParameterServerStrategy closures; asking for it there is an error.

Under mixed precision only the matrix work runs in bfloat16. Variables, the
optimizer state (slots of float32 variables), the spectral-norm power iteration,
batch-norm statistics, D's output layers (logits) and the losses stay float32:
see models/layers.py, which reads its variables as float32 and casts by hand.
mixed_float16 is accepted when asked for (GPUs) but `auto` never picks it: it
needs loss scaling and runs ~10x slower on CPUs.
"""

from __future__ import annotations

import dataclasses
import math
from typing import FrozenSet, Optional, Tuple

from absl import logging
import gin
import tensorflow as tf
import tf_keras as keras

from paragan_tf.errors import ConfigError

PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16")


@dataclasses.dataclass(frozen=True)
class Hardware:
    """What the process runs on: the accelerator kind and the features that matter."""

    accelerator: str  # "tpu", "gpu" or "cpu"
    cpu_features: FrozenSet[str] = frozenset()
    gpu_compute_capability: Optional[Tuple[int, int]] = None

    @property
    def bf16_unit(self) -> Optional[str]:
        """The bfloat16 matrix unit, or None when bfloat16 would only be emulated."""
        if self.accelerator == "tpu":
            return "TPU MXU"
        if self.accelerator == "gpu":
            cc = self.gpu_compute_capability or (0, 0)
            return "GPU tensor cores (bf16)" if cc >= (8, 0) else None
        if "amx_bf16" in self.cpu_features:
            return "AMX-BF16"
        if "avx512_bf16" in self.cpu_features:
            return "AVX512-BF16"
        return None


@dataclasses.dataclass(frozen=True)
class Layout:
    """The chosen layout, with the reason for each choice (logged, and in the dry run)."""

    precision: str
    xla: bool
    channel_multiple: int  # block widths are rounded up to a multiple of this; 1: unchanged
    hardware: Hardware
    reasons: Tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return dict(precision=self.precision, xla=self.xla,
                    channel_multiple=self.channel_multiple,
                    accelerator=self.hardware.accelerator, bf16_unit=self.hardware.bf16_unit,
                    reasons=list(self.reasons))


def cpu_features(path: str = "/proc/cpuinfo") -> FrozenSet[str]:
    """The CPU's feature flags (Linux); empty when they cannot be read."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def detect(strategy: Optional[tf.distribute.Strategy] = None) -> Hardware:
    """The hardware this process computes on (TPU devices exist once a TPU strategy connected)."""
    if isinstance(strategy, tf.distribute.TPUStrategy) or tf.config.list_logical_devices("TPU"):
        return Hardware("tpu", cpu_features())
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        return Hardware("gpu", cpu_features(), details.get("compute_capability"))
    return Hardware("cpu", cpu_features())


def _tile_multiple(hardware: Hardware) -> int:
    if hardware.accelerator == "tpu":
        return 128
    if hardware.accelerator == "gpu":
        return 8
    return {"AMX-BF16": 32, "AVX512-BF16": 16}.get(hardware.bf16_unit, 1)


def _xla_works(strategy: Optional[tf.distribute.Strategy], hardware: Hardware) -> Optional[str]:
    """None when XLA can compile the per-replica step here, else why not."""
    if strategy is None or hardware.accelerator == "tpu":
        return None
    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        return "ParameterServerStrategy closures are not compiled"
    if hardware.accelerator == "cpu" and strategy.num_replicas_in_sync > 1:
        return f"{type(strategy).__name__} on CPU devices does not support XLA"
    return None


@gin.configurable("layout")
def choose(hardware: Hardware, strategy: Optional[tf.distribute.Strategy] = None,
           precision: str = "auto", xla: str = "auto", round_channels: bool = False,
           channel_multiple: int = 0) -> Layout:
    """The layout for `hardware` under `strategy`.

    Args:
      hardware: from `detect()` (tests pass their own).
      strategy: the run's strategy (decides whether XLA can compile the step).
      precision: auto, float32, mixed_bfloat16 or mixed_float16.
      xla: auto, on or off: compile the per-replica train step with XLA.
      round_channels: round every block width up to the unit's tile multiple
        (changes the architecture: parameter counts grow, checkpoints differ).
      channel_multiple: the multiple to round to; 0 takes the unit's.
    """
    reasons = []
    unit = hardware.bf16_unit
    if precision not in PRECISIONS:
        raise ConfigError(f"layout.precision={precision!r}; choose one of {PRECISIONS}")
    if precision == "auto":
        precision = "mixed_bfloat16" if unit else "float32"
        reasons.append(f"precision {precision}: " + (f"{unit} present" if unit else
                                                   "no bfloat16 matrix unit found"))
    if xla not in ("auto", "on", "off"):
        raise ConfigError(f"layout.xla={xla!r} must be auto, on or off")
    blocker = _xla_works(strategy, hardware)
    if xla == "on" and blocker:
        raise ConfigError(f"layout.xla='on' cannot be used here: {blocker}; use 'auto' or 'off'")
    if xla == "auto":
        use_xla = hardware.accelerator in ("tpu", "gpu") and blocker is None
        if use_xla:
            why = f"compiles the step on {hardware.accelerator.upper()}"
        else:
            why = blocker or "XLA's CPU convolutions are slower than oneDNN's"
        reasons.append(f"XLA {'on' if use_xla else 'off'}: {why}")
    else:
        use_xla = xla == "on"
    multiple = 1
    if round_channels:
        multiple = channel_multiple or _tile_multiple(hardware)
        reasons.append(f"block widths rounded up to multiples of {multiple}")
    elif channel_multiple:
        raise ConfigError("layout.channel_multiple is set but layout.round_channels=False")
    return Layout(precision, use_xla, multiple, hardware, tuple(reasons))


def apply(layout: Layout) -> None:
    """Makes `layout` the process's Keras policy; call before the models are built."""
    keras.mixed_precision.set_global_policy(layout.precision)
    logging.info("layout: %s, XLA %s, channel multiple %d (%s)", layout.precision,
                 "on" if layout.xla else "off", layout.channel_multiple,
                 "; ".join(layout.reasons) or "as configured")


def round_up(channels: int, multiple: int) -> int:
    """`channels` rounded up to a multiple of `multiple`."""
    return int(math.ceil(channels / multiple) * multiple)
