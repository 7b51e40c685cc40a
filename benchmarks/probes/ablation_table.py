"""ParaGAN's ablation as Markdown rows, from one or more JSONs of bin/bench.py
--suite=async_quality: per mode, policy and straggler kind, the median and range over the
repeats of images/s, G updates/s, FCD and conditional accuracy, the ratio of the median
images/s to synchronous training's under the same policy and kind, closures per worker
(worker:0 / worker:1, medians), the workers' CPU milliseconds per image (both workers'
CPU seconds over the images of the budget: equal per-image work shows as equal numbers) and
the CPU seconds of the parameter server and the chief (medians).

    python benchmarks/probes/ablation_table.py runs/bench/ablation/phase_a.json [more.json]
"""

from __future__ import annotations

import json
import statistics
import sys

METRICS = (("images_per_sec", "{:.1f}"), ("g_updates_per_sec", "{:.2f}"), ("fcd", "{:.1f}"),
           ("conditional_accuracy", "{:.3f}"))


def _cell(runs, metric: str, form: str) -> str:
    values = [r[metric] for r in runs]
    median = form.format(statistics.median(values))
    if len(values) == 1:
        return median
    return f"{median} ({form.format(min(values))}-{form.format(max(values))})"


def _worker_ms_per_image(run: dict, seconds: float) -> float:
    cpu = sum(v for task, v in run["cpu_seconds"].items() if task.startswith("worker"))
    return 1000 * cpu / (run["images_per_sec"] * seconds)


def table(results) -> str:
    runs = {}
    for result in results:
        for mode, by_policy in result["runs"].items():
            for policy, by_condition in by_policy.items():
                for condition, repeats in by_condition.items():
                    runs.setdefault((condition, policy, mode), []).extend(
                        dict(r, worker_ms_per_image=_worker_ms_per_image(
                            r, 60 * result["budget_minutes"])) for r in repeats)
    lines = ["| kind | policy | mode | runs | images/s | vs sync | G updates/s | FCD | "
             "cond. acc. | closures w0 / w1 | worker CPU ms/image | CPU s ps / chief |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (condition, policy, mode), repeats in sorted(runs.items()):
        sync = runs.get((condition, policy, "sync"))
        rate = statistics.median(r["images_per_sec"] for r in repeats)
        ratio = (f"{rate / statistics.median(r['images_per_sec'] for r in sync):.2f}"
                 if sync else "–")
        closures = " / ".join(
            f"{statistics.median(r['closures_by_worker'][w] for r in repeats):.0f}"
            for w in ("worker:0", "worker:1"))
        cpu = " / ".join(
            f"{statistics.median(r['cpu_seconds'].get(t, 0.0) for r in repeats):.1f}"
            for t in ("ps:0", "chief:0")) if mode != "sync" else "–"
        cells = " | ".join(_cell(repeats, m, f) for m, f in METRICS)
        lines.append(f"| {condition} | {policy} | {mode} | {len(repeats)} | "
                     + cells.replace(" | ", f" | {ratio} | ", 1)
                     + f" | {closures} | "
                     + f"{statistics.median(r['worker_ms_per_image'] for r in repeats):.1f}"
                     + f" | {cpu} |")
    return "\n".join(lines)


def main(paths) -> None:
    results = []
    for path in paths:
        with open(path) as f:
            results.append(json.load(f))
    print(table(results))


if __name__ == "__main__":
    main(sys.argv[1:])
