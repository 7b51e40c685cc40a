"""pix2pix as a GAN family: image-to-image translation trained on input/target pairs."""

from __future__ import annotations

from typing import Dict, Iterable, List, Tuple

import numpy as np
import tensorflow as tf

from paragan_tf.data import datasets
from paragan_tf.errors import ConfigError
from paragan_tf.eval.subject import Subject
from paragan_tf.families import contract
from paragan_tf.families.pix2pix import evaluator as evaluator_lib
from paragan_tf.families.pix2pix import export as export_lib
from paragan_tf.families.pix2pix import networks
from paragan_tf.families.pix2pix import objective as objective_lib
from paragan_tf.families.pix2pix import test_time
from paragan_tf.generate import images as images_lib

# bin/sample.py's options this family takes, with their defaults: the grid's pairs (a row
# each: input | output | target) and the seed of the paper mode's dropout.
SAMPLE_OPTIONS = dict(pairs=8, seed=0)
GRID_PAIRS = 8  # rows of the training run's sample grids


class Pix2Pix(contract.Family):
    """pix2pix (families/pix2pix/networks.py) on input/target pairs (data/paired.py)."""

    name = "pix2pix"
    data_kind = datasets.PAIRS
    configurables = ("Pix2PixGenerator", "PatchDiscriminator", "pix2pix_loss", "pix2pix")
    Options = test_time.Pix2PixOptions

    def __init__(self, options=None):
        super().__init__(options or test_time.Pix2PixOptions())
        self._grid_pairs = None

    def refuse(self, settings) -> None:
        super().refuse(settings)
        s = settings
        why_not: List[Tuple[str, object, str]] = [
            ("penalties.*", s.penalties.any and "set", "D's penalties read BigGAN's "
             "D inputs; pix2pix's objective does not take them yet"),
            ("augment.policy", s.augment.transforms, "augmenting a pair needs the same "
             "transform on input and target; use dataset.random_flip and "
             "dataset.jitter_size, which move both halves alike"),
            ("augment.ada_target", s.augment.ada_target, "as augment.policy"),
            ("train.recompute", s.train.recompute, "it rematerialises BigGAN's residual "
             "blocks; the U-Net has none"),
            ("train.ortho_reg", s.train.ortho_reg, "BigGAN's orthogonal regularisation "
             "of G"),
            ("model_parallel.stages", s.model_parallel.stages > 1 and s.model_parallel.stages,
             "stages hold BigGAN's residual blocks; use model_parallel.placement='split'"),
            ("strategy.kind", s.strategy.kind == "parameter_server" and s.strategy.kind,
             "the asynchronous closures and the sample buffer generate from noise "
             "(BigGAN's); use a synchronous strategy"),
        ]
        for setting, value, why in why_not:
            if value:
                raise ConfigError(f"{setting}={value!r} is not available for pix2pix (the "
                                  f"data are pairs): {why}")
        evaluator_lib.check_config(s.eval)

    def networks(self, settings, source, layout, mode, replicas: int):
        del replicas  # no stages to balance
        side, channels = settings.data.resolution, source.channels
        made = dict(channel_multiple=layout.channel_multiple,
                    **({} if settings.model.init is None else dict(init=settings.model.init)))
        shape = dict(resolution=side, in_channels=channels, out_channels=channels, **made)
        with mode.variables_of("generator"):
            generator = networks.Pix2PixGenerator(**shape)
            generator(tf.zeros([1, side, side, channels]))
        with mode.variables_of("generator_ema"):
            generator_ema = networks.Pix2PixGenerator(name="generator_ema", **shape)
            generator_ema(tf.zeros([1, side, side, channels]))
        with mode.variables_of("discriminator"):
            discriminator = networks.PatchDiscriminator(**made)
            images = tf.zeros([1, side, side, channels])
            discriminator((images, images))
        return generator, generator_ema, discriminator

    def objective(self, settings, discriminator, d_optimizer, augment, lecam_state):
        del settings, discriminator, d_optimizer, augment, lecam_state  # refused above
        return objective_lib.ImageToImage()

    def _validation_pairs(self, run: Subject, count: int) -> tf.Tensor:
        split = evaluator_lib.validation_split(run.source, run.data, run.eval_config)
        return next(iter(evaluator_lib.pairs(run.source, run.data, split).batch(count)))[0]

    def _rows(self, run: Subject, pairs: tf.Tensor) -> np.ndarray:
        """[3 n, r, r, c]: each pair's input, the EMA generator's output, its target."""
        inputs, targets = tf.split(pairs, 2, axis=-1)
        with test_time.state_kept(run.generator_ema, self.options):
            outputs = test_time.translate(run.generator_ema, inputs, self.options)
        rows = np.stack([inputs.numpy(), outputs.numpy(), targets.numpy()], 1)
        return rows.reshape((-1,) + rows.shape[2:])

    def grid(self, run: Subject, path: str, writer, step: int, write: bool) -> None:
        """GRID_PAIRS validation pairs, a row each: input | the EMA generator's output |
        target. Every worker of a multi-worker run calls it: reading batch norm's moving
        statistics (replica-local variables) in inference mode all-reduces them."""
        if self._grid_pairs is None:
            self._grid_pairs = self._validation_pairs(run, GRID_PAIRS)
        rows = self._rows(run, self._grid_pairs)
        if not write:
            return
        grid = images_lib.grid(rows, rows=len(rows) // 3)
        images_lib.write_png(path, grid)
        with writer.as_default():
            tf.summary.image("samples/ema", grid[None], step=step)

    def sample(self, runs: Iterable[Subject], options: Dict[str, object]
               ) -> Tuple[np.ndarray, int]:
        """The first `pairs` validation pairs, a row each: input | output | target."""
        o = self.options_of("bin/sample.py", SAMPLE_OPTIONS, options)
        runs = iter(runs)
        run = next(runs)
        if next(runs, None) is not None:
            raise self.cannot("sample a per-class root (one run trains every pair)")
        if o["pairs"] < 1:
            raise ConfigError(f"--pairs={o['pairs']} must be at least 1")
        tf.random.set_seed(o["seed"])  # the paper mode's dropout
        rows = self._rows(run, self._validation_pairs(run, o["pairs"]))
        return rows, len(rows) // 3

    def translation_multiple(self, run: Subject) -> int:
        # The U-Net halves an image log2(resolution) times down to 1 x 1 at its side.
        return run.generator_ema.resolution

    def translate(self, run: Subject, images: tf.Tensor, seed: int = 0) -> tf.Tensor:
        tf.random.set_seed(seed)
        with test_time.state_kept(run.generator_ema, self.options):
            return test_time.translate(run.generator_ema, images, self.options)

    def export(self, run: Subject, path: str, info: dict, options: Dict[str, object]) -> str:
        self.options_of("bin/export.py", {}, options)
        return export_lib.export_translator(run.generator_ema, path, self.options, dict(
            info, dataset=run.source.name, multiple=self.translation_multiple(run)))

    def evaluator(self, run: Subject, output_dir: str, write: bool = True):
        return evaluator_lib.TranslationEvaluator(run, output_dir, self.options, write=write)
