"""ParaGAN's ablation as Markdown rows, from one or more JSONs of bin/bench.py
--suite=async_quality: per straggler kind, policy and mode, the median and (in brackets)
the range over the repeats of

- the training seconds every run was given (its first progress record to the end of its
  last step; they must agree across arms for the rest to compare);
- images/s (real images through D) and its ratio to synchronous training's median under
  the same kind and policy;
- the training seconds to a target (conditional accuracy at least A; FCD at most F), read
  from each run's scored checkpoints (its curve): the first mark that meets it, "–" where
  a run never did (a median of such runs is "–" too); and the gain in time to quality,
  synchronous training's median over this mode's ("> x" where synchronous training did
  not reach the target in its window and this mode did: at least x);
- the final FCD and conditional accuracy;
- both workers' CPU milliseconds per image over the metered window (equal work per image
  shows as equal numbers), and the CPU seconds of the parameter server and the chief.

    python benchmarks/probes/ablation_table.py benchmarks/results/ablation_*.json \
        [--accuracy=0.9] [--fcd=10] [--verdict]

--verdict prints the short table docs/benchmarks.md's verdict reads instead: per straggler
kind, the sample buffer's images/s over synchronous training's, and both modes' median
seconds to each target with the buffer's gain (plain policy).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from typing import Dict, List, Sequence

NOT_REACHED = math.inf


def seconds_to(curve: Sequence[dict], accuracy: float = 0.0,
               fcd: float = math.inf) -> float:
    """Training seconds of the first mark with accuracy >= `accuracy` and FCD <= `fcd`."""
    for point in curve:
        if point["conditional_accuracy"] >= accuracy and point["fcd"] <= fcd:
            return point["seconds"]
    return NOT_REACHED


def _form(value: float, form: str) -> str:
    return "–" if value == NOT_REACHED else form.format(value)


def _cell(values: List[float], form: str) -> str:
    median = _form(statistics.median(values), form)
    if len(values) == 1:
        return median
    return f"{median} ({_form(min(values), form)}-{_form(max(values), form)})"


def _gain(sync: List[dict], runs: List[dict], key: str) -> str:
    """Synchronous training's median seconds to the target over this mode's."""
    if not sync:
        return "–"
    ours = statistics.median(r[key] for r in runs)
    theirs = statistics.median(r[key] for r in sync)
    if ours == NOT_REACHED:
        return "–"
    if theirs == NOT_REACHED:  # not reached in the window: at least the window's length
        return f"> {statistics.median(r['training_seconds'] for r in sync) / ours:.2f}"
    return f"{theirs / ours:.2f}"


def rows(results: Sequence[dict], accuracy: float, fcd: float) -> Dict[tuple, List[dict]]:
    """Every run, keyed (kind, policy, mode), with its seconds to the targets."""
    runs: Dict[tuple, List[dict]] = {}
    for result in results:
        for mode, by_policy in result["runs"].items():
            for policy, by_kind in by_policy.items():
                for kind, repeats in by_kind.items():
                    runs.setdefault((kind, policy, mode), []).extend(
                        dict(r, to_accuracy=seconds_to(r["curve"], accuracy=accuracy),
                             to_fcd=seconds_to(r["curve"], fcd=fcd))
                        for r in repeats)
    return runs


def table(results: Sequence[dict], accuracy: float = 0.9, fcd: float = 10.0) -> str:
    runs = rows(results, accuracy, fcd)
    lines = [f"| kind | policy | mode | runs | training s | images/s | vs sync | "
             f"s to acc. {accuracy:g} | gain | s to FCD {fcd:g} | gain | "
             f"final FCD | final acc. | worker CPU ms/image | CPU s ps / chief |",
             "| --- " * 15 + "|"]
    for (kind, policy, mode), repeats in sorted(runs.items()):
        sync = runs.get((kind, policy, "sync"), [])

        def values(key, of=repeats):
            return [r[key] for r in of]
        rate = statistics.median(values("images_per_sec"))
        vs_sync = (f"{rate / statistics.median(values('images_per_sec', sync)):.2f}"
                   if sync else "–")
        cpu = " / ".join(
            f"{statistics.median(r['cpu_seconds'].get(t, 0.0) for r in repeats):.1f}"
            for t in ("ps:0", "chief:0")) if mode != "sync" else "–"
        cells = [kind, policy, mode, str(len(repeats)),
                 _cell(values("training_seconds"), "{:.1f}"),
                 _cell(values("images_per_sec"), "{:.1f}"), vs_sync,
                 _cell(values("to_accuracy"), "{:.0f}"), _gain(sync, repeats, "to_accuracy"),
                 _cell(values("to_fcd"), "{:.0f}"), _gain(sync, repeats, "to_fcd"),
                 _cell(values("fcd"), "{:.2f}"), _cell(values("conditional_accuracy"), "{:.3f}"),
                 _cell(values("worker_cpu_ms_per_image"), "{:.1f}"), cpu]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


KIND_NAMES = {"even": "even", "restart": "restart", "slow50": "half speed",
              "slow25": "a quarter slower", "slow75": "quarter speed", "slow_input": "slow input"}


def verdict(results: Sequence[dict], accuracy: float = 0.9, fcd: float = 10.0) -> str:
    """The verdict's table: per kind, the buffer's images/s over synchronous training's and
    each mode's median seconds to the targets, with the buffer's gain (see the module doc)."""
    runs = rows(results, accuracy, fcd)
    lines = [f"| kind | images/s, buffer / sync | s to acc. {accuracy:g}: sync / buffer | gain "
             f"| s to FCD {fcd:g}: sync / buffer | gain |", "| --- " * 6 + "|"]
    kinds = [k for k in KIND_NAMES if (k, "plain", "sync") in runs
             and (k, "plain", "sample_buffer") in runs]
    for kind in kinds:
        sync, buffer = runs[(kind, "plain", "sync")], runs[(kind, "plain", "sample_buffer")]

        def median(of, key):
            return statistics.median(r[key] for r in of)

        def seconds(key):
            return " / ".join(_form(median(of, key), "{:.0f}") for of in (sync, buffer)
                              ).replace("–", "not reached")
        rate = median(buffer, "images_per_sec") / median(sync, "images_per_sec")
        lines.append(f"| {KIND_NAMES[kind]} | {rate:.2f} | {seconds('to_accuracy')} | "
                     f"{_gain(sync, buffer, 'to_accuracy')} | {seconds('to_fcd')} | "
                     f"{_gain(sync, buffer, 'to_fcd')} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="bin/bench.py --suite=async_quality JSONs")
    parser.add_argument("--accuracy", type=float, default=0.9, help="conditional accuracy "
                        "target")
    parser.add_argument("--fcd", type=float, default=10.0, help="FCD target")
    parser.add_argument("--verdict", action="store_true", help="the verdict's short table")
    args = parser.parse_args(argv)
    results = []
    for path in args.paths:
        with open(path) as f:
            results.append(json.load(f))
    print((verdict if args.verdict else table)(results, args.accuracy, args.fcd))


if __name__ == "__main__":
    main()
