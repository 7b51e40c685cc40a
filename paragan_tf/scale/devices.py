"""The device catalogue of the scale plan: every number the plan assumes, with its source.

One row per device kind, the unit being what TensorFlow sees as one replica
(a GPU; a TPU v3 core, as ParaGAN's "1024 TPU cores" counts them; a TPU v4
chip, whose two cores act as one device):

  peak_*_tflops     datasheet peak per device, dense (no sparsity); 0 = no such unit
  memory_gib        memory per device
  per_host          devices joined by the fast links (one all-reduce ring inside such a
                    group, one across groups): the GPUs of a host; for TPUs the whole
                    pod, whose ICI joins every chip of a slice
  intra_gbps        all-reduce bandwidth per device inside the group, GB/s per
                    direction (NVLink; for TPUs the pod's all-reduce bandwidth per device)
  inter_gbps        bandwidth per device across groups, GB/s (the host's NICs / per_host)
  per_input_host    devices one host's CPUs feed (8 GPUs; 8 TPU v3 cores; 4 TPU v4 chips)
  input_per_host    images/s one host's CPUs decode, crop and batch (named assumption,
                    see INPUT_PER_HOST)
  family            efficiencies are calibrated per family (EFFICIENCY)
  memory_gbps       datasheet memory bandwidth per device, GB/s (0 = not given): the
                    roofline's bound on the bytes a step moves (scale/roofline.py)
  peak_tf32_tflops  dense TF32 tensor-core peak (0 = none): TensorFlow runs float32
                    convolutions and matrix products as TF32 on such a GPU by default
                    (tf.config.experimental.enable_tensor_float_32_execution), so it is a
                    float32 step's peak there
  compute_capability, cpu_features  what the layout rules read (layout/rules.py): the
                    plan's `auto` precision is the one a run training there picks

The measured and fitted numbers below (the input rate per core, the gpu and tpu
efficiencies) come from scale/calibration.py, which records each one's machine or
published run, date and command.

Efficiency is the fraction of the datasheet peak a BigGAN train step reaches. The plan
takes, in this order: a value given in gin (catalogue.efficiency = {'gpu/float32': ...});
the newest step measured on that very device kind at that precision (scale/measured.py:
the layout tuner's timing on bin/train.py's first run, or bin/plan.py --calibrate); else
the family's fit, one number per family from one published run each (docs/scale.md,
"Checked against what really ran": gpu from BigGAN-PyTorch's ImageNet-128 on 8 V100s in
float32, used at every GPU precision; tpu from ParaGAN's 1,024 TPU v3 cores; cpu none, this
machine's own measurement; tests/scale/test_plan.py re-derives the fits).

Every plan row names its efficiency's source (`efficiency_source`). Where the catalogue
has the step model's constants for a family and precision (scale/step_model.py), the plan
costs the step's ops with them instead of the family's fit, still below a gin efficiency:
given in gin (catalogue.step_model), else fitted (STEP_MODELS: GPU tensor cores, i.e.
mixed_bfloat16, mixed_float16 and float32 where there is TF32; a V100's float32 keeps the
family's fit, which was made there). A step measured on the device scales the model when
it is of the planned network, and otherwise ranks above the model as an efficiency
(scale/measured.py).

Users add or override rows in gin (`catalogue.extra = {'mygpu': {...}}`, a GPU's with its
compute_capability) or pass a custom device on bin/plan.py's command line.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Tuple

import gin

from paragan_tf import precision as precision_lib
from paragan_tf.layout import rules as layout_lib
from paragan_tf.errors import ConfigError
from paragan_tf.scale import calibration
from paragan_tf.scale import cpu_peak
from paragan_tf.scale import measured
from paragan_tf.scale import memory as memory_lib
from paragan_tf.scale import roofline
from paragan_tf.scale import step_model as step_model_lib

# A host's input pipeline: images/s one core decodes (a ~430x640 JPEG) and resizes to
# 128 px (measured: calibration.TABLE["input_images_per_core"], with its machine and
# date), times the cores of a typical accelerator host (our reading: DGX-1 has 40 cores,
# DGX A100 128, a TPU v3 host 48): planning numbers, not datasheet ones; override
# `input_per_host` in gin. Prepared records (bin/prepare_dataset.py) skip the decode and
# read faster.
INPUT_PER_CORE = calibration.INPUT_IMAGES_PER_CORE
INPUT_CORES_PER_HOST = 64
INPUT_PER_HOST = INPUT_PER_CORE * INPUT_CORES_PER_HOST


@dataclasses.dataclass(frozen=True)
class Device:
    name: str
    family: str
    peak_fp32_tflops: float
    peak_bf16_tflops: float
    peak_fp16_tflops: float
    memory_gib: float
    per_host: int
    intra_gbps: float
    inter_gbps: float
    per_input_host: int
    input_per_host: float
    source: str
    memory_gbps: float = 0.0
    peak_tf32_tflops: float = 0.0
    # What the layout rules read of a device (layout/rules.py Hardware): a GPU's compute
    # capability, a CPU's feature flags.
    compute_capability: Optional[Tuple[int, int]] = None
    cpu_features: Tuple[str, ...] = ()

    def peak_tflops(self, precision: str) -> float:
        """The matrix peak a step at `precision` runs on (float32's: TF32's where there is
        such a unit, as TensorFlow uses it by default)."""
        unit = precision_lib.policy(precision).peak
        if unit == "fp32" and self.peak_tf32_tflops:
            return self.peak_tf32_tflops
        return {"fp32": self.peak_fp32_tflops, "bf16": self.peak_bf16_tflops,
                "fp16": self.peak_fp16_tflops}[unit]

    def hardware(self) -> layout_lib.Hardware:
        """This device as the layout rules see the hardware a run detects."""
        capability = self.compute_capability  # a list where gin gave the row
        return layout_lib.Hardware(self.family, cpu_features=frozenset(self.cpu_features),
                                   gpu_compute_capability=tuple(capability) if capability
                                   else None)

    def auto_precision(self) -> str:
        """What layout.precision='auto' picks on this device: the layout rules' own
        (layout/rules.py rule_precision), the one a run training there starts from."""
        return layout_lib.rule_precision(self.hardware())[0]


CATALOGUE: Dict[str, Device] = {d.name: d for d in (
    Device("v100", "gpu", 15.7, 0.0, 125.0, 32.0, 8, 150.0, 50.0 / 8, 8, INPUT_PER_HOST,
           "NVIDIA V100 SXM2 datasheet: 15.7 TFLOPS fp32, 125 fp16 tensor, 32 GB HBM2, "
           "NVLink 2.0 300 GB/s (150 per direction); DGX-1: 4 x 100 Gb/s InfiniBand EDR; "
           "900 GB/s HBM2; compute capability 7.0", memory_gbps=900.0,
           compute_capability=(7, 0)),
    Device("a100", "gpu", 19.5, 312.0, 312.0, 80.0, 8, 300.0, 25.0, 8, INPUT_PER_HOST,
           "NVIDIA A100 SXM4 80GB datasheet: 19.5 TFLOPS fp32, 312 bf16/fp16 dense, "
           "NVLink 3 600 GB/s (300 per direction); DGX A100: 8 x 200 Gb/s HDR; 2,039 GB/s "
           "HBM2e; 156 TF32 dense; compute capability 8.0", memory_gbps=2039.0,
           peak_tf32_tflops=156.0, compute_capability=(8, 0)),
    Device("h100", "gpu", 67.0, 989.0, 989.0, 80.0, 8, 450.0, 50.0, 8, INPUT_PER_HOST,
           "NVIDIA H100 SXM5 datasheet: 67 TFLOPS fp32, 989 bf16/fp16 dense, 80 GB HBM3, "
           "NVLink 4 900 GB/s (450 per direction); DGX H100: 8 x 400 Gb/s NDR; HBM3 at "
           "3.35 TB/s; 989 TF32 with sparsity, 494.5 dense; compute capability 9.0",
           memory_gbps=3350.0, peak_tf32_tflops=494.5, compute_capability=(9, 0)),
    Device("h200", "gpu", 67.0, 989.0, 989.0, 141.0, 8, 450.0, 50.0, 8, INPUT_PER_HOST,
           "NVIDIA H200 SXM datasheet: the H100's compute (67 TFLOPS fp32, 989 bf16/fp16 "
           "dense, 494.5 TF32 dense), 141 GB HBM3e at 4.8 TB/s, NVLink 4 900 GB/s; 8 x 400 "
           "Gb/s per host; compute capability 9.0", memory_gbps=4800.0, peak_tf32_tflops=494.5,
           compute_capability=(9, 0)),
    # fp32 matrix work on a TPU runs on the MXU in bfloat16 passes by default: the same peak.
    Device("tpu_v3", "tpu", 61.5, 61.5, 0.0, 16.0, 2048, 166.0, 166.0, 8, INPUT_PER_HOST,
           "Cloud TPU v3 docs: 123 TFLOPS bf16 and 32 GiB HBM per chip of 2 cores; pod of "
           "1,024 chips, 340 TB/s all-reduce bandwidth (166 GB/s per core); a host "
           "feeds 8 cores; 900 GB/s HBM per chip", memory_gbps=450.0),
    Device("tpu_v4", "tpu", 275.0, 275.0, 0.0, 32.0, 4096, 268.0, 268.0, 4, INPUT_PER_HOST,
           "Cloud TPU v4 docs: 275 TFLOPS bf16, 32 GiB HBM per chip; pod of 4,096 chips, "
           "1.1 PB/s all-reduce bandwidth (268 GB/s per chip); one host feeds 4 chips; "
           "1,200 GB/s HBM", memory_gbps=1200.0),
)}

# Fraction of the datasheet peak a BigGAN step reaches, per (family, precision): one fitted
# value per family (calibration.TABLE; the module doc says from which run; tests/
# scale/test_plan.py re-derives both), used at every precision of the family.
EFFICIENCY = {("gpu", "float32"): calibration.EFFICIENCY_GPU,
              ("gpu", "mixed_bfloat16"): calibration.EFFICIENCY_GPU,
              ("gpu", "mixed_float16"): calibration.EFFICIENCY_GPU,
              ("tpu", "mixed_bfloat16"): calibration.EFFICIENCY_TPU,
              ("tpu", "float32"): calibration.EFFICIENCY_TPU}


# The step model on a GPU's tensor cores (scale/step_model.py), overlapped: the host issues
# ops while the device runs earlier ones. Fitted on reference steps measured on an H200
# (calibration.TABLE, step_model_gpu_*), two per precision: bfloat16 (128 px at 256 x 8 and
# CIFAR at 50) fits `compute` and `op_seconds` for mixed_bfloat16 and mixed_float16; TF32
# (128 px float32 at 256 x 2 and 32 x 1) fits them for float32 on its own. Two steps per
# precision pin two constants, so `bandwidth` is held at our reading, an op streaming memory
# at ~80 % of the datasheet bandwidth (docs/scale.md, "The roofline").
GPU_BANDWIDTH_HELD = 0.8


def _fitted(compute_and_op_seconds, name: str):
    compute, op_seconds = compute_and_op_seconds
    constant = calibration.TABLE[f"step_model_gpu_{name}_compute"]
    return (step_model_lib.Constants(compute, GPU_BANDWIDTH_HELD, op_seconds, overlap=True),
            f"fitted to {constant.machine.split(',')[0]} (step_model_gpu_{name}_* in "
            f"scale/calibration.py)")


_BFLOAT16_MODEL = _fitted(calibration.STEP_MODEL_GPU_BF16, "bf16")
_TF32_MODEL = _fitted(calibration.STEP_MODEL_GPU_TF32, "tf32")
STEP_MODELS = {("gpu", "mixed_bfloat16"): _BFLOAT16_MODEL,
               ("gpu", "mixed_float16"): _BFLOAT16_MODEL,
               ("gpu", "float32"): _TF32_MODEL}
_FITTED_MODELS = (_BFLOAT16_MODEL, _TF32_MODEL)
# How sure a GPU plan is: the model's modelled over measured seconds on the steps it was
# fitted to and checked on, printed with every plan that uses the catalogue's model.
STEP_MODEL_BAND = calibration.STEP_MODEL_GPU_BAND
STEP_MODEL_CAVEAT = (f"step model within {STEP_MODEL_BAND[0]:.2f}-{STEP_MODEL_BAND[1]:.2f}x "
                     f"of 5 measured H200 steps of the reference network (4 fitted; 32-128 "
                     f"px, batches 32-256): other networks and GPUs are its extrapolation")

# What each calibration does not cover, printed with every plan that leans on it.
_TENSOR_CORES = ("efficiency from V100 float32: tensor cores usually reach less of their "
                 "peak, so read this time as a lower bound")
_CAVEATS = {
    ("gpu", "mixed_bfloat16"): _TENSOR_CORES,
    ("gpu", "mixed_float16"): _TENSOR_CORES,
    ("tpu", "mixed_bfloat16"): "efficiency from ParaGAN's 2 images per TPU core: with more "
                               "per device, read this time as an upper bound",
}


def on_tensor_cores(device: Device, precision: str) -> bool:
    """Whether a step at `precision` runs its matrix ops on `device`'s tensor cores."""
    return device.family == "gpu" and (precision != "float32" or bool(device.peak_tf32_tflops))


