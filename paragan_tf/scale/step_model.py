"""How long a train step takes on a device: the roofline of its ops on the device as it
performs, not as its datasheet says, and what dispatching each op costs.

One efficiency per device family cannot say it: the same network reaches different
fractions of a GPU's peak at different per-device batches (a small batch leaves the
matrix units idle between many small ops), and most of a BigGAN step's ops are bound by
memory, not compute (docs/scale.md, "The roofline"). So, from each op's FLOPs and bytes
moved at the precision's dtypes (scale/roofline.py), for each update of the step:

    work     = sum over its ops of max(FLOPs / (compute x P), bytes / (bandwidth x W))
    dispatch = ops x op_seconds
    seconds  = work + dispatch            where one processor does both (a CPU)
               max(work, dispatch)        where a host issues ops to a device that runs
                                          them as they come (`overlap`: a GPU)

with P the device's matrix peak at the precision and W its memory bandwidth (the
catalogue's, scale/devices.py), and the step the sum of its updates. Three constants per
device family and precision: `compute` and `bandwidth`, the fractions of P and W an op
reaches at best, and `op_seconds`, what issuing one op costs (on a CPU, TensorFlow's
executor per op; on a GPU the host's time per launched op, which the device hides while
its queue holds work and waits on when it does not: a launch-bound step). An update is
one unit of overlap because each ends in a synchronisation (its loss is read).

`op_seconds` is per op of our traced, unfused TensorFlow graph (scale/roofline.py counts
them). A measured step of another program (the reference network in PyTorch) fits it as
that program's time per op of ours: its own kernel count is absorbed into the constant,
which holds for networks of its shape. An XLA-compiled TensorFlow step launches fewer
kernels than our graph has ops: where one is measured, the self-calibration
(scale/measured.py) takes its speed in `op_seconds` too.

`fit` finds the constants from measured steps: the reference network's on a GPU
(benchmarks/probes/reference_step.py, fitted by benchmarks/probes/fit_step_model.py) or
ours on this CPU (benchmarks/probes/step_model_here.py). A sweep of batches of one network
scales both bounds alike: it pins `op_seconds`, and `compute` and `bandwidth` only as a pair
that predicts alike (tests/scale/test_step_model.py), which several resolutions or a fixed
constant (`fit(fixed=...)`) separate. The scale plan costs a step with it wherever the
catalogue has its constants (scale/devices.py: given in gin, else fitted: GPU tensor cores
at bfloat16 and at TF32, each from two measured H200 steps; docs/scale.md).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, Optional, Sequence

import numpy as np

from paragan_tf.errors import ConfigError
from paragan_tf.scale import roofline

NAMES = ("compute", "bandwidth", "op_seconds")
# The fit's search box: fractions in (0, 1] (a device cannot beat its datasheet), op
# costs from none to 1 ms (a launch is ~5 us on a GPU, a host round trip ~100 us).
_LOWEST_FRACTION = 1e-4
_MOST_OP_SECONDS = 1e-3


@dataclasses.dataclass(frozen=True)
class Constants:
    """A device family's constants at one precision (see the module doc); `overlap`: the
    device runs ops while its host issues later ones (a GPU), not one after the other."""

    compute: float
    bandwidth: float
    op_seconds: float
    overlap: bool = False

    def __post_init__(self):
        if not (0 < self.compute <= 1 and 0 < self.bandwidth <= 1 and self.op_seconds >= 0):
            raise ConfigError(f"step model constants {self}: compute and bandwidth are "
                              f"fractions in (0, 1], op_seconds is >= 0")


@dataclasses.dataclass(frozen=True)
class Point:
    """One step on one device, measured (or published): what the model is fitted to and
    checked against. `batch` is per device and micro-batch."""

    name: str
    cost: roofline.StepCost
    batch: int
    accumulation: int
    d_steps: int
    peak_flops: float  # FLOP/s: the device's matrix peak at the step's precision
    bandwidth: float  # bytes/s: the device's memory bandwidth
    seconds: float  # measured; 0 for a point only to be predicted


REGIMES = ("compute-bound", "memory-bound", "launch-bound")


def _updates(constants: Constants, point: Point):
    """Per update of the step: (how often it runs, its compute-bound and memory-bound ops'
    seconds, its dispatch seconds)."""
    for name, times in point.cost.weights(point.d_steps, point.accumulation).items():
        update = point.cost.updates[name]
        compute, memory = update.bound_seconds(point.batch,
                                               constants.compute * point.peak_flops,
                                               constants.bandwidth * point.bandwidth)
        yield times, compute, memory, update.ops * constants.op_seconds


def terms(constants: Constants, point: Point) -> Dict[str, float]:
    """The model's seconds for `point`'s step by what binds them, one entry per REGIMES:
    an overlapped update is all launch-bound when its dispatch outlasts its work, and all
    work (its compute- and memory-bound ops) otherwise."""
    out = dict.fromkeys(REGIMES, 0.0)
    for times, compute, memory, dispatch in _updates(constants, point):
        if constants.overlap and dispatch > compute + memory:
            out["launch-bound"] += times * dispatch
            continue
        out["compute-bound"] += times * compute
        out["memory-bound"] += times * memory
        if not constants.overlap:
            out["launch-bound"] += times * dispatch
    return out


def seconds(constants: Constants, point: Point) -> float:
    """The model's seconds for `point`'s step (see the module doc)."""
    return sum(terms(constants, point).values())


def regime(constants: Constants, point: Point) -> str:
    """What most of the step's modelled seconds are bound by: one of REGIMES."""
    found = terms(constants, point)
    return max(found, key=found.get)


