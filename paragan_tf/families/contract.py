"""What a GAN family is: the contract every family keeps (docs/families.md).

One train step (train/step.py), one pair of trainers, one controller and one set of
binaries serve every family; what differs between families is behind this contract, and
nothing outside a family's package asks which family a run trains:

  Family      a registered plugin (families/registry.py): the data it trains on, its gin
              configurables and options, its refusals, what identifies its step in the
              layout cache, its networks, its objective, and what a trained run of it
              gives: the sample grid, samples or translations, an export, an evaluator
  Objective   what one train step computes from a batch: how G makes its images, how D
              judges them, the per-example losses, D's own extra terms and the state that
              follows D's outputs
  NoBlocks    what the plans (paragan_tf/scale/) and the parallel modes read of a
              network that has no residual blocks to rematerialise or stage

What a network must offer the step, the plans and the parallel modes (BigGAN's and
pix2pix's do; NoBlocks gives the block part):
  resolution, out_channels, dim_z (0: no noise vector)
  call_inputs(batch, ...)        the TensorSpecs one call takes (scale/flops.py)
  recompute, block_devices, block_shapes, block_costs(batch)   (its residual blocks)

Every after-training method takes an eval/subject.py Subject: the trained networks, the
data, the strategy and the run's evaluation settings, never the Experiment above.
"""

from __future__ import annotations

import abc
from typing import ClassVar, Dict, Iterable, Optional, Tuple

import numpy as np
import tensorflow as tf

from paragan_tf.errors import ConfigError
from paragan_tf.eval.subject import Subject
from paragan_tf.families import registry

Batch = Tuple[tf.Tensor, tf.Tensor]


class NoBlocks:
    """A network without residual blocks, as the plans and the parallel modes read it:
    nothing to rematerialise (train.recompute) or to place in pipeline stages (refuse both
    in the family's `refuse`)."""

    recompute = False
    block_devices = ()
    block_shapes = ()

    @staticmethod
    def block_costs(batch: int) -> list:
        del batch
        return []


class Objective(abc.ABC):
    """What one replica's train step computes from its batches, for one family.

    The step (train/step.py) owns the tapes, the replicas, accumulation, precision and the
    NaN guard. Real batches are (images, labels) and noise batches (z, labels), as the
    input pipelines make them (data/pipeline.py): a family reads what it needs of them.

    Attributes:
      pairs_real: G's update reads the real batch of the last D update (pix2pix's inputs
        and targets, a relativistic loss's partners).
      reuses_fakes: G's update takes the images G made for the last D update, with their
        forward pass (one G forward per micro-batch, one dropout mask, batch norm's
        moving statistics moved once), instead of new ones from fresh noise.
    """

    pairs_real: ClassVar[bool] = False
    reuses_fakes: ClassVar[bool] = False

    @abc.abstractmethod
    def batch_specs(self, generator, batch: int, size: int, channels: int):
        """(a real batch's TensorSpecs, a noise batch's) of `batch` examples: what the
        plans trace (measure/traced.py)."""

    @abc.abstractmethod
    def generate(self, generator, real: Optional[Batch], noise: Batch) -> tf.Tensor:
        """G's images for this micro-batch, in training mode."""

    @abc.abstractmethod
    def judge(self, discriminator, fakes: tf.Tensor, real: Batch, noise: Batch):
        """D on `fakes` and the real batch: (real logits, fake logits, what D's extra
        terms read of what it saw)."""

    @abc.abstractmethod
    def d_loss(self, real_logits, fake_logits, seen, noise: Batch) -> tf.Tensor:
        """D's per-example loss, its extra terms (penalties) included."""

    def after_d_update(self, real_sum, fake_sum, sign_sum, count: float, applied) -> None:
        """State that follows D's outputs, from one D update's logit sums over `count`
        examples per replica (kept only if `applied`); none by default."""
        del real_sum, fake_sum, sign_sum, count, applied

    @abc.abstractmethod
    def judge_fakes(self, discriminator, fakes: tf.Tensor, real: Optional[Batch],
                    noise: Batch):
        """(D's logits of G's images, D's logits of the paired real ones, or those again)."""

    @abc.abstractmethod
    def g_loss(self, gen_logits, real_logits, fakes: tf.Tensor,
               real: Optional[Batch]) -> tf.Tensor:
        """G's per-example loss."""

    @staticmethod
    def per_example(logits: tf.Tensor) -> tf.Tensor:
        """D's logits as one number per example (the step's logit metrics, ADA's signs)."""
        return logits