def caveat(device: Device, precision: str) -> Optional[str]:
    """What the family's fitted efficiency does not cover on `device` at `precision`
    (float32 on a GPU with TF32 runs on tensor cores too)."""
    found = (_TENSOR_CORES if device.family == "gpu" and precision == "float32"
             and device.peak_tf32_tflops else _CAVEATS.get((device.family, precision)))
    if found == _TENSOR_CORES and not device.memory_gbps:
        found += ("; give the device's memory bandwidth (memory_gbps) and the step model "
                  "fitted to tensor cores costs it instead")
    return found


def this_cpu() -> Device:
    """This machine as a device: its theoretical peak (scale/cpu_peak.py) and memory."""
    peak = cpu_peak.theoretical_peak()
    memory = round((memory_lib.device_memory_bytes("cpu") or 0) / memory_lib.GIB, 1)
    fp32 = (peak["fp32_gflops"] or 0.0) / 1000
    bf16 = (peak["bf16_gflops"] or 0.0) / 1000
    return Device("this_cpu", "cpu", fp32, bf16 if bf16 > fp32 else 0.0, 0.0, memory, 1,
                  0.0, 0.0, 1, INPUT_PER_CORE * peak["cores"],  # cores shared with compute
                  f"this machine: {peak['cores']} cores at "
                  f"{peak['clock_ghz']:.2f} GHz ({peak['clock_source']}), {peak['isa_row']}",
                  cpu_features=tuple(sorted(layout_lib.cpu_features())))


