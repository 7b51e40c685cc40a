"""The step model (paragan_tf/scale/step_model.py) on the one device at hand, this CPU, with
our own TensorFlow step: fitted to some batches and resolutions, checked on the others.

    .venv/bin/python benchmarks/probes/step_model_here.py \
        --output=benchmarks/results/step_model_here.json

Times `--steps` train steps (after 2 warm-up steps) of gin/mnist_default.gin (32 px) and
gin/fashion_mnist64.gin (64 px) at each --batch, float32 (gin/layouts/fp32.gin), with the
step benchmark's timer (benchmarks/step.py), and costs each step's ops (scale/roofline.py).
The device: this CPU's theoretical float32 peak (scale/cpu_peak.py) and, for its memory
bandwidth, what one thread copying 512 MiB with numpy reaches times the physical cores (a
reading of ours, not a datasheet's: the fitted `bandwidth` fraction absorbs its error). The
step model is fitted on the --fit batches of both configs and every point is printed with
its measured and modelled seconds and their ratio, then the ratios one efficiency fitted
to the same points gives (the plan's form without the model). Run it alone: a loaded
machine times slower steps. Its results are in docs/scale.md, under "The roofline".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("PARAGAN_TF_LAYOUT_TUNE", "off")

import numpy as np  # noqa: E402  pylint: disable=wrong-import-position

from benchmarks import machine  # noqa: E402  pylint: disable=wrong-import-position
from benchmarks import step as step_bench  # noqa: E402  pylint: disable=wrong-import-position
from paragan_tf.measure import built  # noqa: E402  pylint: disable=wrong-import-position
from paragan_tf.scale import cpu_peak  # noqa: E402  pylint: disable=wrong-import-position
from paragan_tf.scale import roofline  # noqa: E402  pylint: disable=wrong-import-position
from paragan_tf.scale import step_model  # noqa: E402  pylint: disable=wrong-import-position
from paragan_tf.train import experiment  # noqa: E402  pylint: disable=wrong-import-position

CONFIGS = ("gin/mnist_default.gin", "gin/fashion_mnist64.gin")


def copy_bandwidth(mib: int = 512, repeats: int = 5) -> float:
    """Bytes/s one thread moves copying `mib` MiB (read + write), the best of `repeats`."""
    src = np.ones(mib * 2 ** 20 // 4, np.float32)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - began)
    return 2 * src.nbytes / best


def step_cost(gin_file: str, bindings) -> roofline.StepCost:
    experiment.parse([gin_file, "gin/layouts/fp32.gin"], bindings, finalize=False)
    return built.step_cost()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, action="append", default=None)
    parser.add_argument("--fit", type=int, action="append", default=None,
                        help="batches fitted (default: the smallest and the largest)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    batches = args.batch or [4, 16, 64]
    fitted_batches = set(args.fit or [min(batches), max(batches)])
    peak = cpu_peak.theoretical_peak()
    bandwidth = copy_bandwidth() * peak["cores"]
    print(f"this CPU: {peak['fp32_gflops']:.1f} GFLOP/s float32 peak ({peak['isa_row']}), "
          f"{bandwidth / 1e9:.1f} GB/s copy bandwidth x {peak['cores']} cores", flush=True)
    points, rows = [], []
    for gin_file in CONFIGS:
        for batch in batches:
            bindings = [f"train.batch_size = {batch}"]
            timed = step_bench.time_layout(gin_file, "fp32", bindings, steps=args.steps,
                                           progress=lambda _: None)
            cfg = experiment.Settings.read().train
            cost = step_cost(gin_file, bindings)
            name = f"{os.path.basename(gin_file)} batch {batch}"
            points.append(step_model.Point(name, cost, batch, cfg.accumulation, cfg.d_steps,
                                           peak["fp32_gflops"] * 1e9, bandwidth,
                                           timed["sec_per_step"]))
            rows.append(dict(config=gin_file, batch=batch, fitted=batch in fitted_batches,
                             measured_seconds=timed["sec_per_step"],
                             step_times=timed["step_times"]))
            print(f"  {name}: {timed['sec_per_step']:.3f} s/step", flush=True)
    constants = step_model.fit([p for p, r in zip(points, rows) if r["fitted"]])
    print(f"fitted on batches {sorted(fitted_batches)}: compute {constants.compute:.3f}, "
          f"bandwidth {constants.bandwidth:.3f}, {constants.op_seconds * 1e6:.1f} us per op")
    for point, row in zip(points, rows):
        row.update(modelled_seconds=step_model.seconds(constants, point),
                   ops=point.cost.totals(point.batch, point.d_steps, point.accumulation)["ops"],
                   fraction_of_peak=step_model.fraction_of_peak(point, point.seconds))
        row["ratio"] = row["modelled_seconds"] / row["measured_seconds"]
        print(f"  {point.name:32s} measured {point.seconds:7.3f} s  modelled "
              f"{row['modelled_seconds']:7.3f} s  ratio {row['ratio']:.2f}"
              f"{'  (fitted)' if row['fitted'] else ''}  {row['fraction_of_peak']:.1%} of "
              f"the peak")
    # The plan's old form for contrast: one efficiency (the geometric mean of the fitted
    # points' shares of the peak), the step at that share of the peak at every batch.
    fitted_shares = [r["fraction_of_peak"] for r in rows if r["fitted"]]
    efficiency = float(np.exp(np.mean(np.log(fitted_shares))))
    for row in rows:
        row["one_efficiency_ratio"] = row["fraction_of_peak"] / efficiency
    print(f"one efficiency fitted to the same points ({efficiency:.1%} of the peak): ratios "
          + ", ".join(f"{r['one_efficiency_ratio']:.2f}" for r in rows))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(dict(machine=machine.describe(), command=" ".join(sys.argv),
                           date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                           peak=peak, bandwidth_bytes_per_sec=bandwidth,
                           constants=dataclasses.asdict(constants),
                           one_efficiency=efficiency, points=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
