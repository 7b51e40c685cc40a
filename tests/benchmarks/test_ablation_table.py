"""ParaGAN's ablation table (benchmarks/probes/ablation_table.py): time to a target read from
each run's curve, and the table in docs/benchmarks.md regenerated from the committed JSONs."""

from __future__ import annotations

import glob
import json
import os
import re

from benchmarks.probes import ablation_table

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(curve, images_per_sec=100.0):
    return {"training_seconds": 300.0, "images_per_sec": images_per_sec, "fcd": curve[-1][1],
            "conditional_accuracy": curve[-1][2], "worker_cpu_ms_per_image": 12.0,
            "cpu_seconds": {"worker:0": 1.0, "ps:0": 2.0, "chief:0": 3.0},
            "curve": [dict(seconds=s, fcd=f, conditional_accuracy=a) for s, f, a in curve]}


def test_time_to_a_target_is_the_first_mark_that_meets_it():
    curve = _run([(30, 40.0, 0.2), (60, 9.0, 0.85), (90, 4.0, 0.88), (120, 6.0, 0.93)])["curve"]
    assert ablation_table.seconds_to(curve, accuracy=0.9) == 120
    assert ablation_table.seconds_to(curve, fcd=5.0) == 90
    assert ablation_table.seconds_to(curve, accuracy=0.9, fcd=5.0) == ablation_table.NOT_REACHED
    assert ablation_table.seconds_to(curve, accuracy=0.5, fcd=5.0) == 90


def test_a_median_of_runs_that_missed_the_target_is_not_a_number():
    reached, missed = [(60, 4.0, 0.95)], [(60, 20.0, 0.5)]
    result = {"runs": {
        "sync": {"plain": {
            "even": [_run(reached), _run([(120, 4.0, 0.95)]), _run(missed)],
            "slow50": [_run(missed), _run(missed), _run(reached)]}},
        "sample_buffer": {"plain": {
            "even": [_run(missed, 150.0), _run(missed, 150.0), _run(reached, 150.0)],
            "slow50": [_run(reached, 150.0), _run([(100, 4.0, 0.95)], 150.0),
                       _run(missed, 150.0)]}}}}
    rows = [r.split(" | ") for r in ablation_table.table([result]).splitlines()[2:]]
    even_buffer, even_sync, slow_buffer, slow_sync = rows
    assert even_sync[2] == "sync" and even_sync[7] == "120 (60-–)"  # s to acc.: median, range
    assert even_buffer[6] == "1.50"  # images/s against synchronous training's median
    assert even_buffer[7] == "– (60-–)" and even_buffer[8] == "–"  # no gain to a miss
    assert even_sync[8] == "1.00"
    assert slow_sync[7] == "– (60-–)"
    assert slow_buffer[7] == "100 (60-–)" and slow_buffer[8] == "> 3.00"  # 300 s / 100 s
    assert even_buffer[14] == "2.0 / 3.0 |" and even_sync[14] == "– |"


def test_every_ablation_table_in_the_docs_is_its_committed_results_table():
    """Each `python benchmarks/probes/ablation_table.py PATHS [--accuracy=A] [--fcd=F]
    [--verdict]` in docs/benchmarks.md is followed by the table it prints from those
    committed JSONs (the verdict's too: editing it to say the arms are equal fails)."""
    with open(os.path.join(REPO, "docs", "benchmarks.md")) as f:
        docs = f.read()
    commands = re.findall(r"^python benchmarks/probes/ablation_table\.py (.+)$", docs, re.M)
    assert commands, "docs/benchmarks.md names no ablation table command"
    for command in commands:
        args = command.split()
        paths = [p for a in args if not a.startswith("--")
                 for p in sorted(glob.glob(os.path.join(REPO, a)))]
        assert paths and all(p.startswith(os.path.join(REPO, "benchmarks", "results"))
                             for p in paths), f"{command}: no committed results JSON"
        targets = dict(a[2:].split("=") for a in args if a.startswith("--") and "=" in a)
        results = []
        for path in paths:
            with open(path) as f:
                results.append(json.load(f))
        make = ablation_table.verdict if "--verdict" in args else ablation_table.table
        table = make(results, **{k: float(v) for k, v in targets.items()})
        assert table in docs, (f"docs/benchmarks.md's table differs from python "
                               f"benchmarks/probes/ablation_table.py {command}")
