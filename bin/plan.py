"""The scale plan: how long, how much memory and how efficient a run is on N devices.

    python bin/plan.py --gin_file=gin/biggan_imagenet128.gin --devices=v100x8,tpu_v3x1024
    python bin/plan.py --gin_file=gin/biggan_1024.gin --devices=tpu_v4x256 --output=plan.json
    python bin/plan.py --gin_file=gin/biggan_256.gin --devices=mygpux16 \\
        --custom_device=name=mygpu,fp32=30,bf16=400,memory=48,per_host=8,intra=200,inter=25

Builds the experiment's models on this machine (nothing trains), counts the
train step's FLOPs and traces its memory plan, then prints one line per target
and, with --output, the whole plan as JSON: per-replica batch and accumulation
that fit, seconds per step (compute, all-reduce, input, straggler wait),
weak-scaling efficiency, the asynchronous variant's gain, wall clock and
device-hours to train.total_steps, the bottleneck and what to change, and the
placement each target needs and why: data parallelism, Adam's moments sharded over the
replicas, G and D split over two devices per replica, or the split with 2 or 4 pipeline
stages per network (memory per device, extra bytes moved per step).

Devices: v100, a100, h100, h200, tpu_v3 (a core), tpu_v4 (a chip), this_cpu (this
machine, count 1), or one given with --custom_device (peak TFLOP/s float32 and
bfloat16, GiB, devices per host, all-reduce GB/s inside and across hosts).

    python bin/plan.py --gin_file=gin/biggan_imagenet128.gin --calibrate --devices=h100x64

--calibrate first times --calibrate_steps steps of the experiment on this machine's
devices, built as bin/train.py would (its strategy: one_device, mirrored or tpu), and
records the FLOP/s they reached in the layout cache (paragan_tf/scale/measured.py):
this plan and every later one of that device kind use it instead of the family's fit,
and say "measured on <device>". The device is the detected GPU's catalogue row or
this_cpu; a TPU (which does not name its generation) or a GPU the catalogue lacks is
named with --calibrate_device.
Every assumed number and its source: paragan_tf/scale/devices.py and
paragan_tf/scale/plan.py; how far plans are from published runs: docs/scale.md.
"""

from __future__ import annotations

import json
import os
import sys
import time

from absl import app
from absl import flags

import common

from paragan_tf.errors import ConfigError
from paragan_tf.layout import rules as layout_rules
from paragan_tf.measure import built
from paragan_tf.scale import devices as devices_lib
from paragan_tf.scale import measured
from paragan_tf.scale import modes as modes_lib
from paragan_tf.scale import plan as plan_lib
from paragan_tf.train import experiment
from paragan_tf import teardown

FLAGS = flags.FLAGS
common.define_gin_flags()
flags.DEFINE_list("devices", ["v100x8", "a100x64", "h100x256", "tpu_v3x1024", "tpu_v4x256"],
                  "Targets, <device>x<count>.")
flags.DEFINE_string("custom_device", None, "A device of your own: name=...,fp32=TFLOP/s,"
                    "bf16=TFLOP/s,memory=GiB,per_host=N,intra=GB/s,inter=GB/s[,family=gpu]"
                    "[,per_input_host=N][,input=images/s per host][,tf32=TFLOP/s]"
                    "[,memory_gbps=GB/s].")
flags.DEFINE_string("output", None, "Write the plan as JSON here.")
flags.DEFINE_bool("calibrate", False, "First time the experiment's step on this machine's "
                  "devices and record its FLOP/s for the plans of this device kind.")
flags.DEFINE_integer("calibrate_steps", 5, "--calibrate: steps timed after 2 warm-up steps.")
flags.DEFINE_string("calibrate_device", None, "--calibrate: the catalogue device this "
                    "machine's devices are (default: the detected GPU or this_cpu).")

_CUSTOM_FIELDS = {"name": "name", "fp32": "peak_fp32_tflops", "bf16": "peak_bf16_tflops",
                  "fp16": "peak_fp16_tflops", "memory": "memory_gib", "per_host": "per_host",
                  "intra": "intra_gbps", "inter": "inter_gbps", "family": "family",
                  "per_input_host": "per_input_host", "input": "input_per_host",
                  "tf32": "peak_tf32_tflops", "memory_gbps": "memory_gbps"}


