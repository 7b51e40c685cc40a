"""The one way a built training step is timed: the layout tuner's probe (measure/probe.py),
bin/plan.py --calibrate (measure/built.py `measure_step`) and the step benchmark
(benchmarks/step.py) all call `time_steps`.

A trainer (train/trainer.py) runs `warmup` calls of one step (tracing, XLA compilation),
then `calls` timed calls of `steps_per_call` steps each: the benchmark and --calibrate time
one step a call, the probe a candidate's whole share of the budget in one call (one
tf.function loop, as training runs it). Wall-clock seconds around each call, after its
results are on the host (the trainer returns them as numbers).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, List, Optional


@dataclasses.dataclass
class Timed:
    """warmup_seconds: each warm-up call's; seconds: each timed call's, per step; results:
    each timed call's trainer.train result (its metrics: losses, input wait)."""

    warmup_seconds: List[float]
    seconds: List[float]
    results: list


def time_steps(trainer, calls: int, steps_per_call: int = 1, warmup: int = 0,
               progress: Optional[Callable[[str], None]] = None,
               label: str = "step") -> Timed:
    """Times `calls` calls of trainer.train(steps_per_call) after `warmup` one-step calls;
    `progress` gets a line per call ('<label>: step i/n s (warm-up)')."""
    timed = Timed([], [], [])
    total = warmup + calls
    for i in range(total):
        steps = 1 if i < warmup else steps_per_call
        start = time.perf_counter()
        result = trainer.train(steps)
        elapsed = time.perf_counter() - start
        if i < warmup:
            timed.warmup_seconds.append(elapsed)
        else:
            timed.seconds.append(elapsed / steps)
            timed.results.append(result)
        if progress is not None:
            progress(f"{label}: step {i + 1}/{total} {elapsed:.3f} s"
                     + (" (warm-up)" if i < warmup else ""))
    return timed
