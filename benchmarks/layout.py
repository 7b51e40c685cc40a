"""The layout benchmark: every candidate the tuner could pick, timed side by side.

    python bin/bench.py --suite=layout --gin_file=gin/mnist_default.gin

First what `make train` would use for this step (`auto`: the cache entry, or a
tuning run within its budget, as bin/train.py does it). Then, with no budget and none
dropped, every candidate, as many starting at once as there are cores, each in its own
child process (measure/timing.py): XLA x
oneDNN x {TensorFlow's thread counts, one inter-op thread}, plus float32 where the
rule picks bfloat16, timed in interleaved rounds (A B C ..., A B C ..., at least 3).
The JSON has a row per candidate (median and every round), the fastest, `auto`'s
choice and the rule's (what `auto` was before it measured: the precision rule, XLA
off on CPUs, TensorFlow's default oneDNN and threads) with their ratios to the
fastest.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Sequence

from paragan_tf.layout import rules as layout_lib
from paragan_tf.layout import cache as layout_cache
from paragan_tf.errors import ConfigError
from paragan_tf.train import experiment as experiment_lib
from paragan_tf.layout import candidates as layout_candidates
from paragan_tf.measure import timing as layout_timing
from paragan_tf.measure import tuning as layout_tuning


def layout_suite(gin_file: str = "gin/mnist_default.gin", bindings: Sequence[str] = (),
                 rounds: int = 3, progress: Callable[[str], None] = print) -> dict:
    if rounds < 1:
        raise ConfigError("the layout benchmark needs at least 1 round")
    experiment_lib.parse([gin_file], list(bindings))
    settings = experiment_lib.Settings.read()
    pins = settings.layout.pins()
    hardware = layout_lib.detect()
    precision = layout_lib.run_precision(hardware, settings.layout.precision)
    progress("auto: what bin/train.py would use for this step")
    auto = layout_tuning.settle(settings, progress=progress)
    grid, notes = layout_candidates.candidates(hardware, pins, settings.strategy, precision)
    stage = list(grid)
    if hardware.cores >= 2 and not any(c.intra_op_threads or c.inter_op_threads for c in grid):
        stage += [dataclasses.replace(c, intra_op_threads=hardware.cores, inter_op_threads=1)
                  for c in grid]
    rule = layout_candidates.rule_candidate(hardware, grid)
    chosen = auto or rule  # a Choice either way (its source and pace do not compare)
    if "precision" not in pins and precision == "mixed_bfloat16":
        stage.append(dataclasses.replace(chosen, precision="float32"))
    for extra in (rule, chosen):
        if extra not in stage:
            stage.append(extra)
    progress(f"timing {len(stage)} candidates, {rounds} interleaved rounds: "
             + "; ".join(c.name for c in stage))
    started = time.monotonic()
    with layout_timing.parsed_config_file(settings.parsed) as config_file:
        rows = layout_timing.measure(stage, config_file, rounds, float("inf"), progress,
                                     at_once=max(1, min(hardware.cores,
                                                        layout_lib.usable_cores())),
                                     drop_over=None)
    best = layout_timing.fastest(rows)
    by_name = {r["name"]: r for r in rows}
    for row in rows:
        row["ratio_to_fastest"] = (best["seconds_per_step"] / row["seconds_per_step"]
                                   if row["seconds_per_step"] else None)
        row["images_per_sec"] = (settings.train.real_images_per_step / row["seconds_per_step"]
                                 if row["seconds_per_step"] else None)
        progress(f"{row['name']}: {row['seconds_per_step'] or float('nan'):.3f} s/step, "
                 f"{row['ratio_to_fastest'] or 0:.3f} of the fastest")
    auto_row, rule_row = by_name[chosen.name], by_name[rule.name]
    return {
        "suite": "layout", "config": gin_file, "bindings": list(bindings),
        "rounds": rounds, "seconds": round(time.monotonic() - started, 1),
        "candidates": rows, "notes": notes,
        "fastest": best["name"],
        "auto": dict(choice=chosen.name,
                     source=auto.source if auto else "rule",
                     seconds_per_step=auto_row["seconds_per_step"],
                     ratio_to_fastest=auto_row["ratio_to_fastest"]),
        "rule": dict(choice=rule.name, seconds_per_step=rule_row["seconds_per_step"],
                     ratio_to_fastest=rule_row["ratio_to_fastest"]),
        "auto_vs_rule_speedup": (rule_row["seconds_per_step"] / auto_row["seconds_per_step"]
                                 if auto_row["seconds_per_step"] and
                                 rule_row["seconds_per_step"] else None),
        "cache": layout_cache.path(),
        "hardware": hardware.signature(),
    }

