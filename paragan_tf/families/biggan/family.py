"""BigGAN as a GAN family: class-conditional generation from noise on labelled images."""

from __future__ import annotations

from typing import Dict, Iterable, List, Tuple

import numpy as np

from paragan_tf.data import datasets
from paragan_tf.errors import ConfigError
from paragan_tf.eval import evaluator as evaluator_lib
from paragan_tf.eval.subject import Subject
from paragan_tf.families import contract
from paragan_tf.families.biggan import networks as biggan
from paragan_tf.families.biggan import objective as objective_lib
from paragan_tf.generate import export as export_lib
from paragan_tf.generate import sampling
from paragan_tf.objective import d_terms as d_terms_lib
from paragan_tf.objective import losses
from paragan_tf import precision as precision_lib

# bin/sample.py's and bin/export.py's options this family takes, with their defaults.
SAMPLE_OPTIONS = dict(mode="grid", per_class=10, classes=None, seed=0, truncation=0.0,
                      standing_stats_batches=8)
EXPORT_OPTIONS = dict(standing_stats_batches=8)
SAMPLE_MODES = ("grid", "latent_interpolation", "class_interpolation")


class BigGAN(contract.Family):
    """Class-conditional BigGAN (families/biggan/networks.py) on labelled images; its
    options are its loss pair (`loss.fn`)."""

    name = "biggan"
    data_kind = datasets.LABELLED
    configurables = ("Generator", "Discriminator", "loss")
    Options = losses.loss
    class_conditional = True

    def refuse(self, settings) -> None:
        super().refuse(settings)
        if settings.data.resolution not in biggan.G_ARCH:
            raise ConfigError(f"dataset.resolution={settings.data.resolution} has no BigGAN "
                              f"architecture; choose one of {sorted(biggan.G_ARCH)}")
        if settings.strategy.kind == "parameter_server" and self.options.pairs_real:
            raise ConfigError(f"loss.fn='@{self.options.name}' is not available under "
                              f"strategy.kind='parameter_server': a G closure has no real "
                              f"batch to pair its images with; use @hinge or @non_saturating")

    def cache_identity(self, settings) -> Dict[str, object]:
        # The keys the layout cache has had since before families were plugins.
        g = settings.model.bound.get("Generator", {})
        return dict(generator_ch=g.get("ch"), dim_z=g.get("dim_z"),
                    discriminator_ch=settings.model.bound.get("Discriminator", {}).get("ch"))

    def networks(self, settings, source, layout, mode, replicas: int):
        config, data = settings.train, settings.data
        shape = dict(resolution=data.resolution, num_classes=source.num_classes,
                     channel_multiple=layout.channel_multiple,
                     **({} if settings.model.init is None else dict(init=settings.model.init)))
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

    def objective(self, settings, discriminator, d_optimizer, augment, lecam_state):
        cfg = settings.train
        d_terms = d_terms_lib.DTerms(
            discriminator, settings.penalties, precision_lib.Precision(d_optimizer),
            d_optimizer, cfg.batch_size * cfg.accumulation, augment, lecam_state)
        return objective_lib.ClassConditional(self.options, augment, d_terms)

    def grid(self, run: Subject, path: str, writer, step: int, write: bool) -> None:
        """One row per class (some of them), the EMA generator's, after standing BN
        statistics (collective ops in a multi-worker run: every worker calls it)."""
        # Batches no larger than training's: at 512-1024 px a batch of 64 needs many GiB.
        sampling.write_grid(run.generator_ema, list(run.classes), path, writer, step,
                            bn_batch_size=min(64, run.batch_size),
                            per_class=10 if run.data.resolution <= 256 else 2,
                            seed=run.seed, write=write)

    def sample(self, runs: Iterable[Subject], options: Dict[str, object]
               ) -> Tuple[np.ndarray, int]:
        """Modes: grid (rows = classes, the same latents in every row; a per-class root's
        rows each from the run that trained the class), latent_interpolation (columns
        walk from one latent to another), class_interpolation (rows = consecutive pairs of
        `classes`, the conditioning moving from the first to the second)."""
        o = self.options_of("bin/sample.py", SAMPLE_OPTIONS, options)
        if o["mode"] not in SAMPLE_MODES:
            raise ConfigError(f"--mode={o['mode']} must be one of {SAMPLE_MODES}")
        runs = iter(runs)
        first = next(runs)
        if o["mode"] == "grid":
            return self._class_rows(first, runs, o)
        if next(runs, None) is not None:
            raise ConfigError(f"--mode={o['mode']} needs a single run; a per-class root has "
                              f"one generator per group (pass one group_*/ folder)")
        wanted = _wanted(first, o["classes"])
        self._refresh(first, o)
        truncation = o["truncation"] or None
        if o["mode"] == "latent_interpolation":
            return sampling.latent_interpolation(first.generator_ema, wanted, o["per_class"],
                                                 o["seed"], truncation), len(wanted)
        pairs = list(zip(wanted, wanted[1:]))
        if not pairs:
            raise ConfigError("--mode=class_interpolation needs at least two --classes")
        return sampling.class_interpolation(first.generator_ema, pairs, o["per_class"],
                                            o["seed"], truncation), len(pairs)

    def _class_rows(self, first: Subject, rest, o: dict) -> Tuple[np.ndarray, int]:
        rows, wanted = {}, _wanted(first, o["classes"])
        for run in [first, *rest]:
            mine = [c for c in wanted if c in run.classes and c not in rows]
            if not mine:
                continue
            self._refresh(run, o)
            samples = sampling.class_samples(run.generator_ema, mine, o["per_class"],
                                             o["seed"], o["truncation"] or None)
            for i, c in enumerate(mine):
                rows[c] = samples[i * o["per_class"]:(i + 1) * o["per_class"]]
        missing = [c for c in wanted if c not in rows]
        if missing:
            raise ConfigError(f"no run here trained classes {missing}")
        return np.concatenate([rows[c] for c in wanted]), len(wanted)

    @staticmethod
    def _refresh(run: Subject, o: dict) -> None:
        if o["standing_stats_batches"]:
            sampling.refresh_bn_statistics(run.generator_ema, run.source.num_classes,
                                           o["standing_stats_batches"], classes=run.classes)

    def export(self, run: Subject, path: str, info: dict, options: Dict[str, object]) -> str:
        """(z, labels) -> images, after standing BN statistics (as the sample grids;
        standing_stats_batches=0 keeps the stored ones)."""
        self._refresh(run, self.options_of("bin/export.py", EXPORT_OPTIONS, options))
        export_lib.export_generator(run.generator_ema, path, dict(
            info, dataset=run.source.name, classes=list(run.classes)))
        return export_lib.SIGNATURE

    def evaluator(self, run: Subject, output_dir: str, write: bool = True):
        return evaluator_lib.Evaluator(run, output_dir, write=write)


def _wanted(run: Subject, classes) -> List[int]:
    num_classes = run.source.num_classes
    wanted = ([int(c) for c in classes] if classes
              else sampling.default_classes(num_classes))
    bad = [c for c in wanted if not 0 <= c < num_classes]
    if bad:
        raise ConfigError(f"--classes {bad} out of range [0, {num_classes})")
    return wanted
