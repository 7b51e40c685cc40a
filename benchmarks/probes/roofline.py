"""The roofline of a gin config's train step on catalogue devices (scale/roofline.py): what
its FLOPs and its bytes moved cost at the datasheet peaks, beside a measured step time.

    .venv/bin/python benchmarks/probes/roofline.py --gin_file=gin/biggan_imagenet128.gin \
        --batch=256 --accumulation=8 --d_steps=1 --device=h200 --measured_seconds=5.21

Builds the models at the layout's precision (--precision, default mixed_bfloat16) on this
host (nothing trains), traces both updates and prints, for one step of `--accumulation`
micro-batches of `--batch` examples per device with `--d_steps` D updates: its matrix
FLOPs, the bytes its ops move, its op count, and on each --device the three bounds:
compute (FLOPs / peak), memory (bytes / bandwidth) and the roofline (each op at the
larger of the two, summed), with the fraction of the peak each bound would reach. With
--measured_seconds (a timing of the same step, e.g. the reference network's on a GPU:
benchmarks/probes/reference_step.py) it prints the measured fraction of the peak and
the measured time over the roofline bound. A bound, not a prediction: our TensorFlow
graph's ops, unfused, at datasheet peaks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("PARAGAN_TF_LAYOUT_TUNE", "off")

from paragan_tf.measure import built  # noqa: E402  pylint: disable=wrong-import-position
from paragan_tf.scale import devices  # noqa: E402  pylint: disable=wrong-import-position
from paragan_tf.train import experiment  # noqa: E402  pylint: disable=wrong-import-position


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gin_file", action="append", required=True)
    parser.add_argument("--gin_bindings", action="append", default=[])
    parser.add_argument("--precision", default="mixed_bfloat16")
    parser.add_argument("--batch", type=int, action="append", required=True,
                        help="examples per device per micro-batch (repeat for several)")
    parser.add_argument("--accumulation", type=int, default=1)
    parser.add_argument("--d_steps", type=int, default=1)
    parser.add_argument("--device", action="append", default=[], help="catalogue devices")
    parser.add_argument("--measured_seconds", type=float, default=None,
                        help="a measured step time for the (single) --batch and --device")
    parser.add_argument("--output", default=None, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    experiment.parse(args.gin_file, args.gin_bindings + [
        f"layout.precision = '{args.precision}'"], finalize=False)
    cost = built.step_cost()
    catalogue = devices.catalogue()
    rows = []
    for batch in args.batch:
        totals = cost.totals(batch, args.d_steps, args.accumulation)
        print(f"batch {batch} x {args.accumulation}, {args.d_steps} D step(s), "
              f"{args.precision}: {totals['flops'] / 1e12:.1f} TFLOP, "
              f"{totals['bytes'] / 1e12:.2f} TB moved, {totals['ops']:,} ops "
              f"({totals['flops'] / totals['bytes']:.0f} FLOP/byte)")
        for name in args.device:
            device = catalogue.device(name)
            peak = device.peak_tflops(args.precision) * 1e12
            bandwidth = device.memory_gbps * 1e9
            if not peak or not bandwidth:
                raise SystemExit(f"{name}: no {args.precision} peak or no memory bandwidth "
                                 f"in the catalogue")
            bound = cost.seconds(batch, args.d_steps, args.accumulation, peak, bandwidth)
            row = dict(device=name, batch=batch, accumulation=args.accumulation,
                       d_steps=args.d_steps, precision=args.precision, **totals,
                       compute_seconds=totals["flops"] / peak,
                       memory_seconds=totals["bytes"] / bandwidth, roofline_seconds=bound,
                       roofline_fraction_of_peak=totals["flops"] / peak / bound)
            line = (f"  {name}: compute {row['compute_seconds']:.3g} s, memory "
                    f"{row['memory_seconds']:.3g} s, roofline {bound:.3g} s "
                    f"({row['roofline_fraction_of_peak']:.0%} of the peak)")
            if args.measured_seconds:
                row.update(measured_seconds=args.measured_seconds,
                           measured_fraction_of_peak=totals["flops"] / peak /
                           args.measured_seconds,
                           measured_over_roofline=args.measured_seconds / bound)
                line += (f"; measured {args.measured_seconds:.3g} s "
                         f"({row['measured_fraction_of_peak']:.0%} of the peak), "
                         f"{row['measured_over_roofline']:.2f}x the roofline")
            print(line)
            rows.append(row)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(dict(command=" ".join(sys.argv), rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
