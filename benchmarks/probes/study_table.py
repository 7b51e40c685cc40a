"""The recipe study's Markdown rows from the time-to-quality suite's JSON (bin/bench.py
--suite=time_to_quality --runs=<sweep folder> --output=<file>): per run its steps, real
images, training seconds, last mark's FCD, conditional accuracy and diversity (recall,
coverage, intra-class FCD), the best FCD on its curve and the seconds to FCD 10, 5, 2 and
to the target. A run is named by its sweep bindings, less those at an "off" value (0 or
constant: `G.decay=constant,G.decay_steps=0` says nothing the other parts do not).

    python benchmarks/probes/study_table.py runs/bench/recipe2_ema.json "EMA"
"""

from __future__ import annotations

import json
import sys


def _seconds(value) -> str:
    return "–" if value is None else f"{value:.0f}"


OFF = ("0", "constant")


def short_name(name: str) -> str:
    """The run's name without its parts at an off value; the whole name if nothing is left."""
    parts = [p for p in name.split(",") if p.rpartition("=")[2] not in OFF]
    return ",".join(parts) or name


def rows(result: dict, arm: str):
    for name, run in sorted(result["runs"].items()):
        last = run["curve"][-1]
        best = min(run["curve"], key=lambda p: p["fcd"])
        ladder = run["seconds_to_fcd"]
        diversity = " / ".join(f"{last[k]:.3f}" if k in last else "–"
                               for k in ("recall", "coverage", "intra_class_fcd"))
        yield (f"| {arm} | `{short_name(name)}` | {last['step']} | {last['images']:,} | "
               f"{_seconds(last['seconds'])} | {last['fcd']:.2f} | "
               f"{last['conditional_accuracy']:.3f} | {diversity} | "
               f"{best['fcd']:.2f} at {best['step']} | {_seconds(ladder['10'])} | "
               f"{_seconds(ladder['5'])} | {_seconds(ladder['2'])} | "
               f"{_seconds(run['seconds_to_target'])} |")


def main(argv) -> None:
    with open(argv[1]) as f:
        result = json.load(f)
    print("| arm | run | steps | real images | s | FCD | cond. acc. | recall / coverage / "
          "intra-class FCD | best FCD | s to FCD 10 | 5 | 2 | s to target |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows(result, argv[2] if len(argv) > 2 else ""):
        print(row)


if __name__ == "__main__":
    main(sys.argv)
