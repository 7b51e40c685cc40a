"""The memory suite: measured peak of one training step beside the memory plan's estimate.

For 128, 256, 512 and 1024 px (narrow widths on a CPU, stated in the JSON), at
per-replica batch 1 and 2, with and without recompute: TensorFlow's allocator
peak (`tf.config.experimental.get_memory_info`, which the CPU allocator keeps
with oneDNN on) over one step after a warm-up step, and the estimate of
paragan_tf/scale/memory.py for the same models. Each resolution runs in its own
process so the allocator holds only that resolution's models.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Callable, Dict

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # for the child's import

# resolution -> base width measured here (full width does not fit 2 CPU cores' time).
WIDTHS = {128: 16, 256: 16, 512: 8, 1024: 4}
BATCHES = (1, 2)
TOLERANCE = 0.25


def measure(resolution: int, ch: int) -> Dict[str, dict]:
    """Runs in a child process: every (batch, recompute) case of one resolution."""
    import paragan_tf  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import tf_keras as keras  # pylint: disable=import-outside-toplevel

    from paragan_tf.distribute import mode as mode_lib  # pylint: disable=import-outside-toplevel
    from paragan_tf.objective import losses  # pylint: disable=import-outside-toplevel
    from paragan_tf.families.biggan import objective  # pylint: disable=import-outside-toplevel
    from paragan_tf.measure import traced  # pylint: disable=import-outside-toplevel
    from paragan_tf.families.biggan import networks as biggan  # pylint: disable=C0415
    from paragan_tf.train import step as step_lib  # pylint: disable=import-outside-toplevel

    keras.utils.set_random_seed(0)
    slots = len(biggan.G_ARCH[resolution][0]) + 1
    arch = dict(resolution=resolution, num_classes=10, ch=ch, dim_z=4 * slots, shared_dim=16,
                hierarchical_z=True, attention_resolutions=(64,))
    g, ema = biggan.Generator(**arch), biggan.Generator(name="generator_ema", **arch)
    d = biggan.Discriminator(resolution=resolution, num_classes=10, ch=ch,
                             attention_resolutions=(64,))
    biggan.build(g, d, 3)
    ema((tf.zeros([2, g.dim_z]), tf.zeros([2], tf.int32)))
    g_opt, d_opt = keras.optimizers.Adam(1e-4), keras.optimizers.Adam(1e-4)
    g_opt.build(g.trainable_variables)
    d_opt.build(d.trainable_variables)
    hinge = objective.ClassConditional(losses.LossPair(losses.hinge))
    plan = traced.memory_plan(step_lib.GANStep(g, d, g_opt, d_opt, hinge,
                                               step_lib.StepConfig(BATCHES[0])),
                              ema, side_of=mode_lib.Mode().side_of)
    results = {}
    for batch in BATCHES:
        row = {}
        for recompute in (False, True):
            g.recompute = d.recompute = recompute
            step = step_lib.GANStep(g, d, g_opt, d_opt, hinge,
                                    step_lib.StepConfig(batch, d_steps=1))
            z = tf.random.normal([batch, g.dim_z])
            labels = tf.zeros([batch], tf.int32)
            images = tf.random.uniform([batch, resolution, resolution, 3], -1.0, 1.0)
            fn = tf.function(lambda: step([(images, labels)], [(z, labels), (z, labels)]))
            fn()  # trace and warm up
            tf.config.experimental.reset_memory_stats("CPU:0")
            start = time.perf_counter()
            fn()
            seconds = time.perf_counter() - start
            peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
            suffix = "_recompute" if recompute else ""
            row["peak_bytes" + suffix] = int(peak)
            row["estimate_bytes" + suffix] = plan.total_bytes(batch, recompute)
            row["step_seconds" + suffix] = round(seconds, 3)
        for suffix in ("", "_recompute"):
            ratio = row["estimate_bytes" + suffix] / row["peak_bytes" + suffix]
            row["estimate_over_peak" + suffix] = round(ratio, 3)
        results[f"batch_{batch}"] = row
    return results


def memory_suite(progress: Callable[[str], None]) -> dict:
    """Every resolution in a child process; fails loudly when an estimate misses by > 25 %."""
    result = {"precision": "float32", "widths": {str(r): ch for r, ch in WIDTHS.items()},
              "note": "narrow widths (ch) on this CPU; D steps 1; 10 classes; shared "
                      "embedding, hierarchical z, attention at 64 (the machine: bin/bench.py)",
              "tolerance": TOLERANCE, "resolutions": {}}
    for resolution, ch in WIDTHS.items():
        progress(f"memory: {resolution} px at ch={ch}")
        code = ("import json, sys; from benchmarks import memory; "
                f"print('RESULT ' + json.dumps(memory.measure({resolution}, {ch})))")
        path = os.pathsep.join(filter(None, [_REPO, os.environ.get("PYTHONPATH")]))
        child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=path),
                               check=False)
        lines = [l for l in child.stdout.splitlines() if l.startswith("RESULT ")]
        if child.returncode or not lines:
            raise RuntimeError(f"memory suite: {resolution} px failed:\n{child.stderr[-2000:]}")
        result["resolutions"][str(resolution)] = json.loads(lines[-1][len("RESULT "):])
    misses = [f"{r}/{b}{s}: {row['estimate_over_peak' + s]}"
              for r, rows in result["resolutions"].items() for b, row in rows.items()
              for s in ("", "_recompute") if abs(row["estimate_over_peak" + s] - 1) > TOLERANCE]
    result["all_within_tolerance"] = not misses
    if misses:
        progress("estimate off by more than 25 %: " + ", ".join(misses))
    return result
