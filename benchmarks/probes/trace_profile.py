"""Where tracing the tiny step spends its Python time, by the project's own functions.

    pip install py-spy   # in a scratch venv: not a dependency of ours
    py-spy record -r 100 -f raw -o /tmp/trace.raw -- \
        .venv/bin/python benchmarks/probes/trace_time.py
    python benchmarks/probes/trace_profile.py /tmp/trace.raw [--under=get_concrete_function]

Reads py-spy's raw (collapsed-stack) samples, keeps those under the `--under` frame (the
loop's trace in trace_time.py), and prints each paragan_tf function's inclusive share of
them: the time spent in it and in everything it called, TensorFlow included.
"""

from __future__ import annotations

import argparse
import collections
import re


def shares(path: str, under: str, top: int):
    total, inclusive = 0, collections.Counter()
    with open(path) as f:
        for line in f:
            stack, count = line.rstrip().rsplit(" ", 1)
            frames = [re.sub(r":\d+\)", ")", frame) for frame in stack.split(";")]
            if not any(under in frame for frame in frames):
                continue
            total += int(count)
            for frame in {frame for frame in frames if "paragan_tf" in frame}:
                inclusive[frame] += int(count)
    return total, inclusive.most_common(top)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("raw")
    parser.add_argument("--under", default="get_concrete_function")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    total, rows = shares(args.raw, args.under, args.top)
    print(f"{total} samples under {args.under}")
    for frame, count in rows:
        print(f"{100 * count / total:5.1f} %  {frame}")


if __name__ == "__main__":
    main()
