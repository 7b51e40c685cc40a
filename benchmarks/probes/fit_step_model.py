"""Fits the step model (paragan_tf/scale/step_model.py) to measured steps and checks it on
the ones it was not fitted to: the table of measured against modelled seconds that the
scale plan's GPU numbers are to rest on.

    python benchmarks/probes/fit_step_model.py --measured=reference_step.json \
        --fit='*:8:1:1:*' --fit='*:64:1:1:*' --fit='128:256:8:1:bfloat16' \
        --output=step_model_fit.json

--measured is benchmarks/probes/reference_step.py's JSON (the reference network's steps
on a GPU, in PyTorch). For every resolution and precision in it this builds our network
from the config of that size (CONFIGS; or --gin_file at that resolution: nothing trains,
the weights' values do not matter)
and costs its traced step op by op (scale/roofline.py) at each point's batch,
accumulations and D steps. The points matching a --fit pattern (resolution:batch:
accumulations:D steps:precision, `*` for any) are fitted, per precision, with --fix'd
constants held; every point is then listed with its measured and modelled seconds, their
ratio, and whether it was fitted. The device is the catalogue row named in the JSON's
device (`NVIDIA H200` -> h200) unless --device says. Also printed per point: the
reference's FLOPs (torch's counter) over ours, which says the two networks are the same,
and our memory plan of the point (scale/memory.py: per replica, no recompute) beside the
reference's measured peak (torch.cuda.max_memory_allocated), with their ratio.

--fix_from_probes holds `bandwidth` at the device's measured copy bandwidth over its
catalogue bandwidth and `op_seconds` at its measured cost of one tiny op (the JSON's
`device_probes`), leaving `compute` to the steps: what one GPU session can pin that batches
alone cannot (paragan_tf/scale/step_model.py).

A float32 point on a GPU runs its matrix products as TF32 (reference_step.py sets it, as
TensorFlow does by default): its peak is the catalogue's TF32 peak (scale/devices.py).

The model's form is the GPU's (`--overlap`, the default: an update takes the longer of its
work and its ops' dispatch; --nooverlap adds them, as on a CPU). Each fit is repeated on
every combination of the fitted points' repeated timings (`seconds_per_iteration_all`),
and the constants' range over those refits is printed and stored as their uncertainty.
Every row says which regime the model puts the point in (compute-, memory- or
launch-bound), and `band` is the range of modelled over measured seconds over all rows.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import itertools
import json
import os
import sys
from typing import Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("PARAGAN_TF_LAYOUT_TUNE", "off")

from paragan_tf import errors  # noqa: E402  pylint: disable=wrong-import-position
from paragan_tf.measure import built  # noqa: E402  pylint: disable=wrong-import-position
from paragan_tf.scale import devices  # noqa: E402  pylint: disable=wrong-import-position
from paragan_tf.scale import memory  # noqa: E402  pylint: disable=wrong-import-position
from paragan_tf.scale import roofline  # noqa: E402  pylint: disable=wrong-import-position
from paragan_tf.scale import step_model  # noqa: E402  pylint: disable=wrong-import-position
from paragan_tf.train import experiment  # noqa: E402  pylint: disable=wrong-import-position

PRECISIONS = {"bfloat16": "mixed_bfloat16", "float32": "float32"}
# The reference's network at each size it is timed at (docs/scale.md's table of configs).
CONFIGS = {32: "gin/biggan_cifar10.gin", 64: "gin/biggan_imagenet64.gin",
           128: "gin/biggan_imagenet128.gin", 256: "gin/biggan_256.gin"}
# At most this many combinations of the points' repeated timings are refitted for the
# constants' spread (every one, up to it).
MOST_REFITS = 64


def _spec(row: dict) -> str:
    return (f"{row['resolution']}:{row['batch']}:{row['accumulations']}:{row['d_steps']}:"
            f"{row['precision']}")


def _cost_and_memory(gin_files, bindings, resolution: int, precision: str
                     ) -> Tuple[roofline.StepCost, memory.Plan]:
    if gin_files:
        bindings = bindings + [f"dataset.resolution = {resolution}"]
    elif resolution in CONFIGS:
        gin_files = [CONFIGS[resolution]]
    else:
        raise SystemExit(f"no config of {resolution} px: give --gin_file")
    experiment.parse(gin_files, bindings + [f"layout.precision = '{precision}'"],
                     finalize=False)
    return built.step_cost_and_memory()


def _device_name(text: str, catalogue: devices.Catalogue) -> str:
    found = [name for name, row in catalogue.devices.items()
             if row.family == "gpu" and name in text.lower()]
    if len(found) != 1:
        raise SystemExit(f"device {text!r}: name its catalogue row with --device")
    return found[0]


def _from_probes(measured: dict, device: devices.Device, path: str) -> dict:
    """bandwidth and op_seconds as the device's probes measured them (module doc)."""
    probes = measured.get("device_probes")
    if not probes:
        raise SystemExit(f"{path}: no device_probes (run reference_step.py without "
                         f"--no_probes)")
    held = dict(bandwidth=min(1.0, probes["copy_gbps"] / device.memory_gbps),
                op_seconds=probes["op_seconds"])
    print(f"held from {path}'s probes: bandwidth {held['bandwidth']:.3f} "
          f"({probes['copy_gbps']:.0f} of {device.memory_gbps:.0f} GB/s), "
          f"{held['op_seconds'] * 1e6:.2f} us per op")
    return held


