"""The GAN families a run trains, and what differs between them, in one place.

The data decide (`of(paired)`): pairs (data/paired.py) train pix2pix, labelled images train
BigGAN. The rest of a run asks its family, never which one it is:

  refuse(settings)   the settings the family does not take, by name (beside the strategy
                     rules of train/combinations.py); a binding of the other family's
                     networks or loss (`CONFIGURABLES`) is one of them, so nothing a gin
                     file binds is silently ignored
  networks(...)      G, its EMA copy and D, made and built inside strategy.scope(), each
                     where the parallel mode keeps it
  loss(), objective(...)  BigGAN's loss pair (`loss.fn`; pix2pix has none) and what the
                     train step computes (objective/objectives.py)
  grid(...)          the sample grid of every train.sample_every steps
  evaluator(...)     what an evaluation measures: distances of samples to the data
                     (eval/evaluator.py) or of translations to their targets
                     (eval/translation.py)
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import gin
import numpy as np
import tensorflow as tf

from paragan_tf.errors import ConfigError
from paragan_tf.eval import evaluator as evaluator_lib
from paragan_tf.eval import subject as subject_lib
from paragan_tf.eval import translation
from paragan_tf.generate import images as images_lib
from paragan_tf.generate import sampling
from paragan_tf.models import biggan
from paragan_tf.models import pix2pix
from paragan_tf.objective import losses
from paragan_tf.objective import objectives

# Each family's gin configurables: bound for the other family, they are refused.
CONFIGURABLES = {"biggan": ("Generator", "Discriminator", "loss"),
                 "pix2pix": ("Pix2PixGenerator", "PatchDiscriminator", "pix2pix_loss")}
GRID_PAIRS = 8  # rows of a pix2pix sample grid: input | output | target


def _refuse_others(family: str, settings) -> None:
    holds = "labelled images" if family == "biggan" else "pairs"
    for other, names in CONFIGURABLES.items():
        if other == family:
            continue
        for name in names:
            bound = gin.get_bindings(name, resolve_references=False)
            if bound:
                raise ConfigError(
                    f"{name}.{sorted(bound)[0]} configures {other}, but "
                    f"dataset.name={settings.data.name!r} holds {holds}, so this run trains "
                    f"{family}; remove the binding or choose a dataset of the other kind")


def _init(settings) -> dict:
    return {} if settings.model.init is None else dict(init=settings.model.init)


class BigGAN:
    """Class-conditional BigGAN on labelled images (models/biggan.py)."""

    name = "biggan"

    def refuse(self, settings) -> None:
        _refuse_others(self.name, settings)
        if settings.data.resolution not in biggan.G_ARCH:
            raise ConfigError(f"dataset.resolution={settings.data.resolution} has no BigGAN "
                              f"architecture; choose one of {sorted(biggan.G_ARCH)}")

    def networks(self, settings, source, layout, mode, replicas: int):
        config, data = settings.train, settings.data
        shape = dict(resolution=data.resolution, num_classes=source.num_classes,
                     channel_multiple=layout.channel_multiple, **_init(settings))
        with mode.variables_of("generator"):
            generator = biggan.Generator(out_channels=source.channels,
                                         recompute=config.recompute, **shape)
        with mode.variables_of("generator_ema"):
            generator_ema = biggan.Generator(out_channels=source.channels,
                                             name="generator_ema", **shape)
        with mode.variables_of("discriminator"):
            discriminator = biggan.Discriminator(recompute=config.recompute, **shape)
        mode.place_blocks(generator, discriminator, generator_ema,
                          config.batch_size // replicas)
        # Keras makes a model's variables at its first call: each where the mode keeps it.
        with mode.variables_of("generator"):
            biggan.build_generator(generator)
        with mode.variables_of("generator_ema"):
            biggan.build_generator(generator_ema)
        with mode.variables_of("discriminator"):
            biggan.build_discriminator(discriminator, data.resolution, source.channels)
        return generator, generator_ema, discriminator

    def loss(self):
        return losses.loss()

    def objective(self, loss_fn, augment):
        return objectives.ClassConditional(loss_fn, augment)

    def grid(self, exp, path: str, writer, step: int, write: bool) -> None:
        """One row per class (some of them), the EMA generator's; every worker of a
        multi-worker run calls it (standing BN statistics run collective ops)."""
        cfg = exp.settings.train
        # Batches no larger than training's: at 512-1024 px a batch of 64 needs many GiB.
        sampling.write_grid(exp.generator_ema, exp.classes, path, writer, step,
                            bn_batch_size=min(64, cfg.batch_size),
                            per_class=10 if exp.settings.data.resolution <= 256 else 2,
                            seed=cfg.seed, write=write)

    def evaluator(self, subject: subject_lib.Subject, output_dir: str, write: bool = True):
        return evaluator_lib.Evaluator(subject, output_dir, write=write)


class Pix2Pix:
    """pix2pix on input/target pairs (models/pix2pix.py)."""

    name = "pix2pix"

    def __init__(self):
        self._grid_pairs: Optional[tf.Tensor] = None

    def refuse(self, settings) -> None:
        _refuse_others(self.name, settings)
        s = settings
        why_not: List[Tuple[str, object, str]] = [
            ("penalties.*", s.penalties.any and "set", "D's penalties read BigGAN's "
             "D inputs; pix2pix's objective does not take them yet"),
            ("augment.policy", s.augment.transforms, "augmenting a pair needs the same "
             "transform on input and target; pix2pix's objective does not take it yet"),
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
        translation.check_config(s.eval)

    def networks(self, settings, source, layout, mode, replicas: int):
        del replicas  # no stages to balance
        side, channels = settings.data.resolution, source.channels
        made = dict(channel_multiple=layout.channel_multiple, **_init(settings))
        shape = dict(resolution=side, in_channels=channels, out_channels=channels, **made)
        with mode.variables_of("generator"):
            generator = pix2pix.Pix2PixGenerator(**shape)
            generator(tf.zeros([1, side, side, channels]))
        with mode.variables_of("generator_ema"):
            generator_ema = pix2pix.Pix2PixGenerator(name="generator_ema", **shape)
            generator_ema(tf.zeros([1, side, side, channels]))
        with mode.variables_of("discriminator"):
            discriminator = pix2pix.PatchDiscriminator(**made)
            images = tf.zeros([1, side, side, channels])
            discriminator((images, images))
        return generator, generator_ema, discriminator

    def loss(self):
        return None  # pix2pix_loss.* configures the objective

    def objective(self, loss_fn, augment):
        del loss_fn, augment  # BigGAN's; refused above when set
        return objectives.ImageToImage()

    def grid(self, exp, path: str, writer, step: int, write: bool) -> None:
        """GRID_PAIRS validation pairs, a row each: input | the EMA generator's output |
        target. Every worker of a multi-worker run calls it: reading batch norm's moving
        statistics (replica-local variables) in inference mode all-reduces them."""
        if self._grid_pairs is None:
            split = translation.validation_split(exp.source, exp.settings.data,
                                                 exp.settings.eval)
            self._grid_pairs = next(iter(translation.pairs(
                exp.source, exp.settings.data, split).batch(GRID_PAIRS)))[0]
        inputs, targets = tf.split(self._grid_pairs, 2, axis=-1)
        outputs = exp.generator_ema(inputs, training=False)
        if not write:
            return
        rows = np.stack([inputs.numpy(), outputs.numpy(), targets.numpy()], 1)
        grid = images_lib.grid(rows.reshape((-1,) + rows.shape[2:]), rows=len(rows))
        images_lib.write_png(path, grid)
        with writer.as_default():
            tf.summary.image("samples/ema", grid[None], step=step)

    def evaluator(self, subject: subject_lib.Subject, output_dir: str, write: bool = True):
        return translation.TranslationEvaluator(subject, output_dir, write=write)


def of(paired: bool):
    """The family that trains a source of pairs (`paired`) or of labelled images."""
    return Pix2Pix() if paired else BigGAN()
