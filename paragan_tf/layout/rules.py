"""Hardware-aware layout (docs/design.md section 5): precision, channel rounding, XLA,
oneDNN and thread counts per device.

Rules decide what changes the numbers; measurement decides what does not. The rules,
from what `detect()` finds:

  accelerator / unit          precision        channel multiple   XLA on the step (rule)
  TPU (MXU)                   mixed_bfloat16   128                yes (TPUs compile anyway)
  GPU, compute capability>=8  mixed_bfloat16   8                  yes
  GPU, compute capability 7.x mixed_float16    8                  yes  (dynamic loss scaling)
  GPU, older                  float32          8                  yes
  CPU with AMX-BF16           mixed_bfloat16   32 (AMX tile)      no
  CPU with AVX512-BF16        mixed_bfloat16   16 (512-bit lane)  no
  other CPUs                  float32          1                  no

What only changes round-off (XLA on or off, oneDNN on or off on x86 CPUs, intra-
and inter-op thread counts) is timed on the machine itself, on the experiment's
own step (measure/tuning.py), and kept in a per-machine cache; `auto` takes
the cached measurement where one exists for this hardware, TensorFlow version and
step shape, and the rule above where none does. A measured precision replaces
the rule only where bfloat16 was timed slower than float32. Anything the gin
config pins (`layout.xla`, `layout.onednn`, the precision) or
the environment pins (TF_ENABLE_ONEDNN_OPTS, TF_NUM_INTRAOP_THREADS,
TF_NUM_INTEROP_THREADS set by the user), and the thread counts of strategy.* are
never overridden.

oneDNN and the thread counts are process settings read when TensorFlow starts:
`layout_env.environment()` names the variables a process needs, and bin/train.py
restarts itself with them before it builds anything. XLA never works under
MirroredStrategy on logical CPU devices or inside ParameterServerStrategy closures;
asking for it there is an error, and the tuner does not try it (the log says why).

Under mixed precision only the matrix work runs in the half type. Variables, the
optimizer state (slots of float32 variables), the spectral-norm power iteration,
batch-norm statistics, D's output layers (logits) and the losses stay float32:
see models/layers.py, which reads its variables as float32 and casts by hand.
mixed_float16 trains with dynamic loss scaling (paragan_tf/precision.py); on CPUs it is
emulated and slow, so `auto` picks it only on GPUs of compute capability 7.x
(V100, T4), where no bfloat16 unit exists. It has not run on a GPU here.
"""

from __future__ import annotations

import dataclasses
import os
import platform
from typing import TYPE_CHECKING, Dict, FrozenSet, Optional, Tuple

from absl import logging
import gin
import tensorflow as tf
import tf_keras as keras

from paragan_tf import precision as precision_lib
from paragan_tf.errors import ConfigError

if TYPE_CHECKING:  # the tuner's Choice (layout/choice.py) imports this module
    from paragan_tf.layout.choice import Choice

PRECISIONS = ("auto", *precision_lib.POLICIES)
SWITCHES = ("auto", "on", "off")
# The CPU flags that decide a layout (a hardware signature lists only these).
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16",
             "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "neon", "asimd")
ONEDNN_ENV = "TF_ENABLE_ONEDNN_OPTS"
THREAD_ENV = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


@dataclasses.dataclass(frozen=True)
class Hardware:
    """What the process runs on: the accelerator kind and the features that matter."""

    accelerator: str  # "tpu", "gpu" or "cpu"
    cpu_features: FrozenSet[str] = frozenset()
    gpu_compute_capability: Optional[Tuple[int, int]] = None
    cpu_model: str = ""
    cores: int = 0

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

    @property
    def fp16_tensor_cores(self) -> bool:
        """A GPU whose tensor cores do float16 but not bfloat16 (compute capability 7.x)."""
        cc = self.gpu_compute_capability or (0, 0)
        return self.accelerator == "gpu" and (7, 0) <= cc < (8, 0)

    @property
    def x86_cpu(self) -> bool:
        """oneDNN's switch exists for x86 CPUs only (TensorFlow's Linux x86 builds)."""
        return self.accelerator == "cpu" and any(
            flag.startswith(("sse", "avx", "amx")) for flag in self.cpu_features)

    def signature(self) -> Dict[str, object]:
        """What a measured layout depends on: the layout cache's key holds it."""
        return dict(accelerator=self.accelerator, cpu_model=self.cpu_model, cores=self.cores,
                    isa=sorted(f for f in self.cpu_features if f in ISA_FLAGS),
                    gpu_compute_capability=(list(self.gpu_compute_capability)
                                            if self.gpu_compute_capability else None))


