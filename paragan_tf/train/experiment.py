"""Everything a run is made of, built from the frozen gin config.

`Settings.read()` (train/settings.py, the one module that reads gin) makes every option
object of a run and decides its GAN family; `build()` turns them into objects: the
strategy, the data source, the family (paragan_tf/families/: its G, D and EMA G, whose
constructors are configurable themselves, and its objective), both optimizers and the step
counter, all created inside `strategy.scope()`. An Experiment holds its settings
once (`exp.settings`, with the input options as `build` resolved them); modules
below train/ receive the plain objects they need, never an Experiment. The
trainers, the sampler, the evaluator and the dry run all start here; `parse()`
parses gin files after every configurable is registered (importing this module
imports them all; a gin file's `import` line registers a user's own family).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Callable, List, Optional, Sequence, Tuple

from absl import logging
import numpy as np
import tensorflow as tf
import tf_keras as keras

from paragan_tf import config as gin_config
from paragan_tf import families
from paragan_tf import models
from paragan_tf.layout import rules as layout_lib
from paragan_tf.layout.choice import Choice
from paragan_tf.data import class_groups
from paragan_tf.data import class_list
from paragan_tf.data import datasets
from paragan_tf.data import pipeline
from paragan_tf.data import tuning
from paragan_tf.distribute import mode as mode_lib
from paragan_tf.distribute import model_parallel as parallel_lib
from paragan_tf.distribute import strategy as strategy_lib
from paragan_tf.errors import ConfigError
from paragan_tf.eval import subject as subject_lib
from paragan_tf.families import contract
from paragan_tf.objective import ada as ada_lib
from paragan_tf.objective import augment as augment_lib
from paragan_tf.train import bookkeeping as bookkeeping_lib
from paragan_tf.train import checkpoints
from paragan_tf.train import combinations
from paragan_tf.train import config as config_lib
from paragan_tf.train import ema as ema_lib
from paragan_tf.train import model_dir as model_dir_lib
from paragan_tf.train import optimizers
from paragan_tf.train import settings as settings_lib
from paragan_tf.train.settings import ModelOptions, Settings  # noqa: F401  (experiment.*)

# A stand-in source of each data kind, for timing a step whose data is elsewhere.
STAND_INS = {datasets.LABELLED: "synthetic", datasets.PAIRS: "synthetic_pairs"}


def parse(gin_files: Sequence[str], gin_bindings: Sequence[str], finalize: bool = True) -> None:
    """Parses gin files and bindings (config.parse) with every configurable registered, so
    a binding that names something unknown is an error here, not a silent no-op."""
    gin_config.parse(gin_files, gin_bindings, finalize=finalize)


def build_or_stand_in(gin_files: Sequence[str], gin_bindings: Sequence[str],
                      measured: Optional[Choice] = None) -> Tuple["Experiment", str]:
    """(the run the gin config describes, where its pixels come from): its own data, or,
    when that is not on this machine, a synthetic source of the same shape. For timing a
    step, whose compute does not depend on the pixels. `measured`: as build's."""
    parse(gin_files, gin_bindings)
    exp = build(check_data=False, measured=measured)
    try:
        exp.source.check()
        return exp, exp.source.name
    except ConfigError as e:
        missing = str(e).splitlines()[0]
    stand_in = STAND_INS[exp.source.kind]
    parse(gin_files, list(gin_bindings) + [f"dataset.name = '{stand_in}'",
                                           f"dataset.channels = {exp.source.channels}"])
    return build(measured=measured), f"{stand_in} stand-in ({missing})"


@dataclasses.dataclass
class Experiment:
    settings: Settings
    source: datasets.Source
    strategy: tf.distribute.Strategy
    generator: keras.Model  # the family's (BigGAN's Generator, pix2pix's U-Net, ...)
    discriminator: keras.Model
    generator_ema: keras.Model
    g_optimizer: keras.optimizers.Optimizer
    d_optimizer: keras.optimizers.Optimizer
    step: tf.Variable
    health: bookkeeping_lib.Health
    input_state: tf.Variable  # int64 [noise seed, real-image seed, its first step]
    ema: ema_lib.GeneratorEMA
    bookkeeping: bookkeeping_lib.StepBookkeeping  # what follows every step
    classes: List[int]  # the labels this run trains on (a subset under per-class training)
    layout: layout_lib.Layout
    mode: mode_lib.Mode  # the parallel mode: G's and D's devices, how updates apply
    family: contract.Family  # the GAN family it trains (paragan_tf/families/)
    objective: contract.Objective  # what the train step computes (the family's)
    # What D's inputs go through: augment.DiffAugment, ada.AdaptiveAugment or None.
    augment: Optional[Callable[[tf.Tensor, tf.Tensor], tf.Tensor]] = None
    lecam_state: Optional[tf.Variable] = None  # LeCam's averages of D's logits (step.py)
    # gin's operative config once everything is built: what operative_config.gin records.
    operative_config: str = ""

    def trackables(self) -> dict:
        """What a checkpoint holds."""
        return dict(generator=self.generator, discriminator=self.discriminator,
                    generator_ema=self.generator_ema, g_optimizer=self.g_optimizer,
                    d_optimizer=self.d_optimizer, step=self.step,
                    skipped_steps=self.health.skipped, consecutive_skips=self.health.consecutive,
                    input_state=self.input_state,
                    **({} if self.lecam_state is None else dict(lecam_state=self.lecam_state)),
                    **(self.augment.trackables()
                       if isinstance(self.augment, ada_lib.AdaptiveAugment) else {}))


