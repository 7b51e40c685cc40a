"""Translates your own images with a trained run's EMA generator (an image-to-image
family's: pix2pix), into a folder of PNGs.

    python bin/translate.py --model_dir=runs/pix2pix --input=my_edges/ --output=runs/out
    python bin/translate.py --model_dir=runs/pix2pix --input=edge.png --size=native

--input: one image file or a folder of them (paragan_tf/generate/translate.py). --size:
'model' fits every image to the training resolution as the training data was fitted;
'native' keeps each image's size, which must be a multiple of the model's (refused by
name otherwise). Colour is converted to the model's input channels. G runs in the run's
test mode (pix2pix.test_mode). A run whose family translates nothing (BigGAN's: it
generates from noise, bin/sample.py draws it) is refused by name.
"""

from __future__ import annotations

import os

from absl import app
from absl import flags

import common
from paragan_tf import teardown

FLAGS = flags.FLAGS
common.define_gin_flags()
flags.DEFINE_string("input", None, "An image file or a folder of them.")
flags.DEFINE_string("output", None, "Folder of the translations; default "
                    "<model_dir>/translations.")
flags.DEFINE_string("checkpoint", None, "Checkpoint prefix; default the newest in --model_dir.")
flags.DEFINE_enum("size", "model", ["model", "native"], "How images are sized (see above).")
flags.DEFINE_integer("batch_size", 16, "Images translated at once.")
flags.DEFINE_integer("seed", 0, "Seed of the paper test mode's dropout.")


def _main() -> int:
    from paragan_tf.generate import translate  # pylint: disable=import-outside-toplevel
    from paragan_tf.train import experiment  # pylint: disable=import-outside-toplevel
    from paragan_tf.train import model_dir as model_dir_lib  # noqa  pylint: disable=C0415
    if not FLAGS.input:
        common.fail("--input is required: an image file or a folder of them")
    model_dir = common.model_dir()
    files = translate.inputs_of(FLAGS.input)
    exp, checkpoint = common.restore_run(model_dir, FLAGS.checkpoint)
    subject, family = experiment.eval_subject(exp), exp.family
    multiple = family.translation_multiple(subject)  # refuses a family that cannot
    output = FLAGS.output or os.path.join(model_dir, "translations")
    written = translate.translate_files(
        files, model_dir_lib.resolve(output), lambda images: family.translate(subject, images,
                                                                        FLAGS.seed),
        channels=exp.source.channels, resolution=exp.settings.data.resolution,
        fit=exp.settings.data.fit, multiple=multiple, size=FLAGS.size,
        batch_size=FLAGS.batch_size)
    print(f"{len(written)} translations of {checkpoint} in {output}", flush=True)
    teardown.exit_now(0)


if __name__ == "__main__":
    app.run(common.absl_main(_main))