@gin.configurable("layout")
@dataclasses.dataclass(frozen=True, kw_only=True)
class LayoutConfig:
    """The `layout.*` settings (read once, in experiment.Settings), checked when made.

    Attributes:
      precision: auto, float32, mixed_bfloat16 or mixed_float16.
      xla: auto, on or off: compile the per-replica train step with XLA.
      onednn: auto, on or off (x86 CPUs): TensorFlow's oneDNN kernels. A process
        setting: bin/train.py starts TensorFlow with it (`env.environment`). Thread
        counts are pinned by strategy.intra_op_threads/inter_op_threads; left at 0,
        `auto` takes the measured ones.
      round_channels: round every block width up to the unit's tile multiple
        (changes the architecture: parameter counts grow, checkpoints differ).
      channel_multiple: the multiple to round to; 0 takes the unit's.
      tune: auto (measure the step once per machine and step shape, then use the
        cache), off (rules and the cache only) or again (re-measure now): measure/tuning.py.
      tune_seconds: the measurement's time budget, from its first child's start.
      graph_optimizer: TensorFlow's graph optimiser (Grappler), which rewrites every
        traced function on its first call (constant folding, fusions, memory
        scheduling) without changing what it computes. Off, a run starts sooner and
        steps slower: for runs of a few steps (the tests' gin/tiny.gin, smoke runs),
        where it was ~20 % of a two-step multi-worker run's CPU (docs/configuration.md).
    """

    precision: str = "auto"
    xla: str = "auto"
    onednn: str = "auto"
    round_channels: bool = False
    channel_multiple: int = 0
    tune: str = "auto"
    tune_seconds: float = 90.0
    graph_optimizer: bool = True

    def __post_init__(self):
        if self.precision != "auto":
            precision_lib.policy(self.precision)  # refuses an unknown one by name
        for name in ("xla", "onednn"):
            if getattr(self, name) not in SWITCHES:
                raise ConfigError(f"layout.{name}={getattr(self, name)!r} must be auto, on "
                                  f"or off")
        if self.tune not in ("auto", "off", "again"):
            raise ConfigError(f"layout.tune={self.tune!r} must be auto, off or again")
        if self.tune_seconds <= 0:
            raise ConfigError(f"layout.tune_seconds={self.tune_seconds} must be > 0")
        if not isinstance(self.graph_optimizer, bool):
            raise ConfigError(f"layout.graph_optimizer={self.graph_optimizer!r} must be True "
                              "or False")
        if self.channel_multiple and not self.round_channels:
            raise ConfigError("layout.channel_multiple is set but layout.round_channels=False")

    def pins(self) -> Dict[str, str]:
        """What the gin config fixes of what the tuner would otherwise try."""
        return {name: getattr(self, name) for name in ("precision", "xla", "onednn")
                if getattr(self, name) != "auto"}


@dataclasses.dataclass(frozen=True)
class Layout:
    """The chosen layout, with the reason for each choice (logged, and in the dry run)."""

    precision: str
    xla: bool
    channel_multiple: int  # block widths are rounded up to a multiple of this; 1: unchanged
    hardware: Hardware
    reasons: Tuple[str, ...] = ()
    onednn: Optional[bool] = None  # in effect in this process; None: no switch here
    intra_op_threads: int = 0  # as the process was started with them; 0: TF's default
    inter_op_threads: int = 0
    source: str = "rule"  # where `auto`'s choices came from: rule, cache or measured
    graph_optimizer: bool = True  # LayoutConfig.graph_optimizer, as configured

    def as_dict(self) -> dict:
        return dict(precision=self.precision, xla=self.xla,
                    channel_multiple=self.channel_multiple, onednn=self.onednn,
                    intra_op_threads=self.intra_op_threads,
                    inter_op_threads=self.inter_op_threads, source=self.source,
                    graph_optimizer=self.graph_optimizer,
                    accelerator=self.hardware.accelerator, bf16_unit=self.hardware.bf16_unit,
                    reasons=list(self.reasons))


