"""Writes a PNG grid from the newest checkpoint's EMA generator: one row per class.

    python bin/sample.py --model_dir=runs/default --truncation=1.0
    python bin/sample.py --model_dir=runs/per_class   # a per-class run's root
    python bin/sample.py --model_dir=runs/default --mode=latent_interpolation
    python bin/sample.py --model_dir=runs/default --mode=class_interpolation --classes=0,5,9

Modes: grid (rows = classes, the same latents in every row), latent_interpolation
(rows = classes, columns walk from one latent to another), class_interpolation
(rows = consecutive pairs of --classes, a fixed latent per row, the conditioning
moving from the first class to the second). --per_class sets the columns.

The run's own operative_config.gin (written by bin/train.py) describes the
models; extra --gin_file/--gin_bindings are applied after it. For a per-class
run (bin/launch_local.py --mode=per_class) --model_dir is the root holding
group_*/ folders: each class's row comes from the generator that trained on it.
"""

from __future__ import annotations

import glob
import os
from typing import List, Tuple

from absl import app
from absl import flags
from absl import logging
import numpy as np

import common
from paragan_tf.generate import images
from paragan_tf.generate import sampling

FLAGS = flags.FLAGS
common.define_gin_flags()
flags.DEFINE_enum("mode", "grid", ["grid", "latent_interpolation", "class_interpolation"],
                  "What to draw (see above).")
flags.DEFINE_string("output", None,
                    "PNG path; default <model_dir>/samples/sample.png (grid) or <mode>.png.")
flags.DEFINE_float("truncation", 0.0, "Truncation threshold for z (0: none).")
flags.DEFINE_integer("per_class", 10, "Samples per class (grid columns).")
flags.DEFINE_list("classes", None, "Class ids for the rows; default: all (up to 10).")
flags.DEFINE_integer("seed", 0, "Seed of the latents.")
flags.DEFINE_integer("standing_stats_batches", 8,
                     "Batches for fresh BN statistics of the EMA generator (0: keep stored).")


def _run_dirs(model_dir: str) -> List[str]:
    if os.path.exists(os.path.join(model_dir, "operative_config.gin")):
        return [model_dir]
    groups = sorted(os.path.dirname(p) for p in
                    glob.glob(os.path.join(model_dir, "group_*", "operative_config.gin")))
    if not groups:
        common.fail(f"--model_dir={model_dir} has no operative_config.gin (nor group_*/ "
                    "folders of a per-class run); is it a training run's folder?")
    return groups


def _wanted(num_classes: int) -> List[int]:
    wanted = ([int(c) for c in FLAGS.classes] if FLAGS.classes
              else sampling.default_classes(num_classes))
    bad = [c for c in wanted if not 0 <= c < num_classes]
    if bad:
        common.fail(f"--classes {bad} out of range [0, {num_classes})")
    return wanted


def _refresh(exp) -> None:
    if FLAGS.standing_stats_batches:
        sampling.refresh_bn_statistics(exp.generator_ema, exp.source.num_classes,
                                       FLAGS.standing_stats_batches, classes=exp.classes)


def _grid(run_dirs: List[str]) -> Tuple[np.ndarray, int]:
    """Class rows, each from the run (of a per-class root) that trained that class."""
    rows, wanted = {}, None
    for run_dir in run_dirs:
        exp, _ = common.restore_run(run_dir)
        wanted = wanted or _wanted(exp.source.num_classes)
        mine = [c for c in wanted if c in exp.classes and c not in rows]
        if not mine:
            continue
        _refresh(exp)
        samples = sampling.class_samples(exp.generator_ema, mine, FLAGS.per_class, FLAGS.seed,
                                         FLAGS.truncation or None)
        for i, c in enumerate(mine):
            rows[c] = samples[i * FLAGS.per_class:(i + 1) * FLAGS.per_class]
    missing = [c for c in wanted if c not in rows]
    if missing:
        common.fail(f"no run under {FLAGS.model_dir} trained classes {missing}")
    return np.concatenate([rows[c] for c in wanted]), len(wanted)


def _interpolation(run_dirs: List[str]) -> Tuple[np.ndarray, int]:
    if len(run_dirs) > 1:
        common.fail(f"--mode={FLAGS.mode} needs a single run; {FLAGS.model_dir} is a per-class "
                    "root with one generator per group (pass one group_*/ folder)")
    exp, _ = common.restore_run(run_dirs[0])
    wanted = _wanted(exp.source.num_classes)
    _refresh(exp)
    truncation = FLAGS.truncation or None
    if FLAGS.mode == "latent_interpolation":
        return sampling.latent_interpolation(exp.generator_ema, wanted, FLAGS.per_class,
                                             FLAGS.seed, truncation), len(wanted)
    pairs = list(zip(wanted, wanted[1:]))
    if not pairs:
        common.fail("--mode=class_interpolation needs at least two --classes")
    return sampling.class_interpolation(exp.generator_ema, pairs, FLAGS.per_class, FLAGS.seed,
                                        truncation), len(pairs)


def _main() -> int:
    model_dir = common.model_dir()
    run_dirs = _run_dirs(model_dir)
    samples, rows = (_grid if FLAGS.mode == "grid" else _interpolation)(run_dirs)
    name = "sample.png" if FLAGS.mode == "grid" else f"{FLAGS.mode}.png"
    output = FLAGS.output or os.path.join(model_dir, "samples", name)
    images.write_png(output, images.grid(samples, rows=rows))
    logging.info("%s: %s", FLAGS.mode, output)
    print(output, flush=True)
    return 0


if __name__ == "__main__":
    app.run(common.absl_main(_main))