def detected_name(accelerator: str) -> Optional[str]:
    """The catalogue name of this process's hardware: this_cpu, a known GPU, else None."""
    if accelerator == "cpu":
        return "this_cpu"
    if accelerator == "gpu":
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        for gpu in tf.config.list_physical_devices("GPU"):
            name = tf.config.experimental.get_device_details(gpu).get("device_name", "")
            for row in CATALOGUE.values():
                if row.family == "gpu" and row.name in name.lower():
                    return row.name
    return None  # TPUs do not name their generation to TensorFlow here


def detected(accelerator: str) -> Optional[Device]:
    """The catalogue row of this process's hardware (detected_name), else None."""
    name = detected_name(accelerator)
    return this_cpu() if name == "this_cpu" else CATALOGUE[name] if name else None


def to_calibrate(catalogue: "Catalogue", accelerator: str, name: Optional[str]) -> Device:
    """The catalogue device a calibration on this `accelerator` measures: `name`, else the
    detected one; refused by name when there is none or it is not this kind of device."""
    if name:
        device = catalogue.device(name)
    else:
        device = detected(accelerator)
        if device is None:
            raise ConfigError(f"--calibrate: this {accelerator} has no catalogue row that "
                              f"names it; say which it is with --calibrate_device (one of "
                              f"{sorted(catalogue.devices)}, or a --custom_device)")
    if (accelerator == "cpu") != (device.family == "cpu"):
        raise ConfigError(f"--calibrate_device={device.name} is a {device.family} device; "
                          f"this machine's steps run on its {accelerator}")
    return device


