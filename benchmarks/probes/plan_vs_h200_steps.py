"""bin/plan.py on h200x1 against every measured H200 step of the reference network: the plan
a user gets, not the step model alone (docs/scale.md, "The step model on GPUs").

    .venv/bin/python benchmarks/probes/plan_vs_h200_steps.py --output=plan_vs_h200.json

For each point of the JSONs below this runs `bin/plan.py --devices=h200x1` on the point's
config (CONFIGS) with its batch, accumulations, D steps and precision bound in gin, and
prints the planned seconds per step beside the measured ones, with the regime and the band
the plan line carries. The plan chooses its own micro-batch where memory allows a larger
one (its row says which); the seconds compared are per step of the same images.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MEASURED = ("benchmarks/results/reference_step_h200_reported.json",
            "benchmarks/results/reference_steps_h200_cifar10.json",
            "benchmarks/results/reference_steps_h200_imagenet128_float32.json")
CONFIGS = {32: "gin/biggan_cifar10.gin", 128: "gin/biggan_imagenet128.gin"}
PRECISIONS = {"bfloat16": "mixed_bfloat16", "float32": "float32"}


def plan_point(point: dict) -> dict:
    """bin/plan.py's h200x1 row for one measured point."""
    bindings = [f"train.batch_size={point['batch']}",
                f"train.accumulation={point['accumulations']}",
                f"train.d_steps={point['d_steps']}",
                f"layout.precision='{PRECISIONS[point['precision']]}'"]
    with tempfile.TemporaryDirectory() as tmp:
        output = os.path.join(tmp, "plan.json")
        subprocess.run([sys.executable, os.path.join(REPO, "bin", "plan.py"),
                        f"--gin_file={CONFIGS[point['resolution']]}", "--devices=h200x1",
                        f"--output={output}"] + [f"--gin_bindings={b}" for b in bindings],
                       cwd=REPO, check=True, env=dict(os.environ, PARAGAN_TF_LAYOUT_TUNE="off"),
                       stdout=subprocess.DEVNULL)
        with open(output) as f:
            plan = json.load(f)
    (row,) = [r for r in plan["plans"] if r["target"] == "h200x1"]
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    results = []
    for path in MEASURED:
        with open(os.path.join(REPO, path)) as f:
            points = json.load(f)["points"]
        for point in points:
            row = plan_point(point)
            planned = row["seconds"]["step"]
            name = (f"{point['resolution']}:{point['batch']}:{point['accumulations']}:"
                    f"{point['d_steps']}:{point['precision']}")
            result = dict(point=name, measured_seconds=point["seconds_per_iteration"],
                          planned_seconds=planned,
                          ratio=planned / point["seconds_per_iteration"],
                          regime=row.get("regime"), model_band=row.get("model_band"),
                          micro_batch=row["micro_batch"], accumulation=row["accumulation"],
                          efficiency_source=row["efficiency_source"])
            results.append(result)
            print(f"{name:22s} measured {result['measured_seconds']:.4f} s  planned "
                  f"{planned:.4f} s  ratio {result['ratio']:.2f}  {result['regime']}  "
                  f"(as {row['accumulation']} x {row['micro_batch']})", flush=True)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(dict(command=" ".join(sys.argv), rows=results), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
