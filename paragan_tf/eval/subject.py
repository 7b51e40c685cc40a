"""What an evaluation, a sample grid, a translation or an export reads of a trained run:
its networks, its data, its strategy and a few of its settings.

train/experiment.py makes one of an Experiment (`experiment.eval_subject`); the
evaluators and the GAN families' after-training methods (paragan_tf/families/contract.py)
see these objects only, never the Experiment above them.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import tensorflow as tf
import tf_keras as keras

from paragan_tf.data import config as data_config
from paragan_tf.data import datasets
from paragan_tf.eval.config import EvalConfig


@dataclasses.dataclass(frozen=True)
class Subject:
    strategy: tf.distribute.Strategy  # generation and feature extraction run under it
    source: datasets.Source  # the real images (the reference split comes from it)
    data: data_config.DatasetConfig  # resolution, fit, split, per-class limit
    classes: Sequence[int]  # the classes the run trains on
    generator_ema: keras.Model  # what is evaluated
    discriminator: keras.Model  # for the D-logit-gap probe
    eval_config: EvalConfig  # the run's evaluation settings (the default protocol)
    batch_size: int = 64  # the run's global batch (sample grids keep to it)
    seed: int = 0  # the run's seed (sample grids' latents)
