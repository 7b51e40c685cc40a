"""Our pix2pix step against the reference's, interleaved in one run (reference, ours,
reference, ours, ...), both precisions on both sides, at the paper's facades setting (256 px,
batch 1, ngf = ndf = 64) and the README recipe's (64 px, batch 16, width 32): the ratio is
measured, not remembered (docs/benchmarks.md, "pix2pix against its reference").

    python benchmarks/probes/pix2pix_vs_reference.py --torch_python=/tmp/torchvenv/bin/python \
        --reference_dir=/tmp/pix2pix --rounds=2 --output=benchmarks/results/pix2pix_vs_ref.json

The reference side is benchmarks/probes/pix2pix_reference_step.py in the scratch venv that
has torch (never a dependency of ours), on random tensors; ours is `bin/bench.py
--suite=step` on gin/pix2pix_fashion_mnist_edges.gin at the point's size, batch and widths,
on random pairs padded to the size (`synthetic_pairs`: no decoding or resizing beside the
step, as the reference's tensors), with the layouts of --layouts (gin/layouts/<name>.gin),
each in a process of its own. Per side, point and
precision: every round's median seconds per iteration; the JSON's `best` is each side's
fastest precision per point, and `ours_over_reference` their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from benchmarks import machine  # noqa: E402  pylint: disable=wrong-import-position

GIN = "gin/pix2pix_fashion_mnist_edges.gin"
PRECISION_OF = {"fp32": "float32", "bf16": "bfloat16"}


def _json_of(command, **kwargs) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run(command + [f"--output={out.name}"], check=True, capture_output=True,
                       **kwargs)
        with open(out.name) as f:
            return json.load(f)


def reference(args, point: str) -> dict:
    """{precision: seconds} of the reference at `point` (resolution:batch:width)."""
    found = _json_of([args.torch_python,
                      os.path.join(REPO, "benchmarks", "probes", "pix2pix_reference_step.py"),
                      f"--reference_dir={args.reference_dir}", f"--points={point}",
                      f"--iterations={args.iterations}"])
    return {p["precision"]: p["seconds"] for p in found["points"]}


def ours(args, point: str, layout: str) -> dict:
    resolution, batch, width = point.split(":")
    bindings = [f"dataset.resolution={resolution}", f"train.batch_size={batch}",
                f"Pix2PixGenerator.ch={width}", f"PatchDiscriminator.ch={width}",
                "dataset.name='synthetic_pairs'", "dataset.fit='pad'"]
    found = _json_of([sys.executable, os.path.join(REPO, "bin", "bench.py"), "--suite=step",
                      f"--gin_file={GIN}", f"--layouts={layout}",
                      f"--steps={args.iterations}",
                      *[f"--gin_bindings={b}" for b in bindings]], cwd=REPO)
    row = found["layouts"][layout]
    return dict(seconds=row["sec_per_step"], precision=row["layout"]["precision"],
                xla=row["layout"]["xla"], mfu=row.get("mfu"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch_python", required=True)
    parser.add_argument("--reference_dir", required=True)
    parser.add_argument("--points", default="256:1:64,64:16:32")
    parser.add_argument("--layouts", default="fp32,bf16")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    record = dict(machine=machine.describe(), points={})
    for point in args.points.split(","):
        rows = record["points"][point] = dict(reference={}, ours={})
        for round_index in range(args.rounds):
            for precision, seconds in reference(args, point).items():
                rows["reference"].setdefault(precision, []).append(seconds)
                print(f"round {round_index + 1} {point} reference {precision}: {seconds:.4f} s",
                      flush=True)
            for layout in args.layouts.split(","):
                got = ours(args, point, layout)
                rows["ours"].setdefault(layout, []).append(got)
                print(f"round {round_index + 1} {point} ours {layout} ({got['precision']}, XLA "
                      f"{got['xla']}): {got['seconds']:.4f} s", flush=True)
        medians = {side: {name: statistics.median(
            v if side == "reference" else [r["seconds"] for r in v])
            for name, v in rows[side].items()} for side in ("reference", "ours")}
        best = {side: min(m.items(), key=lambda kv: kv[1]) for side, m in medians.items()}
        rows.update(medians=medians, best=best,
                    ours_over_reference=best["ours"][1] / best["reference"][1])
        print(f"{point}: best reference {best['reference']}, ours {best['ours']}, ratio "
              f"{rows['ours_over_reference']:.2f}", flush=True)
    with open(args.output, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
