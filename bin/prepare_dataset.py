"""Turns an image folder, a zip of one, or a prepared TFDS dataset into TFRecord shards.

    python bin/prepare_dataset.py --source=photos/ --output=data/photos64 --resolution=64
    python bin/prepare_dataset.py --source=photos.zip --output=data/p128 --resolution=128 \
        --policy=pad --group_by_class
    python bin/prepare_dataset.py --source=tfds:cifar10 --tfds_data_dir=~/tensorflow_datasets \
        --output=data/cifar32 --resolution=32
    python bin/prepare_dataset.py --source=facades/ --paired --split=train \
        --output=data/facades256 --resolution=256 --policy=resize

Then train on it with `--gin_bindings="dataset.name='records'"
--gin_bindings="dataset.data_dir='data/photos64'"`. The source folder holds one
sub-folder per class (with --paired, one per split of input|target pairs, pix2pix's
format: each half is fitted alone); hidden entries and non-image files are skipped and
counted. Work runs on every core, memory stays flat however many images there
are, and an interrupted run resumes where it stopped when started again with
the same arguments (paragan_tf/data/prepare.py has the details).
"""

from __future__ import annotations

from absl import app
from absl import flags

import common
from paragan_tf.data import prepare

FLAGS = flags.FLAGS
flags.DEFINE_string("source", None, "Image folder (<class>/<image>), a zip of one, or tfds:NAME.")
flags.DEFINE_string("output", None, "Directory for the shards and dataset.json.")
flags.DEFINE_integer("resolution", None, "Side of the square images stored.")
flags.DEFINE_enum("policy", "center_crop", list(prepare.POLICIES),
                  "center_crop: the centred square, resized; pad: resized to fit, centred on "
                  "black; resize: stretched to the square.")
flags.DEFINE_bool("group_by_class", False,
                  "One class per shard (per-class training then opens only its classes').")
flags.DEFINE_integer("images_per_shard", 1000, "Images per shard.")
flags.DEFINE_enum("encoding", "png", list(prepare.ENCODINGS), "png (lossless) or jpeg (q 95).")
flags.DEFINE_integer("channels", 0, "1 or 3; 0: 1 when the images are greyscale, else 3.")
flags.DEFINE_string("split", "train", "TFDS sources and --paired: the split to prepare.")
flags.DEFINE_bool("paired", False, "The source is a pix2pix folder, <split>/<image> with each "
                  "image an input and its target side by side; each half is fitted alone.")
flags.DEFINE_string("tfds_data_dir", None, "TFDS sources: where the dataset is prepared.")
flags.DEFINE_integer("workers", 0, "Worker processes; 0: one per core.")


def _main() -> int:
    for name in ("source", "output", "resolution"):
        if FLAGS[name].value is None:
            common.fail(f"--{name} is required")
    prepare.prepare(prepare.Options(
        FLAGS.source, FLAGS.output, FLAGS.resolution, FLAGS.policy, FLAGS.group_by_class,
        FLAGS.images_per_shard, FLAGS.encoding, FLAGS.channels, FLAGS.split,
        FLAGS.tfds_data_dir, FLAGS.workers, FLAGS.paired),
        log=lambda line: print(line, flush=True))
    return 0


if __name__ == "__main__":
    app.run(common.absl_main(_main))