def _row(point: step_model.Point, row: dict, constants, fitted: bool,
         plan: memory.Plan) -> dict:
    """One point's line of the table, printed, and its JSON row."""
    modelled = step_model.seconds(constants, point) if constants else None
    planned = dataclasses.replace(plan, accumulation=point.accumulation).total_bytes(
        point.batch, recompute=False)
    peak = row.get("peak_memory_bytes")
    ours = point.cost.totals(point.batch, point.d_steps, point.accumulation)["flops"]
    out = dict(point=point.name, device=row["device"], fitted=fitted,
               regime=step_model.regime(constants, point) if constants else None,
               measured_seconds=point.seconds, modelled_seconds=modelled,
               ratio=modelled / point.seconds if modelled else None,
               measured_fraction_of_peak=step_model.fraction_of_peak(point, point.seconds),
               reference_flops_over_ours=row["flops_per_iteration"] / ours,
               peak_memory_bytes=peak, planned_memory_bytes=planned,
               memory_ratio=planned / peak if peak else None)
    print(f"  {out['point']:22s} measured {point.seconds:8.4f} s  "
          + (f"modelled {modelled:8.4f} s  ratio {out['ratio']:5.2f}" if modelled else
             "not modelled") + f"{'  (fitted)' if fitted else '  (held out)'}  "
          + (f"{out['regime']}  " if constants else "") +
          f"{out['measured_fraction_of_peak']:.1%} of the peak  FLOPs ref/ours "
          f"{out['reference_flops_over_ours']:.3f}  memory planned "
          f"{planned / memory.GIB:.2f} GiB" + (
              f", measured {peak / memory.GIB:.2f} GiB (ratio {out['memory_ratio']:.2f})"
              if peak else " (not measured)"))
    return out


