"""Writes a PNG grid from the newest checkpoint's EMA generator, as the run's GAN family
draws it (paragan_tf/families/).

    python bin/sample.py --model_dir=runs/default --truncation=1.0
    python bin/sample.py --model_dir=runs/per_class   # a per-class run's root
    python bin/sample.py --model_dir=runs/default --mode=latent_interpolation
    python bin/sample.py --model_dir=runs/default --mode=class_interpolation --classes=0,5,9
    python bin/sample.py --model_dir=runs/pix2pix --pairs=16

BigGAN's modes: grid (rows = classes, the same latents in every row), latent_interpolation
(rows = classes, columns walk from one latent to another), class_interpolation (rows =
consecutive pairs of --classes, a fixed latent per row, the conditioning moving from the
first class to the second); --per_class sets the columns. For a per-class run
(bin/launch_local.py --mode=per_class) --model_dir is the root holding group_*/ folders:
each class's row comes from the generator that trained on it.

pix2pix: the first --pairs validation pairs (those its evaluation reads), a row each:
input | output | target, G in the run's test mode (pix2pix.test_mode).

A flag the run's family does not take is refused by name. The run's own
operative_config.gin (written by bin/train.py) describes the models; extra
--gin_file/--gin_bindings are applied after it.
"""

from __future__ import annotations

import glob
import os
from typing import Iterator, List

from absl import app
from absl import flags
from absl import logging

import common
from paragan_tf.generate import images

FLAGS = flags.FLAGS
common.define_gin_flags()
flags.DEFINE_string("mode", "grid", "BigGAN: grid, latent_interpolation or "
                    "class_interpolation (see above).")
flags.DEFINE_string("output", None,
                    "PNG path; default <model_dir>/samples/sample.png (grid) or <mode>.png.")
flags.DEFINE_float("truncation", 0.0, "BigGAN: truncation threshold for z (0: none).")
flags.DEFINE_integer("per_class", 10, "BigGAN: samples per class (grid columns).")
flags.DEFINE_list("classes", None, "BigGAN: class ids for the rows; default: all (up to 10).")
flags.DEFINE_integer("seed", 0, "Seed of the latents (pix2pix: of the paper mode's dropout).")
flags.DEFINE_integer("standing_stats_batches", 8, "BigGAN: batches for fresh BN statistics "
                     "of the EMA generator (0: keep stored).")
flags.DEFINE_integer("pairs", 8, "pix2pix: validation pairs in the grid, a row each.")
# What the families read; --output, --model_dir and the gin flags are the binary's own.
FAMILY_FLAGS = ("mode", "truncation", "per_class", "classes", "seed",
                "standing_stats_batches", "pairs")


def _run_dirs(model_dir: str) -> List[str]:
    if os.path.exists(os.path.join(model_dir, "operative_config.gin")):
        return [model_dir]
    groups = sorted(os.path.dirname(p) for p in
                    glob.glob(os.path.join(model_dir, "group_*", "operative_config.gin")))
    if not groups:
        common.fail(f"--model_dir={model_dir} has no operative_config.gin (nor group_*/ "
                    "folders of a per-class run); is it a training run's folder?")
    return groups


def _subjects(run_dirs: List[str], first) -> Iterator:
    """The runs as eval subjects, the first already restored, the others as they are read."""
    from paragan_tf.train import experiment  # pylint: disable=import-outside-toplevel
    yield experiment.eval_subject(first)
    for run_dir in run_dirs[1:]:
        yield experiment.eval_subject(common.restore_run(run_dir)[0])


def _main() -> int:
    model_dir = common.model_dir()
    run_dirs = _run_dirs(model_dir)
    first, _ = common.restore_run(run_dirs[0])
    options = {name: FLAGS[name].value for name in FAMILY_FLAGS if FLAGS[name].present}
    samples, rows = first.family.sample(_subjects(run_dirs, first), options)
    name = "sample.png" if FLAGS.mode == "grid" else f"{FLAGS.mode}.png"
    output = FLAGS.output or os.path.join(model_dir, "samples", name)
    images.write_png(output, images.grid(samples, rows=rows))
    logging.info("%s (%s): %s", first.family.name, FLAGS.mode, output)
    print(output, flush=True)
    return 0


if __name__ == "__main__":
    app.run(common.absl_main(_main))
