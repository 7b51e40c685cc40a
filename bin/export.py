"""Exports a run's EMA generator as a SavedModel with a (z, labels) -> images signature.

    python bin/export.py --model_dir=runs/default --output=runs/default/export/generator
    python bin/export.py --model_dir=runs/quality/run --checkpoint=runs/x/eval/best/ckpt-400

The generator gets standing BN statistics first (as for sample grids), then is
written with paragan_tf/generate/export.py; load it anywhere with TensorFlow alone:
`tf.saved_model.load(path).signatures["serving_default"](z=..., labels=...)`.
"""

from __future__ import annotations

import os

from absl import app
from absl import flags
from absl import logging

import common
from paragan_tf.generate import export
from paragan_tf.generate import sampling
from paragan_tf import teardown

FLAGS = flags.FLAGS
common.define_gin_flags()
flags.DEFINE_string("output", None, "Export directory; default <model_dir>/export/generator.")
flags.DEFINE_string("checkpoint", None, "Checkpoint prefix; default the newest in --model_dir.")
flags.DEFINE_integer("standing_stats_batches", 8,
                     "Batches for fresh BN statistics before export (0: keep stored).")


def _main() -> int:
    model_dir = common.model_dir()
    exp, checkpoint = common.restore_run(model_dir, FLAGS.checkpoint)
    if FLAGS.standing_stats_batches:
        sampling.refresh_bn_statistics(exp.generator_ema, exp.source.num_classes,
                                       FLAGS.standing_stats_batches, classes=exp.classes)
    output = FLAGS.output or os.path.join(model_dir, "export", "generator")
    export.export_generator(exp.generator_ema, output, dict(
        checkpoint=checkpoint, step=int(exp.step.numpy()),
        dataset=exp.source.name, classes=exp.classes, layout=exp.layout.precision))
    logging.info("exported the EMA generator of %s to %s", checkpoint, output)
    print(output, flush=True)
    teardown.exit_now(0)


if __name__ == "__main__":
    app.run(common.absl_main(_main))