def _spread(chosen, fixed: dict, overlap: bool) -> dict:
    """The fitted constants' range when refitted on each combination of the points' repeated
    timings (a point without repeats keeps its one)."""
    repeats = [r.get("seconds_per_iteration_all") or [r["seconds_per_iteration"]]
               for _, r in chosen]
    fits = []
    for seconds in itertools.islice(itertools.product(*repeats), MOST_REFITS):
        fits.append(step_model.fit([dataclasses.replace(p, seconds=s)
                                    for (p, _), s in zip(chosen, seconds)], fixed, overlap))
    free = [n for n in step_model.NAMES if n not in fixed]
    return dict(refits=len(fits), range={
        n: [min(getattr(c, n) for c in fits), max(getattr(c, n) for c in fits)] for n in free})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measured", action="append", required=True)
    parser.add_argument("--fit", action="append", required=True,
                        help="resolution:batch:accumulations:D steps:precision, * for any")
    parser.add_argument("--fix", action="append", default=[],
                        help="name=value: a constant held in every fit (compute=0.5)")
    parser.add_argument("--fix_from_probes", action="store_true",
                        help="hold bandwidth and op_seconds at the JSON's device_probes")
    parser.add_argument("--gin_file", action="append", default=None)
    parser.add_argument("--gin_bindings", action="append", default=[])
    parser.add_argument("--device", default=None, help="the catalogue row measured")
    parser.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=True,
                        help="the GPU's form: an update takes max(work, dispatch)")
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    fixed = {k: float(v) for k, _, v in (f.partition("=") for f in args.fix)}
    catalogue = devices.catalogue()
    rows = []
    for path in args.measured:
        with open(path) as f:
            measured = json.load(f)
        name = args.device or _device_name(measured["device"], catalogue)
        rows += [dict(r, device=name, source=path) for r in measured["points"]
                 if r.get("status") == "ok"]
        if args.fix_from_probes:
            fixed.update(_from_probes(measured, catalogue.device(name), path))
    costs, plans, points = {}, {}, []
    for row in rows:
        key = (row["resolution"], row["precision"])
        if key not in costs:
            print(f"tracing our step at {key[0]} px, {key[1]}", flush=True)
            costs[key], plans[key] = _cost_and_memory(
                args.gin_file, args.gin_bindings, key[0], PRECISIONS[key[1]])
        device = catalogue.device(row["device"])
        peak = device.peak_tflops(PRECISIONS[row["precision"]])
        points.append(step_model.Point(
            _spec(row), costs[key], row["batch"], row["accumulations"], row["d_steps"],
            peak * 1e12, device.memory_gbps * 1e9, row["seconds_per_iteration"]))
    fitted_specs = {p.name for p in points if any(fnmatch.fnmatch(p.name, f) for f in args.fit)}
    result = dict(command=" ".join(sys.argv), measured=args.measured, fixed=fixed,
                  constants={}, not_fitted={}, rows=[])
    for precision in sorted({r["precision"] for r in rows}):
        chosen = [(p, r) for p, r in zip(points, rows)
                  if r["precision"] == precision and p.name in fitted_specs]
        try:
            constants = step_model.fit([p for p, _ in chosen], fixed, args.overlap)
        except errors.ConfigError as e:  # its points are still listed, unmodelled
            constants, result["not_fitted"][precision] = None, str(e)
            print(f"{precision}: not fitted: {e}")
        else:
            result["constants"][precision] = dataclasses.asdict(constants)
            spread = _spread(chosen, fixed, args.overlap)
            result["constants"][precision]["spread"] = spread
            print(f"{precision}: compute {constants.compute:.3f} of the peak, bandwidth "
                  f"{constants.bandwidth:.3f}, {constants.op_seconds * 1e6:.2f} us per op; "
                  f"over {spread['refits']} refits on the repeated timings: " + ", ".join(
                      f"{name} {low:.4g}-{high:.4g}" for name, (low, high) in
                      spread["range"].items()))
        for point, row in zip(points, rows):
            if row["precision"] == precision:
                result["rows"].append(_row(
                    point, row, constants, point.name in fitted_specs,
                    plans[(row["resolution"], row["precision"])]))
    ratios = [r["ratio"] for r in result["rows"] if r["ratio"]]
    if ratios:
        result["band"] = [min(ratios), max(ratios)]
        print(f"modelled / measured over {len(ratios)} points: {min(ratios):.3f} to "
              f"{max(ratios):.3f}")
    if args.output:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
