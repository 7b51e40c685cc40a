"""Step rates measured on the user's own devices, which the scale plan prefers to its fits.

A fitted efficiency (scale/calibration.py) is one published run's, on other hardware at
another batch; the user's own device, timed on the experiment's own step, is better.
Two writers leave such a measurement in the layout cache (paragan_tf/layout/cache.py):

  the layout tuner   bin/train.py's first run of a step shape under a one-process
                     strategy on a CPU or GPU (measure/tuning.py) times the step and
                     counts its FLOPs; its entry names the catalogue device it ran on
                     (`device`: this_cpu, or the GPU's catalogue row; entries older than
                     that field are CPU ones)
  --calibrate        bin/plan.py --calibrate builds the experiment as bin/train.py would
                     on this machine's devices (a strategy of one process: one device,
                     mirrored, TPU), times a few steps and records a "step_rate" entry
                     (`record`)

The plan of a catalogue device at a precision reads the newest such entry for that device
and precision (for this_cpu, one measured on this very machine's hardware): its achieved
FLOP/s per device (the step's FLOPs, scale/flops.py, over its replicas and its measured
seconds) over the device's peak is the efficiency, and the plan says where it came from.
A gin value (catalogue.efficiency) still overrides it. --calibrate also records the bytes
its step's ops move (scale/roofline.py), so each entry says the memory traffic per second
it reached beside its FLOP/s: how near the device's bandwidth a step runs.

Where the catalogue has the step model's constants for the device (scale/step_model.py)
and the measured step is of the planned network (its step shape less what varies per run:
`network`), one efficiency would carry the measured batch's share of the peak to every
other batch, which the model exists to avoid. There the measurement scales the model
instead (`calibrated`): every term of the catalogue's model slowed (or sped) by the one
factor that lands it on the measured seconds, its fractions of the datasheet capped at 1
(`scaled`: a step up to its roofline at the datasheet's peak and bandwidth, with no cost
per op, is followed; one faster is refused). One measured step fixes one number; the
model keeps its shape, how a step's time grows with batch and resolution, and takes its
level from the user's device, so the plan is the measurement at the measured batch and
the model's extrapolation from it elsewhere.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from typing import Dict, List, Optional, Tuple

from paragan_tf.errors import ConfigError
from paragan_tf.layout import cache as layout_cache
from paragan_tf.scale import roofline
from paragan_tf.scale import step_model as step_model_lib

KIND = "step_rate"
# The keys of a step shape (measure/tuning.py) that vary per run of one network: a step of
# the same network at another batch is the step model's to extrapolate.
PER_RUN = ("batch_size", "d_steps", "accumulation", "recompute", "precision", "strategy")


def record(device: str, hardware: Dict[str, object], step: Dict[str, object],
           train_step_flops: float, replicas: int, seconds_per_step: float, origin: str,
           tensorflow: str, train_step_bytes: float = 0.0) -> Tuple[str, Optional[str]]:
    """Stores one measured step of `device` (a catalogue name): the FLOPs (and bytes
    moved, when counted) of all the step's `replicas` (one per device) and its seconds;
    (its key, None when written or else why not: the cache never stops a run)."""
    if train_step_flops <= 0 or seconds_per_step <= 0:
        raise ValueError(f"a measured step needs positive FLOPs and seconds, not "
                         f"{train_step_flops} and {seconds_per_step}")
    facts = dict(schema=layout_cache.SCHEMA, kind=KIND, device=device, hardware=hardware,
                 tensorflow=tensorflow, step=step)
    key = KIND + "-" + hashlib.sha256(
        json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:16]
    entry = dict(facts, train_step_flops=float(train_step_flops),
                 train_step_bytes=float(train_step_bytes), replicas=int(replicas),
                 seconds_per_step=float(seconds_per_step), origin=origin,
                 date=time.strftime("%Y-%m-%d %H:%M:%S %Z"))
    return key, layout_cache.write(key, entry)


def tflops_per_device(step: dict) -> float:
    """A measured step's TFLOP/s per device: its FLOPs are all its replicas'."""
    return (step["train_step_flops"] / (step.get("replicas") or 1)
            / step["seconds_per_step"] / 1e12)


def gbps_per_device(step: dict) -> float:
    """A measured step's GB/s of memory traffic per device (0 where its bytes were not
    counted: the layout tuner's entries)."""
    return ((step.get("train_step_bytes") or 0.0) / (step.get("replicas") or 1)
            / step["seconds_per_step"] / 1e9)


def _counts(entry: dict, device: str, precision: str,
            this_machine: Optional[Dict[str, object]]) -> bool:
    if not isinstance(entry, dict) or entry.get("schema") != layout_cache.SCHEMA:
        return False
    step = entry.get("step")
    flops, seconds = entry.get("train_step_flops"), entry.get("seconds_per_step")
    if not (isinstance(step, dict) and isinstance(flops, (int, float)) and flops > 0 and
            isinstance(seconds, (int, float)) and seconds > 0):
        return False
    choice = entry.get("choice") if isinstance(entry.get("choice"), dict) else {}
    if (choice.get("precision") or step.get("precision")) != precision:
        return False
    if device == "this_cpu":  # this machine's own only (a cache may be shared by hosts);
        # tuner entries written before entries named their device are CPU ones
        return (this_machine is not None and entry.get("hardware") == this_machine and
                entry.get("device", device) == device)
    return entry.get("device") == device