def refuse(settings: Settings) -> None:
    """Raises ConfigError naming the first setting the run cannot take that its settings
    alone decide: the family's refusals, the strategy's combinations (train/combinations.py)
    and the parallel mode's. bin/train.py calls it before the layout tuning, so a refused
    setting is one line before any child process starts, tuned or pinned alike."""
    families.family_class(settings.model.family)(settings.model.options).refuse(settings)
    combinations.refuse(settings, settings.strategy.kind)
    settings.model_parallel.mode_class.refuse_settings(
        settings.model_parallel, settings.strategy.kind,
        (settings.g_optimizer, settings.d_optimizer), settings.layout.precision)


def build(strategy: Optional[tf.distribute.Strategy] = None, check_data: bool = True,
          settings: Optional[Settings] = None,
          measured: Optional[Choice] = None) -> Experiment:
    """Builds the run described by `settings` (default: read from the current gin config).
    Raises ConfigError on bad settings.

    check_data=False skips the check that the data is present (dry runs). `measured`:
    the layout measure/tuning.py measured for this step (None: the rules decide).
    """
    settings = settings or Settings.read()
    config, data, input_config = settings.train, settings.data, settings.inputs
    source = pipeline.load_source(data, check=check_data)
    family = families.family_class(settings.model.family)(settings.model.options)
    if source.kind != family.data_kind:  # settings made for other data
        raise ConfigError(f"family.name={family.name!r} trains on {family.data_kind}, but "
                          f"dataset.name={data.name!r} holds {source.kind}")
    family.refuse(settings)
    if source.prepared is not None:  # read as the shards it was prepared in
        shards = len(source.prepared.manifest.shards)
        if input_config.num_shards not in (shards, tuning.InputConfig.num_shards):
            logging.warning("input_pipeline.num_shards=%d does not apply to dataset.name="
                            "'records': it is read as its %d shards", input_config.num_shards,
                            shards)
        input_config = dataclasses.replace(input_config, prepared=True, num_shards=shards)
        settings = dataclasses.replace(settings, inputs=input_config)
    classes = class_groups.classes_for(source.num_classes)
    augment_settings, penalties = settings.augment, settings.penalties
    if strategy is None:
        parallel_lib.prepare_devices(settings.model_parallel, settings.strategy.kind)
        strategy = strategy_lib.make_strategy(settings.strategy, settings.cluster)
    mode = parallel_lib.make(settings.model_parallel, strategy)
    if mode.spread:
        logging.info("model parallel: %s", mode.describe())
    if check_data:  # after the strategy: it runs TensorFlow ops
        pipeline.check_not_empty(source, data, classes)
    config_lib.check_batch(config, strategy.num_replicas_in_sync)
    combinations.refuse(settings, strategy_lib.kind_of(strategy))
    layout = layout_lib.choose(layout_lib.detect(strategy), strategy, settings.layout,
                               measured=measured,
                               xla_blocked=mode.xla_blocker())
    layout_lib.apply(layout)
    keras.utils.set_random_seed(config.seed)
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    with strategy.scope():
        generator, generator_ema, discriminator = family.networks(
            settings, source, layout, mode, strategy.num_replicas_in_sync)
        g_optimizer, d_optimizer = optimizers.make_optimizers(
            (settings.g_optimizer, settings.d_optimizer), config.batch_size * config.accumulation,
            mode=mode, precision=layout.precision)
        with mode.variables_of("g_optimizer"):
            g_optimizer.build(generator.trainable_variables)
        with mode.variables_of("d_optimizer"):
            d_optimizer.build(discriminator.trainable_variables)
        step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        health = bookkeeping_lib.Health(
            tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_steps"),
            tf.Variable(0, dtype=tf.int64, trainable=False, name="consecutive_skips"))
        input_state = tf.Variable([config.seed * 1_000_003] * 2 + [0], dtype=tf.int64,
                                  trainable=False, name="input_state")
        # Written in replica context with the same all-reduced value on every replica.
        lecam_state = (tf.Variable([0.0, 0.0], trainable=False, name="lecam_state",
                                   aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                       if penalties.lecam_weight > 0 else None)
        augment = (ada_lib.AdaptiveAugment(augment_settings)
                   if augment_settings.ada_target is not None else
                   augment_lib.DiffAugment(augment_settings.transforms)
                   if augment_settings.transforms else None)
    ema = ema_lib.GeneratorEMA(generator, generator_ema, config.ema_decay,
                               config.ema_start_step, config.ema_half_life_images,
                               config.g_images_per_update, config.ema_rampup)
    ema.copy()
    bookkeeping = bookkeeping_lib.StepBookkeeping(step, health, ema,
                                                  config.max_consecutive_skips)
    return Experiment(settings=settings, source=source, strategy=strategy,
                      generator=generator, discriminator=discriminator,
                      generator_ema=generator_ema, g_optimizer=g_optimizer,
                      d_optimizer=d_optimizer, step=step, health=health,
                      input_state=input_state, ema=ema, bookkeeping=bookkeeping,
                      classes=classes, layout=layout, mode=mode, family=family,
                      objective=family.objective(settings, discriminator, d_optimizer,
                                                 augment, lecam_state),
                      augment=augment, lecam_state=lecam_state,
                      operative_config=settings_lib.operative_config())


def restore(run_dir: str, checkpoint: Optional[str] = None, gin_files: Sequence[str] = (),
            gin_bindings: Sequence[str] = ()) -> Tuple[Experiment, str]:
    """(Experiment, checkpoint path): a finished or running training run in `run_dir`,
    rebuilt from its operative_config.gin (then `gin_files`, `gin_bindings`) at
    `checkpoint` or its newest. ConfigError when it is no run or holds no checkpoint.

    One device unless the bindings choose another strategy: sampling, evaluation
    and export run beside the training job, not inside its cluster.
    """
    run_dir = model_dir_lib.resolve(run_dir)
    operative = os.path.join(run_dir, "operative_config.gin")
    if not os.path.exists(operative):
        raise ConfigError(f"{run_dir} has no operative_config.gin; is it a bin/train.py "
                          f"--model_dir?")
    parse([operative] + list(gin_files), ["strategy.kind = 'one_device'"] + list(gin_bindings),
          finalize=False)
    exp = build(check_data=False)
    class_list.keep_or_check(run_dir, exp.source.class_names, exp.settings.data.name,
                             write=False)
    saver = checkpoints.Checkpointer(run_dir, max_to_keep=1000, **exp.trackables())
    path = saver.restore(checkpoint) if checkpoint else saver.restore_latest()
    if path is None:
        raise ConfigError(f"{run_dir} holds no checkpoint yet")
    logging.info("%s: step %d, classes %s", path, int(exp.step.numpy()), exp.classes)
    return exp, path


def eval_subject(exp: Experiment) -> subject_lib.Subject:
    """What the evaluator reads of `exp` (eval/subject.py)."""
    return subject_lib.Subject(exp.strategy, exp.source, exp.settings.data, exp.classes,
                               exp.generator_ema, exp.discriminator, exp.settings.eval,
                               exp.settings.train.batch_size, exp.settings.train.seed)


def weights_digest(exp: Experiment) -> str:
    """sha256 of this process's copy of every G, D and EMA G variable, in order."""
    digest = hashlib.sha256()
    for model in (exp.generator, exp.discriminator, exp.generator_ema):
        for variable in model.variables:
            digest.update(np.ascontiguousarray(variable.numpy()).tobytes())
    return digest.hexdigest()[:16]


def summary(exp: Experiment) -> dict:
    """The facts `--dry_run` prints, including whether the data is ready to train on."""
    try:
        exp.source.check()
        data_error = None
    except ConfigError as e:
        data_error = str(e).splitlines()[0]
    return {
        "generator_params": models.count_trainable(exp.generator),
        "discriminator_params": models.count_trainable(exp.discriminator),
        "family": exp.family.name,
        "strategy": type(exp.strategy).__name__,
        "num_replicas": exp.strategy.num_replicas_in_sync,
        "global_batch_size": exp.settings.train.batch_size,
        "dataset": exp.source.name,
        "num_classes": exp.source.num_classes,
        "trained_classes": (exp.classes if len(exp.classes) < exp.source.num_classes
                            else f"all {exp.source.num_classes}"),
        "resolution": exp.settings.data.resolution,
        "total_steps": exp.settings.train.total_steps,
        "layout": exp.layout.as_dict(),
        "data_ready": data_error is None,
        "data_error": data_error,
    }