def on_off(flag: bool) -> str:
    """A switch as the logs and the choices' names spell it: on or off."""
    return "on" if flag else "off"


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


def cpu_model(path: str = "/proc/cpuinfo") -> str:
    """The CPU's model name with its family and model numbers (Linux), else the platform's."""
    fields = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "cpu family", "model") and \
                        key.strip() not in fields:
                    fields[key.strip()] = value.strip()
                if not line.strip() and fields:
                    break
    except OSError:
        pass
    if "model name" not in fields:
        return platform.processor() or platform.machine()
    return (f"{fields['model name']} (family {fields.get('cpu family', '?')} "
            f"model {fields.get('model', '?')})")


def usable_cores() -> int:
    """The cores this process may run on (its affinity), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def detect(strategy: Optional[tf.distribute.Strategy] = None) -> Hardware:
    """The hardware this process computes on. Without a strategy it lists physical devices
    only, which leaves TensorFlow uninitialised (thread counts can still be set); a remote
    TPU shows its devices once a TPU strategy connected."""
    cpu = dict(cpu_features=cpu_features(), cpu_model=cpu_model(), cores=usable_cores())
    tpu = (isinstance(strategy, tf.distribute.TPUStrategy) or
           tf.config.list_logical_devices("TPU") if strategy is not None else
           tf.config.list_physical_devices("TPU"))
    if tpu:
        return Hardware("tpu", **cpu)
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        return Hardware("gpu", gpu_compute_capability=details.get("compute_capability"), **cpu)
    return Hardware("cpu", **cpu)


def onednn_in_effect(hardware: Hardware) -> Optional[bool]:
    """Whether this process's TensorFlow runs oneDNN kernels (None: no switch here)."""
    if not hardware.x86_cpu:
        return None
    # TensorFlow's own switch, as it decided at start-up (no public API says it).
    from tensorflow.python.util import _pywrap_util_port  # pylint: disable=all
    return bool(_pywrap_util_port.IsMklEnabled())


def threads_in_effect() -> Tuple[int, int]:
    """The intra- and inter-op thread counts this process was started with (0: default)."""
    return tuple(int(os.environ.get(name) or 0) for name in THREAD_ENV)  # type: ignore


def _tile_multiple(hardware: Hardware) -> int:
    if hardware.accelerator == "tpu":
        return 128
    if hardware.accelerator == "gpu":
        return 8
    return {"AMX-BF16": 32, "AVX512-BF16": 16}.get(hardware.bf16_unit, 1)


def xla_blocker(strategy: Optional[tf.distribute.Strategy], hardware: Hardware
                ) -> Optional[str]:
    """None when XLA can compile the per-replica step here, else why not."""
    if strategy is None:
        return None
    return blocks_xla(type(strategy).__name__, strategy.num_replicas_in_sync, hardware,
                      isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy))


def blocks_xla(strategy_name: str, replicas: int, hardware: Hardware,
               parameter_server: bool = False) -> Optional[str]:
    """The rule behind xla_blocker, from what the strategy will be (the tuner asks before
    one exists): None when XLA can compile the per-replica step, else why not."""
    if hardware.accelerator == "tpu":
        return None
    if parameter_server:
        return "ParameterServerStrategy closures are not compiled"
    if hardware.accelerator == "cpu" and replicas > 1:
        return f"{strategy_name} on CPU devices does not support XLA"
    return None


def rule_xla(hardware: Hardware) -> bool:
    """XLA by the rule, before any measurement: on accelerators only."""
    return hardware.accelerator in ("tpu", "gpu")


def rule_precision(hardware: Hardware) -> Tuple[str, str]:
    """(precision, why) by the rule of the module doc."""
    unit = hardware.bf16_unit
    if unit:
        return "mixed_bfloat16", f"{unit} present"
    if hardware.fp16_tensor_cores:
        return "mixed_float16", ("float16 tensor cores without bfloat16 (compute capability "
                                 f"{hardware.gpu_compute_capability}): dynamic loss scaling")
    return "float32", "no bfloat16 matrix unit found"


