"""One training run of a pix2pix recipe by a given checkout, summarised as JSON: its seconds,
its seconds per step, its layout, and every in-loop evaluation (validation L1, PSNR, SSIM,
FID): the README recipe's numbers before and after a change (docs/benchmarks.md, "pix2pix").

    python benchmarks/probes/pix2pix_recipe.py --checkout=/tmp/before --model_dir=/tmp/p/before \
        --output=benchmarks/results/pix2pix_recipe_before.json
    python benchmarks/probes/pix2pix_recipe.py --checkout=. --model_dir=/tmp/p/after \
        --gin_bindings=train.total_steps=1100 --output=...

The checkout's own bin/train.py runs with the checkout first on PYTHONPATH (its paragan_tf,
not the installed one), in this virtual environment, with the gin file as that checkout has
it. Seconds per step: the median over the progress windows after the first (tracing) of
real images per step over `perf/step_images_per_sec` (the step's own time, no input wait).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from benchmarks import machine  # noqa: E402  pylint: disable=wrong-import-position


def _lines(path: str) -> list:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def summarise(model_dir: str, images_per_step: int) -> dict:
    logs = [r for r in _lines(os.path.join(model_dir, "stats.jsonl")) if r["kind"] == "log"]
    per_step = [images_per_step / r["perf/step_images_per_sec"] for r in logs[1:]]
    with open(os.path.join(model_dir, "metrics.json")) as f:
        metrics = json.load(f)
    with open(os.path.join(model_dir, "train_result.json")) as f:
        result = json.load(f)
    keys = ("l1", "l1_identity", "psnr", "ssim", "fid")
    return dict(steps=int(result["step"]), training_seconds=result["wall_seconds"],
                seconds_per_step=statistics.median(per_step),
                evaluations=[dict(step=e["step"], **{k: e[k] for k in keys})
                             for e in metrics["evaluations"]],
                protocol=metrics["protocol"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", required=True)
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--gin_file", default="gin/pix2pix_fashion_mnist_edges.gin")
    parser.add_argument("--gin_bindings", action="append", default=[])
    parser.add_argument("--images_per_step", type=int, default=16,
                        help="train.batch_size x d_steps x accumulation of the recipe")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    checkout = os.path.abspath(args.checkout)
    command = [sys.executable, os.path.join(checkout, "bin", "train.py"),
               f"--model_dir={os.path.abspath(args.model_dir)}", f"--gin_file={args.gin_file}",
               *[f"--gin_bindings={b}" for b in args.gin_bindings]]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True,
                            text=True).stdout.strip()
    start = time.monotonic()
    log_path = os.path.abspath(args.model_dir) + ".log"
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "w") as log:
        done = subprocess.run(command, cwd=checkout, stdout=log, stderr=subprocess.STDOUT,
                              env=dict(os.environ, PYTHONPATH=checkout))
    seconds = time.monotonic() - start
    if done.returncode:
        sys.exit(f"{command} exited {done.returncode}; see {log_path}")
    with open(log_path) as f:
        layout = [line.split("] ", 1)[-1].strip() for line in f if "layout: " in line
                  and "source:" in line]
    out = dict(machine=machine.describe(), checkout=checkout, commit=commit,
               command=" ".join(command), process_seconds=round(seconds, 1),
               layout=layout[-1] if layout else None,
               **summarise(args.model_dir, args.images_per_step))
    with open(args.output, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    print(json.dumps({k: out[k] for k in ("steps", "training_seconds", "seconds_per_step",
                                          "evaluations", "layout")}, indent=1))


if __name__ == "__main__":
    main()
