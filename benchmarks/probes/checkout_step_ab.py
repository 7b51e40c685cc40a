"""Seconds per train step of one gin file by two checkouts, interleaved A B A B: the step
before and after a change, on the same machine in one run (the machine is shared and
noisy, so only a ratio measured this way means anything).

    python benchmarks/probes/checkout_step_ab.py --before=/tmp/before --after=. \
        --gin_file=gin/pix2pix_fashion_mnist_edges.gin --output=runs/step_ab.json

Each round runs each checkout's own `bin/bench.py --suite=step` (its paragan_tf first on
PYTHONPATH, this virtual environment) with --layouts and --steps as given, and keeps its
median seconds per step; the JSON has every round's and the ratio of the medians.
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


def seconds_per_step(checkout: str, gin_file: str, layout: str, steps: int,
                     bindings) -> float:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([sys.executable, os.path.join(checkout, "bin", "bench.py"),
                        "--suite=step", f"--gin_file={gin_file}", f"--layouts={layout}",
                        f"--steps={steps}", f"--output={out.name}",
                        *[f"--gin_bindings={b}" for b in bindings]],
                       cwd=checkout, check=True, capture_output=True,
                       env=dict(os.environ, PYTHONPATH=checkout))
        with open(out.name) as f:
            return json.load(f)["layouts"][layout]["sec_per_step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--gin_file", required=True)
    parser.add_argument("--gin_bindings", action="append", default=[])
    parser.add_argument("--layout", default="fp32")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    record = dict(machine=machine.describe(), gin_file=args.gin_file, layout=args.layout,
                  bindings=args.gin_bindings, steps=args.steps, rounds={"before": [],
                                                                         "after": []})
    for round_index in range(args.rounds):
        for name in ("before", "after"):
            seconds = seconds_per_step(os.path.abspath(getattr(args, name)), args.gin_file,
                                       args.layout, args.steps, args.gin_bindings)
            record["rounds"][name].append(seconds)
            print(f"round {round_index + 1}: {name} {seconds:.4f} s/step", flush=True)
    medians = {k: statistics.median(v) for k, v in record["rounds"].items()}
    record.update(median=medians, after_over_before=medians["after"] / medians["before"])
    with open(args.output, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    print(json.dumps({k: record[k] for k in ("median", "after_over_before")}))


if __name__ == "__main__":
    main()
