"""Writes a PNG grid from the newest checkpoint's EMA generator: one row per class.

    python bin/sample.py --model_dir=runs/default --truncation=1.0
    python bin/sample.py --model_dir=runs/per_class   # a per-class run's root

The run's own operative_config.gin (written by bin/train.py) describes the
models; extra --gin_file/--gin_bindings are applied after it. For a per-class
run (bin/launch_local.py --mode=per_class) --model_dir is the root holding
group_*/ folders: each class's row comes from the generator that trained on it.
"""

from __future__ import annotations

import glob
import os
from typing import List

from absl import app
from absl import flags
from absl import logging
import numpy as np

import common
from paragan_tf import config as config_lib
from paragan_tf import images
from paragan_tf import sampling
from paragan_tf.distribute import strategy as strategy_lib
from paragan_tf.train import checkpoints
from paragan_tf.train import experiment

FLAGS = flags.FLAGS
common.define_gin_flags()
flags.DEFINE_string("output", None, "PNG path; default <model_dir>/samples/sample.png.")
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


def _restore(run_dir: str) -> experiment.Experiment:
    """The run in run_dir, built from its operative config, at its newest checkpoint."""
    # Sampling needs no replicas: one device whatever the run used.
    config_lib.parse([os.path.join(run_dir, "operative_config.gin")] + FLAGS.gin_file,
                     FLAGS.gin_bindings + ["strategy.kind = 'one_device'"], finalize=False)
    exp = experiment.build(strategy=strategy_lib.make_strategy(), check_data=False)
    path = checkpoints.Checkpointer(run_dir, max_to_keep=1000, **exp.trackables()).restore_latest()
    if path is None:
        common.fail(f"{run_dir} holds no checkpoint")
    logging.info("%s: step %d, classes %s", path, int(exp.step.numpy()), exp.classes)
    return exp


def _main() -> int:
    if not FLAGS.model_dir:
        common.fail("--model_dir is required (a folder bin/train.py wrote)")
    rows, wanted = {}, None
    for run_dir in _run_dirs(FLAGS.model_dir):
        exp = _restore(run_dir)
        if wanted is None:
            num_classes = exp.source.num_classes
            wanted = ([int(c) for c in FLAGS.classes] if FLAGS.classes
                      else sampling.default_classes(num_classes))
            bad = [c for c in wanted if not 0 <= c < num_classes]
            if bad:
                common.fail(f"--classes {bad} out of range [0, {num_classes})")
        mine = [c for c in wanted if c in exp.classes and c not in rows]
        if not mine:
            continue
        if FLAGS.standing_stats_batches:
            sampling.refresh_bn_statistics(exp.generator_ema, exp.source.num_classes,
                                           FLAGS.standing_stats_batches, classes=exp.classes)
        samples = sampling.class_samples(exp.generator_ema, mine, FLAGS.per_class, FLAGS.seed,
                                         FLAGS.truncation or None)
        for i, c in enumerate(mine):
            rows[c] = samples[i * FLAGS.per_class:(i + 1) * FLAGS.per_class]
    missing = [c for c in wanted if c not in rows]
    if missing:
        common.fail(f"no run under {FLAGS.model_dir} trained classes {missing}")
    grid = images.grid(np.concatenate([rows[c] for c in wanted]), rows=len(wanted))
    output = FLAGS.output or os.path.join(FLAGS.model_dir, "samples", "sample.png")
    images.write_png(output, grid)
    logging.info("classes %s: %s", wanted, output)
    print(output, flush=True)
    return 0


if __name__ == "__main__":
    app.run(common.absl_main(_main))