def _custom(text: str) -> dict:
    """--custom_device as catalogue.extra's {name: fields}."""
    fields = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        if not eq or key not in _CUSTOM_FIELDS:
            raise ConfigError(f"--custom_device: {part!r}; write key=value with keys "
                              f"{sorted(_CUSTOM_FIELDS)}")
        name = _CUSTOM_FIELDS[key]
        try:
            fields[name] = (value if name in ("name", "family") else
                            int(value) if name.startswith("per_") else float(value))
        except ValueError:
            raise ConfigError(f"--custom_device: {key}={value!r} is not a number") from None
    if "name" not in fields:
        raise ConfigError("--custom_device needs name=...")
    return {fields.pop("name"): dict(fields, source="--custom_device")}


def _catalogue() -> devices_lib.Catalogue:
    """The catalogue as the parsed gin config and --custom_device extend it."""
    return devices_lib.catalogue(
        extra=_custom(FLAGS.custom_device) if FLAGS.custom_device else None)


def _calibrate(progress) -> None:
    """--calibrate: this machine's devices timed on the experiment's step, recorded."""
    common.parse_gin(finalize=False)
    device = devices_lib.to_calibrate(_catalogue(), layout_rules.detect().accelerator,
                                      FLAGS.calibrate_device)
    step = built.measure_step(FLAGS.gin_file, FLAGS.gin_bindings, FLAGS.calibrate_steps,
                              progress)
    hardware = step["hardware"]
    key, unwritten = measured.record(
        device.name, hardware.signature(), step["step"], step["train_step_flops"],
        step["replicas"], step["seconds_per_step"],
        origin=f"bin/plan.py --calibrate, {step['data']}", tensorflow=_tf_version(),
        train_step_bytes=step["train_step_bytes"])
    peak = device.peak_tflops(step["precision"])
    achieved, traffic = measured.tflops_per_device(step), measured.gbps_per_device(step)
    progress(f"calibrated {device.name} at {step['precision']}: {step['seconds_per_step']:.4g} "
             f"s/step, {achieved:.3g} TFLOP/s per device"
             + (f" ({achieved / peak:.1%} of its {peak:g} peak)" if peak else "")
             + f", {traffic:.3g} GB/s of memory traffic"
             + (f" ({traffic / device.memory_gbps:.1%} of its {device.memory_gbps:g})"
                if device.memory_gbps else "")
             + (f"; not recorded ({unwritten})" if unwritten else
                f"; recorded in the layout cache (key {key})"))


def _tf_version() -> str:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return tf.__version__


def _main() -> int:
    if not FLAGS.gin_file:
        raise ConfigError("--gin_file is required: the experiment to plan")
    began = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[plan] {time.perf_counter() - began:5.1f} s: {message}", file=sys.stderr,
              flush=True)
    if FLAGS.calibrate:
        _calibrate(progress)
    common.parse_gin(finalize=False)
    catalogue = _catalogue()
    targets = [plan_lib.parse_target(t) for t in FLAGS.devices]
    devices = {name: catalogue.device(name) for name, _ in targets}
    configured = built.configured_precision()
    precisions = sorted({d.auto_precision() if configured == "auto" else configured
                         for d in devices.values()})
    model = built.plan_model(precisions, progress)
    progress("planned")
    assumptions = plan_lib.Assumptions()
    rows = [plan_lib.plan_target(model, devices[name], count, catalogue, assumptions)
            for name, count in targets]
    for row in rows:
        print(plan_lib.describe(row), flush=True)
        print(f"    {modes_lib.describe_modes(row)}", flush=True)
        for line in row["advice"]:
            print(f"    {line}", flush=True)
    if FLAGS.output:
        result = dict(gin_files=FLAGS.gin_file, bindings=FLAGS.gin_bindings,
                      effective_batch=model.effective_batch, d_steps=model.d_steps,
                      total_steps=model.total_steps, g_params=model.g_params,
                      d_params=model.d_params, assumptions=vars(assumptions),
                      devices={n: vars(d) for n, d in devices.items()}, plans=rows)
        os.makedirs(os.path.dirname(os.path.abspath(FLAGS.output)), exist_ok=True)
        with open(FLAGS.output, "w") as f:
            json.dump(result, f, indent=1)
    teardown.exit_now(0)


if __name__ == "__main__":
    app.run(common.absl_main(_main))