class Family(abc.ABC):
    """A GAN family: one subclass per family, registered by name (families/registry.py).

    Class attributes:
      name: the registry name (`family.name` in gin).
      data_kind: what it trains on: data/datasets.py's LABELLED or PAIRS.
      configurables: its gin configurables (networks, loss, options): bound in a run of
        another family, they are refused by name.
      Options: its own gin-configurable options class, made by the settings module
        (train/settings.py) and handed to the constructor; None: it has none.
      class_conditional: G draws images of given classes from noise (class-row grids,
        FCD, conditional accuracy: bin/quality.py).
    """

    name: ClassVar[str]
    data_kind: ClassVar[str]
    configurables: ClassVar[Tuple[str, ...]] = ()
    Options: ClassVar[Optional[type]] = None
    class_conditional: ClassVar[bool] = False

    def __init__(self, options=None):
        self.options = options

    # Before anything is built ------------------------------------------------------------
    def refuse(self, settings) -> None:
        """Raises ConfigError naming the first setting this family does not take. By
        default: a binding of another family's configurable (`settings.model.bound`)."""
        owners = {name: family for family, names in registry.configurables().items()
                  for name in names}
        for name, bound in sorted(settings.model.bound.items()):
            if bound and name not in self.configurables:
                owner = owners.get(name, "another family")
                raise ConfigError(
                    f"{name}.{sorted(bound)[0]} configures {owner}, but dataset.name="
                    f"{settings.data.name!r} holds {self.data_kind}, so this run trains "
                    f"{self.name}; remove the binding, or set family.name")

    def cache_identity(self, settings) -> Dict[str, object]:
        """What identifies this family's step beside the shared step shape in the layout
        cache's key (measure/tuning.py): by default its name and its configurables' gin
        bindings. Keep a key once cached: a changed one measures every machine again."""
        bound = {f"{name}.{k}": v for name in self.configurables
                 for k, v in settings.model.bound.get(name, {}).items()}
        return dict(family=self.name, networks=dict(sorted(bound.items())))

    # The run's parts ---------------------------------------------------------------------
    @abc.abstractmethod
    def networks(self, settings, source, layout, mode, replicas: int):
        """(G, its EMA copy, D), made and built inside strategy.scope(), each where the
        parallel mode (distribute/mode.py) keeps it."""

    @abc.abstractmethod
    def objective(self, settings, discriminator, d_optimizer, augment,
                  lecam_state) -> Objective:
        """What the train step computes (`augment`, `lecam_state`: what D's extra terms
        use, None where the settings ask for none)."""

    # A trained run -----------------------------------------------------------------------
    @abc.abstractmethod
    def grid(self, run: Subject, path: str, writer, step: int, write: bool) -> None:
        """The sample grid of every train.sample_every steps, to the PNG `path` and to
        TensorBoard (`writer`) where `write`. Every worker of a multi-worker run calls it."""

    def sample(self, runs: Iterable[Subject], options: Dict[str, object]) -> Tuple[np.ndarray,
                                                                                    int]:
        """bin/sample.py: (images [n, h, w, c] in [-1, 1], rows of the grid) from `runs`
        (one run, or a per-class root's runs, restored as they are read), with the
        binary's `options` the user set (a name it does not take is refused by name)."""
        del runs, options
        raise self.cannot("draw samples (bin/sample.py)")

    def translate(self, run: Subject, images: tf.Tensor, seed: int = 0) -> tf.Tensor:
        """bin/translate.py: the run's translation of `images` (float32 [n, h, w, c] in
        [-1, 1], each side a multiple of `translation_multiple`)."""
        del run, images, seed
        raise self.cannot("translate images (bin/translate.py)")

    def translation_multiple(self, run: Subject) -> int:
        """The multiple every side of an image `translate` takes must be."""
        del run
        raise self.cannot("translate images (bin/translate.py)")

    @abc.abstractmethod
    def export(self, run: Subject, path: str, info: dict, options: Dict[str, object]) -> str:
        """bin/export.py: writes the run's EMA generator as a SavedModel at `path`
        (TensorFlow alone loads it), with `info` beside it; returns its serving signature
        in words. `options`: the binary's options the user set, as `sample`'s."""

    @abc.abstractmethod
    def evaluator(self, run: Subject, output_dir: str, write: bool = True):
        """What an evaluation measures (evaluate(step, checkpoint, writer), protocol,
        describe(), history, timings, write_stats(path))."""

    def options_of(self, binary: str, defaults: Dict[str, object],
                   given: Dict[str, object]) -> Dict[str, object]:
        """`defaults` updated with the options a user `given` to `binary`; ConfigError
        naming the first one this family does not take."""
        unknown = sorted(set(given) - set(defaults))
        if unknown:
            takes = ", ".join("--" + k for k in defaults) or "none"
            raise self.cannot(f"take {binary}'s --{unknown[0]} (its options for "
                              f"{self.name}: {takes})")
        return dict(defaults, **given)

    def cannot(self, what: str) -> ConfigError:
        """The refusal of something this family does not do, naming it."""
        return ConfigError(f"the GAN family {self.name!r} ({self.data_kind}) cannot {what}")

