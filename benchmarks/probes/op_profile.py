"""Where a traced step's time goes, op by op: the self time of a tf.profiler trace grouped
by op type, by the layer an op belongs to, and by what it does (convolutions, the
optimizer, batch norm, casts, the input pipeline, the rest), with each group's share.

    python bin/bench.py --suite=step --gin_file=gin/pix2pix_fashion_mnist_edges.gin \
        --layouts=fp32,bf16 --profile_dir=/tmp/prof --output=/tmp/step.json
    python benchmarks/probes/op_profile.py /tmp/prof/bf16 --top=12 --output=/tmp/ops.json

The trace is of two train steps (the step suite's --profile_dir); self times of ops that
ran at once on several threads add up, so the shares are of the busy time, not of the wall
time. docs/benchmarks.md ("pix2pix against its reference") reads these tables.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

from benchmarks import profile  # noqa: E402  pylint: disable=wrong-import-position

# What an op does, from its type and name (the first match).
KINDS = (("convolution", lambda r: "Conv" in r["type"]),
         ("optimizer", lambda r: "optimizer" in r["operation"] or "Apply" in r["type"]),
         ("batch norm", lambda r: re.search(r"norm\d*/", r["operation"])),
         ("cast", lambda r: r["type"] == "Cast"),
         ("input pipeline", lambda r: r["type"] == "Dataset"))


def _layer(operation: str) -> str:
    """'while/body/_1/gradient_tape/while/generator/up4/...' -> 'generator/up4'."""
    parts = re.sub(r"^(while/body/_\d+/)?(gradient_tape/)?(while/)?", "", operation).split("/")
    return "/".join(parts[:2]) if parts[0] in ("generator", "discriminator") else "(other)"


def grouped(rows, key) -> dict:
    total = sum(r["self_seconds"] for r in rows) or 1.0
    seconds = collections.Counter()
    for row in rows:
        seconds[key(row)] += row["self_seconds"]
    return {name: dict(seconds=round(s, 4), share=round(s / total, 3))
            for name, s in seconds.most_common()}


def kind(row) -> str:
    return next((name for name, test in KINDS if test(row)), "the rest")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logdir")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    rows = profile.op_rows(args.logdir)
    tables = dict(busy_seconds=round(sum(r["self_seconds"] for r in rows), 4),
                  by_kind=grouped(rows, kind), by_type=grouped(rows, lambda r: r["type"]),
                  by_layer=grouped([r for r in rows if "Conv" in r["type"]],
                                   lambda r: _layer(r["operation"])))
    for name in ("by_kind", "by_type", "by_layer"):
        print(f"{name} (of {tables['busy_seconds']:.3f} busy s):")
        for group, value in list(tables[name].items())[:args.top]:
            print(f"  {value['share']:6.3f} {value['seconds']:8.4f} s  {group}")
    if args.output:
        with open(args.output, "w") as f:
            json.dump(tables, f, indent=1)


if __name__ == "__main__":
    main()
