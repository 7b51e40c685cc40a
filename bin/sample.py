"""Writes a PNG grid from the newest checkpoint's EMA generator: one row per class.

    python bin/sample.py --model_dir=runs/default --truncation=1.0

The run's own operative_config.gin (written by bin/train.py) describes the
models; extra --gin_file/--gin_bindings are applied after it.
"""

from __future__ import annotations

import os

from absl import app
from absl import flags
from absl import logging

import common
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


def _main() -> int:
    if not FLAGS.model_dir:
        common.fail("--model_dir is required (a folder bin/train.py wrote)")
    operative = os.path.join(FLAGS.model_dir, "operative_config.gin")
    if not os.path.exists(operative):
        common.fail(f"--model_dir={FLAGS.model_dir} has no operative_config.gin; "
                    "is it a training run's folder?")
    FLAGS.gin_file = [operative] + FLAGS.gin_file
    # Sampling needs no replicas: one device whatever the run used.
    FLAGS.gin_bindings = FLAGS.gin_bindings + ["strategy.kind = 'one_device'"]
    common.parse_gin()
    exp = experiment.build(strategy=strategy_lib.make_strategy(), check_data=False)
    ckpt = checkpoints.Checkpointer(FLAGS.model_dir, max_to_keep=1000, **exp.trackables())
    path = ckpt.restore_latest()
    if path is None:
        common.fail(f"--model_dir={FLAGS.model_dir} holds no checkpoint")
    classes = ([int(c) for c in FLAGS.classes] if FLAGS.classes
               else sampling.default_classes(exp.source.num_classes))
    bad = [c for c in classes if not 0 <= c < exp.source.num_classes]
    if bad:
        common.fail(f"--classes {bad} out of range [0, {exp.source.num_classes})")
    if FLAGS.standing_stats_batches:
        sampling.refresh_bn_statistics(exp.generator_ema, exp.source.num_classes,
                                       FLAGS.standing_stats_batches)
    grid = sampling.class_grid(exp.generator_ema, classes, FLAGS.per_class, FLAGS.seed,
                               FLAGS.truncation or None)
    output = FLAGS.output or os.path.join(FLAGS.model_dir, "samples", "sample.png")
    images.write_png(output, grid)
    logging.info("%s (step %d): %s", path, int(exp.step.numpy()), output)
    print(output, flush=True)
    return 0


if __name__ == "__main__":
    app.run(common.absl_main(_main))