def run_precision(hardware: Hardware, configured: str) -> str:
    """The precision a run with `layout.precision=configured` gets by the rule."""
    return rule_precision(hardware)[0] if configured == "auto" else configured


def choose(hardware: Hardware, strategy: Optional[tf.distribute.Strategy] = None,
           config: Optional[LayoutConfig] = None, measured: Optional["Choice"] = None,
           xla_blocked: Optional[str] = None) -> Layout:
    """The layout for `hardware` under `strategy`.

    Args:
      hardware: from `detect()` (tests pass their own).
      strategy: the run's strategy (decides whether XLA can compile the step).
      config: the run's `layout.*` settings (None: as the gin config binds them).
      measured: the tuner's choice for this step (None: the rules alone).
      xla_blocked: why XLA cannot compile this step for a reason outside the strategy
        (the model-parallel placement), or None.
    """
    config = config or LayoutConfig()
    precision, xla, onednn = config.precision, config.xla, config.onednn
    reasons = []
    source = measured.source if measured else "rule"
    if precision == "auto":
        precision, why = rule_precision(hardware)
        if measured and measured.precision and measured.precision != precision:
            precision, why = measured.precision, f"{why}, but {measured.precision} timed faster"
        reasons.append(f"precision {precision}: {why}")
    blocker = xla_blocked or xla_blocker(strategy, hardware)
    if xla == "on" and blocker:
        raise ConfigError(f"layout.xla='on' cannot be used here: {blocker}; use 'auto' or 'off'")
    if xla == "auto":
        if blocker:
            use_xla, why = False, blocker
        elif measured is not None:
            use_xla, why = measured.xla, f"{measured.source}: {measured.describe()}"
        else:
            use_xla = rule_xla(hardware)
            why = (f"compiles the step on {hardware.accelerator.upper()}" if use_xla else
                   "the rule for CPUs (no measurement of this step on this machine yet)")
        reasons.append(f"XLA {on_off(use_xla)}: {why}")
    else:
        use_xla = xla == "on"
    in_effect = onednn_in_effect(hardware)
    if onednn != "auto" and in_effect is not None and in_effect != (onednn == "on"):
        raise ConfigError(f"layout.onednn={onednn!r} but this process started TensorFlow "
                          f"with oneDNN {on_off(in_effect)}: set {ONEDNN_ENV}="
                          f"{int(onednn == 'on')} before TensorFlow is imported (bin/train.py "
                          "does so itself)")
    if in_effect is not None:
        wanted = measured.onednn if measured and onednn == "auto" else None
        reasons.append(f"oneDNN {on_off(in_effect)}" + (
            "" if wanted is None or wanted == in_effect else
            f" (the measurement chose {on_off(wanted)}; start TensorFlow with {ONEDNN_ENV}="
            f"{int(wanted)}, as bin/train.py does)"))
    intra, inter = threads_in_effect()
    multiple = 1
    if config.round_channels:
        multiple = config.channel_multiple or _tile_multiple(hardware)
        reasons.append(f"block widths rounded up to multiples of {multiple}")
    if not config.graph_optimizer:
        reasons.append("graph optimiser off (layout.graph_optimizer)")
    return Layout(precision, use_xla, multiple, hardware, tuple(reasons), in_effect, intra,
                  inter, source, config.graph_optimizer)


def apply(layout: Layout) -> None:
    """Makes `layout` the process's Keras policy and graph optimiser setting; call before
    the models are built."""
    keras.mixed_precision.set_global_policy(precision_lib.policy(layout.precision).keras_policy)
    tf.config.optimizer.set_experimental_options(
        {"disable_meta_optimizer": not layout.graph_optimizer})
    threads = (f"threads {layout.intra_op_threads or 'default'}/"
               f"{layout.inter_op_threads or 'default'}")
    logging.info("layout: %s, XLA %s, oneDNN %s, %s, channel multiple %d; source: %s (%s)",
                 layout.precision, on_off(layout.xla),
                 "n/a" if layout.onednn is None else on_off(layout.onednn), threads,
                 layout.channel_multiple, layout.source,
                 "; ".join(layout.reasons) or "as configured")
