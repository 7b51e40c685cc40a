"""What an evaluation reads of a trained run: its networks, its data and its strategy.

train/experiment.py makes one of an Experiment (`experiment.eval_subject`); the
evaluator (eval/evaluator.py) sees these objects only, never the Experiment above it.
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
