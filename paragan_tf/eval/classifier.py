"""The dataset classifier behind the Fréchet Classifier Distance (FCD) and conditional accuracy.

No package ships Inception-v3 weights and nothing may be downloaded at run
time, so by default the feature extractor is a small CNN trained on the same
dataset (`bin/train_classifier.py`). Its 128-d penultimate activations give
the FCD (named so everywhere: it is not comparable with published FIDs) and
its predictions give class-conditional accuracy.

It is saved as a SavedModel with the same interface as an Inception feature
extractor (eval/features.py): float32 images in [-1, 1] -> {"features",
"logits"}, plus `classifier.json` (dataset, resolution, test accuracy).
"""

from __future__ import annotations

import json
import os
import time
from typing import Callable, Tuple

import numpy as np
import tensorflow as tf
import tf_keras as keras

from paragan_tf.data import config as data_config
from paragan_tf.data import datasets
from paragan_tf.data import pipeline
from paragan_tf.errors import ConfigError

INFO_FILE = "classifier.json"


def build(num_classes: int, channels: int, resolution: int) -> keras.Model:
    """conv-BN-ReLU stages of 32, 64, 128 channels -> 128-d features -> logits (float32)."""
    f32 = dict(dtype="float32")  # whatever mixed-precision policy a training run set

    def stage(x, width):
        for _ in range(2):
            x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False, **f32)(x)
            # Momentum 0.9: the moving statistics must settle within a few hundred steps.
            x = keras.layers.BatchNormalization(momentum=0.9, **f32)(x)
            x = keras.layers.ReLU(**f32)(x)
        return keras.layers.MaxPool2D(**f32)(x)
    images = keras.Input([resolution, resolution, channels], dtype="float32")
    x = images
    for width in (32, 64, 128):
        x = stage(x, width)
    x = keras.layers.GlobalAveragePooling2D(**f32)(x)
    features = keras.layers.Dense(128, activation="relu", name="features", **f32)(x)
    logits = keras.layers.Dense(num_classes, name="logits", **f32)(features)
    return keras.Model(images, [features, logits], name="classifier")


def _splits(source: datasets.Source, config: data_config.DatasetConfig,
            holdout: float) -> Tuple[tf.data.Dataset, tf.data.Dataset, str, int]:
    """(train, test, name of the test set, train size): the test split or a held-out part."""
    fit = lambda image, label: (pipeline.fit_image(image, config.resolution, config.fit),  # noqa
                                tf.cast(label, tf.int32))
    train = source.make("train").map(fit, num_parallel_calls=tf.data.AUTOTUNE)
    n = source.num_examples or sum(1 for _ in source.make("train"))
    try:
        test = source.make("test").map(fit, num_parallel_calls=tf.data.AUTOTUNE)
        return train, test, "test split", n
    except ConfigError:
        pass
    keep = int(n * (1 - holdout))
    return train.take(keep), train.skip(keep), f"held-out {n - keep} of the train split", keep


def train(source: datasets.Source, config: data_config.DatasetConfig, epochs: int = 4,
          batch_size: int = 128, holdout: float = 0.1, seed: int = 0,
          progress: Callable[[str], None] = print) -> Tuple[keras.Model, dict]:
    """Trains the classifier on `source`; returns it and its facts (test accuracy first)."""
    keras.utils.set_random_seed(seed)
    train_ds, test_ds, test_name, num_train = _splits(source, config, holdout)
    model = build(source.num_classes, source.channels, config.resolution)
    logits_only = keras.Model(model.input, model.outputs[1])
    steps = epochs * -(-num_train // batch_size)
    # Cosine decay to 0: the last epochs settle instead of bouncing around a minimum.
    rate = keras.optimizers.schedules.CosineDecay(1e-3, max(steps, 1))
    logits_only.compile(optimizer=keras.optimizers.Adam(rate),
                        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                        metrics=["accuracy"])
    start = time.perf_counter()
    train_ds = (train_ds.cache().shuffle(10_000, seed=seed).batch(batch_size)
                .prefetch(tf.data.AUTOTUNE))
    test_ds = test_ds.batch(500).cache()
    for epoch in range(epochs):
        history = logits_only.fit(train_ds, epochs=1, verbose=0)
        _, accuracy = logits_only.evaluate(test_ds, verbose=0)
        progress(f"classifier epoch {epoch + 1}/{epochs}: train loss "
                 f"{history.history['loss'][-1]:.4f}, {test_name} accuracy {accuracy:.4f}")
    info = dict(dataset=source.name, resolution=config.resolution, fit=config.fit,
                num_classes=source.num_classes, channels=source.channels,
                test_accuracy=float(accuracy), test_set=test_name, epochs=epochs,
                train_seconds=time.perf_counter() - start)
    return model, info


def save(model: keras.Model, path: str, info: dict) -> None:
    """SavedModel with signature images -> {features, logits}, and classifier.json beside it."""
    spec = tf.TensorSpec([None] + model.input.shape[1:].as_list(), tf.float32, name="images")

    module = tf.Module()
    module.model = model

    @tf.function(input_signature=[spec])
    def serve(images):
        features, logits = model(images, training=False)
        return {"features": features, "logits": logits}
    module.serve = serve
    tf.saved_model.save(module, path, signatures={"serving_default": serve})
    with open(os.path.join(path, INFO_FILE), "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)


def load_info(path: str) -> dict:
    info_path = os.path.join(path, INFO_FILE)
    if not os.path.exists(info_path):
        raise ConfigError(f"{path} is not a classifier from bin/train_classifier.py "
                          f"(no {INFO_FILE}); train one with bin/train_classifier.py")
    with open(info_path) as f:
        return json.load(f)


def predict_classes(logits: np.ndarray) -> np.ndarray:
    return np.argmax(logits, axis=-1)
