"""Every measured number the product computes with, and where it was measured.

A plan, a memory estimate or an input rate that rests on a number timed on one machine
is only as good as that machine's likeness to yours. So each such number lives here, once,
with what it is, the machine it came from (or the published run it was fitted to, when we
did not measure it), the date and the command that gives it again. The modules that use
them (scale/devices.py, scale/memory.py) read them from TABLE, and no code restates
them. Definitions (bytes per GiB, FLOP per cycle from the vendors' manuals, datasheet
peaks with their sources in scale/devices.py's catalogue) and settings chosen by us
(plan.straggler_probability, our reading, not a measurement) do not belong here.

To re-measure on your machine, run an entry's `command` and override the value where the
product lets you (docs/benchmarks.md, "Calibration"): the efficiencies with
`catalogue.efficiency = {'gpu/float32': ...}`, the step model's constants with
`catalogue.step_model = {'gpu/mixed_bfloat16': {...}}`, the input rate with a device's
`input_per_host` (catalogue.extra); the runtime factor has no gin switch: edit it here,
with the new machine, date and command.
"""

from __future__ import annotations

import dataclasses
from typing import Dict


@dataclasses.dataclass(frozen=True)
class Constant:
    """One measured (or fitted) constant and its provenance."""

    value: float
    what: str
    machine: str  # the CPU model and cores, or the devices of the published run
    date: str  # when it was measured (or fitted), UTC
    command: str  # what measures it again, or the source when we did not measure it


ZEN4 = ("AMD EPYC Zen 4 (family 25 model 17, KVM guest), 2 physical cores at 3.66 GHz, "
        "AVX-512 with AVX512-BF16, no AMX; TensorFlow 2.21 with oneDNN")

H200_STEPS = ("1 NVIDIA H200, the reference network (BigGAN-PyTorch 98459431) in PyTorch 2.11, "
              "CUDA 13 (reported to the project, not measured by us: the JSONs under "
              "benchmarks/results/ named below)")
FIT_COMMAND = (".venv/bin/python benchmarks/probes/fit_step_model.py "
               "--measured=benchmarks/results/reference_step_h200_reported.json "
               "--measured=benchmarks/results/reference_steps_h200_cifar10.json "
               "--measured=benchmarks/results/reference_steps_h200_imagenet128_float32.json "
               "--fit='128:256:8:1:bfloat16' --fit='32:50:1:4:bfloat16' "
               "--fit='128:*:*:2:float32' --fix=bandwidth=0.8 "
               "(benchmarks/results/step_model_fit_h200_real_step_2026-12-07.json: the "
               "step traced as measure/traced.py traces it)")