def _fitted_source(family: str, precision: str) -> str:
    fitted = {"gpu": "efficiency_gpu_float32", "tpu": "efficiency_tpu_bfloat16"}.get(family)
    if fitted is None:
        return "given in gin (catalogue.efficiency)"
    constant = calibration.TABLE[fitted]
    return f"fitted to {constant.machine} ({fitted} in scale/calibration.py)"


@dataclasses.dataclass(frozen=True)
class Catalogue:
    devices: Dict[str, Device]
    efficiencies: Dict[Tuple[str, str], float]  # the families' fits
    given: Dict[Tuple[str, str], float] = dataclasses.field(default_factory=dict)  # in gin
    # The step model's constants per (family, precision), with their source
    # (scale/step_model.py): STEP_MODELS, and over them those given in gin.
    step_models: Dict[Tuple[str, str], Tuple[step_model_lib.Constants, str]] = dataclasses.field(
        default_factory=lambda: dict(STEP_MODELS))

    def device(self, name: str) -> Device:
        if name == "this_cpu":
            return this_cpu()
        if name not in self.devices:
            raise ConfigError(f"unknown device {name!r}: choose from "
                              f"{sorted(self.devices) + ['this_cpu']}, or add it in gin "
                              f"(catalogue.extra)")
        return self.devices[name]

    def efficiency(self, device: Device, precision: str) -> float:
        return self.efficiency_of(device, precision)[0]

    @staticmethod
    def _this_machine(device: Device) -> Optional[Dict[str, object]]:
        return layout_lib.detect().signature() if device.name == "this_cpu" else None

    def _given_or_measured(self, device: Device, precision: str
                           ) -> Optional[Tuple[float, str]]:
        key = (device.family, precision)
        if key in self.given:
            return self.given[key], "given in gin (catalogue.efficiency)"
        return measured.efficiency(device.name, device.peak_tflops(precision), precision,
                                   self._this_machine(device))

    def step_model_of(self, device: Device, precision: str, network: Optional[dict] = None,
                      cost: Optional[roofline.StepCost] = None
                      ) -> Optional[Tuple[step_model_lib.Constants, str]]:
        """The step model's (constants, source) for `device` at `precision`, where the
        catalogue has them and no gin efficiency ranks above them: scaled to the step
        measured on that device when it is of the planned `network`, whose step's ops
        `cost` counts (scale/measured.py); else None (the plan then takes efficiency_of,
        which a measured step of another network ranks first in)."""
        found = self.step_models.get((device.family, precision))
        if found is None or (device.family, precision) in self.given:
            return None
        if found in _FITTED_MODELS and not (on_tensor_cores(device, precision)
                                                and device.memory_gbps):
            # A V100's float32 runs on its CUDA cores, where the family's fit was made; a
            # GPU without a bandwidth keeps that fit too, and its caveat says what to give.
            return None
        steps = measured.entries(device.name, precision, self._this_machine(device))
        if steps:
            return (measured.calibrated(found[0], device, precision, steps[0], network, cost)
                    if device.memory_gbps else None)
        if not device.memory_gbps:
            raise ConfigError(f"{device.name}: the step model at {precision} needs the "
                              f"device's memory bandwidth; give memory_gbps "
                              f"(catalogue.extra or --custom_device)")
        return found

    def efficiency_of(self, device: Device, precision: str) -> Tuple[float, str]:
        """(the fraction of `device`'s peak at `precision` a step reaches, its source):
        a gin value, else the newest step measured on that device (scale/measured.py),
        else the family's fit."""
        key = (device.family, precision)
        found = self._given_or_measured(device, precision)
        if found:
            return found
        if device.name == "this_cpu":
            raise ConfigError(f"this_cpu has no measured step at {precision} yet: "
                              f"bin/train.py measures its layout on its first run here "
                              f"(or bin/plan.py --calibrate); until then give "
                              f"catalogue.efficiency = {{'cpu/{precision}': ...}}")
        if key not in self.efficiencies:
            raise ConfigError(f"no efficiency for {device.family} devices at {precision}; "
                              f"measure one (bin/plan.py --calibrate on the device) or "
                              f"give one: catalogue.efficiency = "
                              f"{{'{device.family}/{precision}': 0.5}}")
        return self.efficiencies[key], _fitted_source(device.family, precision)


