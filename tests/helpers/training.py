"""Small runs and what they train on: gin/tiny.gin parsed, two replicas, 6 steps of
gin/tiny.gin, a folder of images, and a saved classifier declared for another dataset."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import tensorflow as tf


def parse_tiny(*bindings: str) -> None:
    """Parses gin/tiny.gin plus extra bindings (unfinalised, so tests may add more); what the
    tiny_gin fixture hands a test, and what a module's fixture (which cannot take it) calls."""
    from paragan_tf.train import experiment  # pylint: disable=import-outside-toplevel
    experiment.parse(["gin/tiny.gin"], list(bindings), finalize=False)


def mirrored_2() -> tf.distribute.Strategy:
    return tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())


def declared_for(classifier_dir: str, copy_dir: str, dataset: str) -> str:
    """A copy of a saved classifier declared for `dataset` (of the same image shape).

    For tests whose numbers do not depend on the features (the evaluator refuses a
    classifier of another dataset): a Fashion-MNIST classifier would take minutes.
    """
    shutil.copytree(classifier_dir, copy_dir)
    info_path = os.path.join(copy_dir, "classifier.json")
    with open(info_path) as f:
        info = json.load(f)
    with open(info_path, "w") as f:
        json.dump(dict(info, dataset=dataset), f)
    return copy_dir


def image_folder(root, corrupt=()):
    """Two classes of four random 24x24 PNGs under `root` (the `corrupt` ones cut short);
    the gin bindings that train on them."""
    rng = np.random.default_rng(0)
    for cls in ("cat", "dog"):
        os.makedirs(root / cls, exist_ok=True)
        for i in range(4):
            image = rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)
            tf.io.write_file(str(root / cls / f"{i}.png"), tf.io.encode_png(image))
    for name in corrupt:  # a PNG cut short, as an interrupted copy leaves it
        data = (root / name).read_bytes()
        (root / name).write_bytes(data[:len(data) // 3])
    return [f"dataset.name = 'image_folder'", f"dataset.data_dir = '{root}'"]


def train_tiny(tiny_gin, tmp_path, *bindings):
    """6 steps of gin/tiny.gin (and `bindings`) on one device; the run's result."""
    from paragan_tf.train import experiment
    from paragan_tf.train import driver
    tiny_gin("train.total_steps = 6", "train.steps_per_loop = 2", "train.log_every = 6",
             "train.d_steps = 1", *bindings)
    exp = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
    return driver.train(exp, str(tmp_path))