TABLE: Dict[str, Constant] = {
    "input_images_per_core": Constant(
        500.0,
        "images/s one CPU core decodes (a 427 x 640 JPEG) and resizes to 128 px, one "
        "thread in tf.data: the scale plan's input rate per host core (scale/devices.py "
        "multiplies it by the cores of a host)",
        ZEN4, "2026-11-26 (commit 3a33e76; its printout was not kept); re-run on a machine of "
        "this description 2026-11-27 02:47 UTC under a load of 2.5: 480",
        ".venv/bin/python benchmarks/probes/jpeg_decode_rate.py"),
    "runtime_factor": Constant(
        1.4,
        "peak bytes of a train step beyond the fixed state over the replayed live bytes "
        "of its traced graph (scale/memory.py): 1.17-1.54x at 128-512 px, batch 1-2, "
        "with and without train.recompute, mean ~1.4; oneDNN's reordered copies and the "
        "next update's ops started early. A CPU figure: GPU and TPU runtimes differ",
        ZEN4, "2026-11-23 (commit 542bb6e; the run's JSON was not kept)",
        "bin/bench.py --suite=memory (the allocator's peak beside the estimate)"),
    "efficiency_gpu_float32": Constant(
        0.64,
        "fraction of the datasheet float32 peak a BigGAN train step reaches on a GPU; "
        "also used, unmeasured, for GPUs at mixed_bfloat16 and mixed_float16",
        "8 NVIDIA V100, float32 (BigGAN-PyTorch's published run, not measured by us)",
        "2026-11-26 (fitted in commit 3a33e76)",
        "fitted by plan.calibrate to ajbrock/BigGAN-PyTorch at 98459431, README.md line "
        "28: 15 days to 150k iterations of 256 x 8 images (8.64 s/iteration); again with "
        ".venv/bin/python -m pytest -s tests/scale/test_plan.py -k calibration_points"),
    "efficiency_tpu_bfloat16": Constant(
        0.037,
        "fraction of the datasheet bfloat16 peak a BigGAN train step reaches on a TPU "
        "(at 2 images per core); also used for TPUs at float32 (the MXU runs it in "
        "bfloat16 passes)",
        "1,024 TPU v3 cores (ParaGAN's published run, not measured by us)",
        "2026-11-26 (fitted in commit 3a33e76)",
        "fitted by plan.calibrate to ParaGAN (Shi, Li, You, arXiv 2411.03999): BigGAN in "
        "14 hours on 1,024 TPU v3 cores, read as 150k iterations of 2,048 images (0.336 "
        "s/iteration; the paper states neither); again with .venv/bin/python -m pytest -s "
        "tests/scale/test_plan.py -k calibration_points"),
    "step_model_gpu_bf16_compute": Constant(
        0.214,
        "fraction of a GPU's bfloat16 tensor-core peak the matrix ops of a BigGAN step reach "
        "in the step model (scale/step_model.py), with the bandwidth fraction held at 0.8: "
        "used for every GPU at mixed_bfloat16 and mixed_float16. Range over refits on the "
        "repeated timings 0.2143-0.2143 (the 128 px step has one timing)",
        H200_STEPS + ": 128 px, 256 x 8, 1 D step, 5.21 s (reference_step_h200_reported.json)"
        " and 32 px CIFAR, 50 x 1, 4 D steps, 0.1794 s (reference_steps_h200_cifar10.json), "
        "both bfloat16 autocast",
        "2026-12-07 (fitted)", FIT_COMMAND),
    "step_model_gpu_bf16_op_seconds": Constant(
        3.94e-5,
        "seconds the host takes to issue one op of our traced graph (the train step's own "
        "micro-updates, measure/traced.py) on a GPU at bfloat16 "
        "(the step model's op_seconds, overlapped with the device's work): the CIFAR step "
        "is bound by it. Range over refits on the repeated timings 3.79e-5-4.04e-5",
        H200_STEPS + ": the two bfloat16 steps of step_model_gpu_bf16_compute",
        "2026-12-07 (fitted)", FIT_COMMAND),
    "step_model_gpu_tf32_compute": Constant(
        0.272,
        "fraction of a GPU's TF32 tensor-core peak the matrix ops of a float32 BigGAN step "
        "reach in the step model, with the bandwidth fraction held at 0.8: used for every GPU "
        "with TF32 at float32. Range over refits on the repeated timings 0.2720-0.2722",
        H200_STEPS + ": 128 px float32 with TF32 convolutions, 256 x 2 and 32 x 1, 2 D steps, "
        "2.7203 and 0.2167 s (reference_steps_h200_imagenet128_float32.json)",
        "2026-12-07 (fitted)", FIT_COMMAND),
    "step_model_gpu_tf32_op_seconds": Constant(
        3.70e-5,
        "seconds the host takes to issue one op of our traced graph on a GPU at float32 "
        "(TF32): fitted apart from bfloat16's, and within 7 % of it. Range over refits on "
        "the repeated timings 3.69e-5-3.71e-5",
        H200_STEPS + ": the two float32 steps of step_model_gpu_tf32_compute",
        "2026-12-07 (fitted)", FIT_COMMAND),
    "step_model_gpu_band_low": Constant(
        0.976,
        "the lowest modelled over measured seconds of the catalogue's GPU step model on the "
        "five measured H200 steps (four fitted, the 32 px float32 one held out): printed "
        "with every GPU plan as the model's error band",
        H200_STEPS, "2026-12-07 (fitted)", FIT_COMMAND),
    "step_model_gpu_band_high": Constant(
        1.000,
        "the highest modelled over measured seconds on the same five steps",
        H200_STEPS, "2026-12-07 (fitted)", FIT_COMMAND),
}

INPUT_IMAGES_PER_CORE = TABLE["input_images_per_core"].value
RUNTIME_FACTOR = TABLE["runtime_factor"].value
EFFICIENCY_GPU = TABLE["efficiency_gpu_float32"].value
EFFICIENCY_TPU = TABLE["efficiency_tpu_bfloat16"].value
STEP_MODEL_GPU_BF16 = (TABLE["step_model_gpu_bf16_compute"].value,
                       TABLE["step_model_gpu_bf16_op_seconds"].value)
STEP_MODEL_GPU_TF32 = (TABLE["step_model_gpu_tf32_compute"].value,
                       TABLE["step_model_gpu_tf32_op_seconds"].value)
STEP_MODEL_GPU_BAND = (TABLE["step_model_gpu_band_low"].value,
                       TABLE["step_model_gpu_band_high"].value)