def fraction_of_peak(point: Point, step_seconds: float) -> float:
    """The step's matrix FLOPs over what the device's peak does in `step_seconds`."""
    flops = point.cost.totals(point.batch, point.d_steps, point.accumulation)["flops"]
    return flops / (point.peak_flops * step_seconds)


def fit(points: Sequence[Point], fixed: Optional[Dict[str, float]] = None,
        overlap: bool = False) -> Constants:
    """The constants (less those `fixed`) that minimise the squared log ratios of the
    model's seconds to the measured ones over `points`: a factor too slow weighs as a
    factor too fast, and a fast point as much as a slow one. `overlap`: the model's form
    (see the module doc)."""
    fixed = dict(fixed or {})
    unknown = set(fixed) - set(NAMES)
    if unknown:
        raise ConfigError(f"step model: unknown constants {sorted(unknown)}; known: {NAMES}")
    free = [name for name in NAMES if name not in fixed]
    if not free:  # every constant given: the model to check them with
        return Constants(**fixed, overlap=overlap)
    measured = [p for p in points if p.seconds > 0]
    if len(measured) < len(free):
        raise ConfigError(f"step model: {len(measured)} measured points cannot fit "
                          f"{len(free)} constants ({free}); measure more or fix some")
    # Searched as log10 fractions and microseconds, so that each axis is evenly scaled.
    lower = {"compute": math.log10(_LOWEST_FRACTION), "bandwidth": math.log10(_LOWEST_FRACTION),
             "op_seconds": 0.0}
    upper = {"compute": 0.0, "bandwidth": 0.0, "op_seconds": _MOST_OP_SECONDS * 1e6}

    def constants(x) -> Constants:
        values = dict(fixed, **dict(zip(free, x)))
        for name in ("compute", "bandwidth"):
            if name not in fixed:
                values[name] = 10.0 ** values[name]
        if "op_seconds" not in fixed:
            values["op_seconds"] *= 1e-6
        return Constants(**values, overlap=overlap)

    def residuals(x):
        c = constants(x)
        return [math.log(seconds(c, p) / p.seconds) for p in measured]

    from scipy import optimize  # pylint: disable=import-outside-toplevel  (plans never fit)
    # Started from several fractions and op costs: where a bound or the dispatch binds no
    # update, the fit is flat in its constant and would stay wherever it started.
    fits = [optimize.least_squares(
        residuals, [{"op_seconds": op_us}.get(n, math.log10(fraction)) for n in free],
        bounds=([lower[n] for n in free], [upper[n] for n in free]),
        x_scale=1.0, xtol=1e-12, ftol=1e-12, gtol=1e-12)
        for fraction in (0.5, 0.05, 0.005) for op_us in (1.0, 5.0, 30.0, 200.0)]
    return constants(min(fits, key=lambda found: found.cost).x)


def ratios(constants: Constants, points: Sequence[Point]) -> np.ndarray:
    """The model's seconds over the measured ones, per measured point."""
    return np.array([seconds(constants, p) / p.seconds for p in points if p.seconds > 0])