def entries(device: str, precision: str,
            this_machine: Optional[Dict[str, object]] = None) -> List[dict]:
    """The measured steps of `device` at `precision`, newest first; `this_machine`: this
    machine's hardware signature (layout/rules.py), which older tuner entries carry."""
    found = [e for e in layout_cache.read_all().values()
             if _counts(e, device, precision, this_machine)]
    return sorted(found, key=lambda e: str(e.get("date", "")), reverse=True)


def efficiency(device: str, peak_tflops: float, precision: str,
               this_machine: Optional[Dict[str, object]] = None
               ) -> Optional[Tuple[float, str]]:
    """(the newest measured step's FLOP/s over `peak_tflops`, what it was) or None."""
    found = entries(device, precision, this_machine)
    if not found or not peak_tflops:
        return None
    newest = found[0]
    achieved = tflops_per_device(newest)
    if achieved > peak_tflops:  # a miscounted step or a wrong catalogue row: never plan it
        raise ConfigError(f"{layout_cache.path()}: the step measured on {device} "
                          f"{newest.get('date')} reached {achieved:.3g} TFLOP/s per device, "
                          f"above the catalogue's {peak_tflops:.3g} peak at {precision}: "
                          f"correct the device's row (catalogue.extra) or remove the entry")
    step = newest["step"]
    origin = newest.get("origin") or "the layout tuner"
    traffic = gbps_per_device(newest)
    return achieved / peak_tflops, (
        f"measured on {device} {newest.get('date', '(undated)')}: {achieved:.3g} of "
        f"{peak_tflops:.3g} TFLOP/s" + (f" and {traffic:.3g} GB/s moved" if traffic else "")
        + f" on a {step.get('resolution')} px step of batch {step.get('batch_size')} "
        f"({origin}; {layout_cache.path()})")


def network(step: dict) -> dict:
    """A step shape (measure/tuning.py) less what varies per run: which network it is."""
    return {k: v for k, v in step.items() if k not in PER_RUN}


def calibrated(base: step_model_lib.Constants, device, precision: str, newest: dict,
               planned_network: dict, cost: Optional[roofline.StepCost]
               ) -> Optional[Tuple[step_model_lib.Constants, str]]:
    """The step model's (constants, source) scaled to `newest`, the newest step measured on
    `device` (a catalogue Device) at `precision` (`entries`): every term of `base` slowed by
    the factor that lands the model on the measured seconds (`scaled`), the step's ops being
    `cost`'s. None where that step is of another network than `planned_network`, or where it
    is faster than its roofline at the datasheet's peak and bandwidth (the plan then takes
    the measured efficiency)."""
    step = newest["step"]
    if not (planned_network and cost) or network(step) != planned_network:
        return None
    # A rematerialising step ran its blocks' forward twice; the plan adds that back.
    seconds = newest["seconds_per_step"] / (4 / 3 if step.get("recompute") else 1)
    point = step_model_lib.Point(
        "measured", cost, step["batch_size"] // (newest.get("replicas") or 1),
        step.get("accumulation", 1), step.get("d_steps", 1),
        device.peak_tflops(precision) * 1e12, device.memory_gbps * 1e9, seconds)
    constants = scaled(base, point)
    if constants is None:
        return None  # faster than the datasheet's roofline: a miscount or a wrong row
    ratio = seconds / step_model_lib.seconds(base, point)
    origin = newest.get("origin") or "the layout tuner"
    return constants, (
        f"scaled to the step measured on {device.name} {newest.get('date', '(undated)')}: "
        f"{seconds:.4g} s a step of {point.batch} per device ({origin}; "
        f"{layout_cache.path()}), {ratio:.3g}x the catalogue's model")


def scaled(base: step_model_lib.Constants, point: step_model_lib.Point
           ) -> Optional[step_model_lib.Constants]:
    """`base` with every term slowed by the one factor f that lands it on `point`'s
    measured seconds, or None where no such constants exist.

    Its fractions of the peak and bandwidth are divided by f and its cost per op multiplied
    by it, the fractions capped at 1 (no device beats its datasheet): a step slower than
    the model keeps the model's shape exactly, and a faster one keeps it until a fraction
    reaches the datasheet, after which the rest of its speed is taken by the other terms
    (an XLA-fused step launches fewer ops). The bound: a step as fast as its roofline at
    the datasheet's peak and bandwidth with no cost per op is the fastest any f can give;
    a measured step faster than that is refused (None).
    """
    def at(factor: float) -> step_model_lib.Constants:
        return dataclasses.replace(base, compute=min(1.0, base.compute / factor),
                                   bandwidth=min(1.0, base.bandwidth / factor),
                                   op_seconds=base.op_seconds * factor)

    fastest = step_model_lib.seconds(
        dataclasses.replace(base, compute=1.0, bandwidth=1.0, op_seconds=0.0), point)
    if point.seconds <= fastest:
        return None
    # The modelled seconds grow with f: bisect log f between a bracket around the answer.
    low, high = math.log(1e-9), math.log(max(2.0, 2 * point.seconds /
                                             step_model_lib.seconds(base, point)))
    for _ in range(100):
        middle = (low + high) / 2
        if step_model_lib.seconds(at(math.exp(middle)), point) < point.seconds:
            low = middle
        else:
            high = middle
    return at(math.exp((low + high) / 2))
