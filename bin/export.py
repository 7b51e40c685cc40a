"""Exports a run's EMA generator as a SavedModel, as the run's GAN family serves it.

    python bin/export.py --model_dir=runs/default --output=runs/default/export/generator
    python bin/export.py --model_dir=runs/quality/run --checkpoint=runs/x/eval/best/ckpt-400
    python bin/export.py --model_dir=runs/pix2pix

BigGAN: (z, labels) -> images, after standing BN statistics (as for sample grids;
--standing_stats_batches=0 keeps the stored ones), `generator.json` beside it:
`tf.saved_model.load(path).signatures["serving_default"](z=..., labels=...)["images"]`.
pix2pix: images -> their translation, in the run's test mode, `translator.json` beside it:
`tf.saved_model.load(path).signatures["serving_default"](images=...)["images"]`.
Either loads anywhere with TensorFlow alone. A flag the run's family does not take is
refused by name.
"""

from __future__ import annotations

import os

from absl import app
from absl import flags
from absl import logging

import common
from paragan_tf import teardown

FLAGS = flags.FLAGS
common.define_gin_flags()
flags.DEFINE_string("output", None, "Export directory; default <model_dir>/export/generator.")
flags.DEFINE_string("checkpoint", None, "Checkpoint prefix; default the newest in --model_dir.")
flags.DEFINE_integer("standing_stats_batches", 8,
                     "BigGAN: batches for fresh BN statistics before export (0: keep stored).")
FAMILY_FLAGS = ("standing_stats_batches",)


def _main() -> int:
    from paragan_tf.train import experiment  # pylint: disable=import-outside-toplevel
    model_dir = common.model_dir()
    exp, checkpoint = common.restore_run(model_dir, FLAGS.checkpoint)
    options = {name: FLAGS[name].value for name in FAMILY_FLAGS if FLAGS[name].present}
    output = FLAGS.output or os.path.join(model_dir, "export", "generator")
    signature = exp.family.export(experiment.eval_subject(exp), output, dict(
        checkpoint=checkpoint, step=int(exp.step.numpy()), layout=exp.layout.precision,
        family=exp.family.name), options)
    logging.info("exported the EMA generator of %s (%s) to %s: %s", checkpoint,
                 exp.family.name, output, signature)
    print(output, flush=True)
    teardown.exit_now(0)


if __name__ == "__main__":
    app.run(common.absl_main(_main))