@gin.configurable("catalogue")
def catalogue(extra: Optional[Dict[str, dict]] = None,
              efficiency: Optional[Dict[str, float]] = None,
              step_model: Optional[Dict[str, dict]] = None) -> Catalogue:
    """The catalogue with gin's additions: extra rows (or fields of existing ones),
    efficiencies as {'family/precision': value} and the step model's constants as
    {'family/precision': {'compute': .., 'bandwidth': .., 'op_seconds': ..}} (overlapped
    dispatch, scale/step_model.py, except for the cpu family; 'overlap' says otherwise)."""
    rows = dict(CATALOGUE)
    for name, fields in (extra or {}).items():
        base = dataclasses.asdict(rows[name]) if name in rows else dict(
            name=name, family="gpu", peak_fp32_tflops=0.0, peak_bf16_tflops=0.0,
            peak_fp16_tflops=0.0, memory_gib=0.0, per_host=1, intra_gbps=0.0,
            inter_gbps=0.0, per_input_host=8, input_per_host=INPUT_PER_HOST,
            source="given in gin", memory_gbps=0.0, peak_tf32_tflops=0.0,
            compute_capability=None, cpu_features=())
        unknown = set(fields) - set(base)
        if unknown:
            raise ConfigError(f"catalogue.extra[{name!r}]: unknown fields {sorted(unknown)}; "
                              f"known: {sorted(base)}")
        rows[name] = Device(**{**base, **fields, "name": name})
    given = {tuple(key.partition("/")[::2]): float(value)
             for key, value in (efficiency or {}).items()}
    models = dict(STEP_MODELS)
    for key, fields in (step_model or {}).items():
        family = key.partition("/")[0]
        try:  # an accelerator's host issues ops while it runs: overlapped unless said
            constants = step_model_lib.Constants(**{"overlap": family != "cpu", **fields})
        except TypeError:
            raise ConfigError(f"catalogue.step_model[{key!r}] = {fields}: give exactly "
                              f"{list(step_model_lib.NAMES)} (and overlap, if not the "
                              f"family's: a cpu's adds dispatch to work, others overlap)"
                              ) from None
        models[tuple(key.partition("/")[::2])] = (
            constants, "given in gin (catalogue.step_model)")
    return Catalogue(rows, dict(EFFICIENCY), given, models)
