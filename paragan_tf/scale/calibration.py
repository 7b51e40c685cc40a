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
    "step_model_gpu_compute": Constant(
        0.244,
        "fraction of a GPU's tensor-core peak the matrix ops of a BigGAN step reach in the "
        "step model (scale/step_model.py), fitted to one step with the bandwidth fraction "
        "held at 0.8 and the cost per op at 5 us (scale/devices.py says why): used for "
        "every GPU at mixed_bfloat16, mixed_float16 and TF32 float32",
        "1 NVIDIA H200, the reference network (BigGAN-PyTorch 98459431) in PyTorch 2.11, "
        "CUDA 13, 128 px, 256 images x 8 accumulations, 1 D step, bfloat16 autocast: "
        "5.21 s per iteration (reported to the project, not measured by us: "
        "benchmarks/results/reference_step_h200_reported.json)",
        "2026-11-30 (fitted)",
        ".venv/bin/python benchmarks/probes/fit_step_model.py "
        "--measured=benchmarks/results/reference_step_h200_reported.json --fit='*' "
        "--fix=bandwidth=0.8 --fix=op_seconds=5e-6"),
}

INPUT_IMAGES_PER_CORE = TABLE["input_images_per_core"].value
RUNTIME_FACTOR = TABLE["runtime_factor"].value
EFFICIENCY_GPU = TABLE["efficiency_gpu_float32"].value
EFFICIENCY_TPU = TABLE["efficiency_tpu_bfloat16"].value
STEP_MODEL_GPU_COMPUTE = TABLE["step_model_gpu_compute"].value
