"""Paired datasets for image-to-image translation (pix2pix): an input and its target.

A paired example is one uint8 image holding the input and the target side by side,
[h, 2w, c], left the input (pix2pix's own format, `direction='AtoB'`), label 0. Kept as
one image, a pair travels through everything an image does (shuffling, sharding,
tf.data service, streaming with exact resume); only fitting it to the resolution
(data/pipeline.py's `fit_pair`) knows it is two: each half is fitted on its own and the
two are stacked along channels, float32 [r, r, 2c], input first, so a random flip flips
both alike.

Names:
  pix2pix_folder       `dataset.data_dir/<split>/<image files>`, each file input and
                       target side by side (facades, maps, cityscapes, edges2shoes as
                       their authors publish them: `train/`, `val/`, `test/`);
                       `dataset.direction='BtoA'` when the target is on the left;
                       bin/prepare_dataset.py --paired prepares it as records
  fashion_mnist_edges  Fashion-MNIST (Debian's package) with its edges as the input:
  mnist5k_edges        MNIST (the embedded default) likewise; built in memory from the
                       installed data, nothing to download or prepare
  synthetic_pairs      random images beside their mirror images (timing a step whose
                       data is elsewhere: train/experiment.py's stand-in)
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from absl import logging
import numpy as np
import tensorflow as tf

from paragan_tf.data import config as data_config
from paragan_tf.data import datasets
from paragan_tf.data import image_files
from paragan_tf.errors import ConfigError

NAMES = ("pix2pix_folder", "fashion_mnist_edges", "mnist5k_edges", "synthetic_pairs")
CLASS_NAMES = ("pairs",)
# An edge is where the Sobel gradient's magnitude exceeds this fraction of its largest
# possible value (a step from 0 to 255): the outline and the strong inner lines of a
# Fashion-MNIST garment or an MNIST digit, not the texture.
EDGE_THRESHOLD = 0.25


def edges_of(images: np.ndarray) -> np.ndarray:
    """uint8 [n, h, w, c] -> uint8 [n, h, w, c]: 255 on the images' edges, 0 elsewhere
    (Sobel on the channels' mean, borders replicated)."""
    grey = images.astype(np.float32).mean(axis=-1)
    padded = np.pad(grey, [(0, 0), (1, 1), (1, 1)], mode="edge")
    window = lambda dy, dx: padded[:, 1 + dy:padded.shape[1] - 1 + dy,  # noqa: E731
                                   1 + dx:padded.shape[2] - 1 + dx]
    gx = (window(-1, 1) + 2 * window(0, 1) + window(1, 1)
          - window(-1, -1) - 2 * window(0, -1) - window(1, -1))
    gy = (window(1, -1) + 2 * window(1, 0) + window(1, 1)
          - window(-1, -1) - 2 * window(-1, 0) - window(-1, 1))
    strong = np.hypot(gx, gy) > EDGE_THRESHOLD * 4 * 255
    edges = np.where(strong, 255, 0).astype(np.uint8)[..., None]
    return np.repeat(edges, images.shape[-1], axis=-1)


def side_by_side(inputs: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """uint8 [n, h, w, c] twice -> the pairs [n, h, 2w, c], input left."""
    return np.concatenate([inputs, targets], axis=2)


def _edges(base_name: str, **options) -> datasets.Source:
    base = datasets.get_source(base_name, **options)

    def make(split: str) -> tf.data.Dataset:
        images, _ = next(iter(base.make(split).batch(1 << 30)))  # the arrays, in one go
        images = images.numpy()
        pairs = side_by_side(edges_of(images), images)
        return tf.data.Dataset.from_tensor_slices((pairs, np.zeros(len(pairs), np.int32)))
    return dataclasses.replace(base, name=f"{base_name}_edges", num_classes=1, make=make,
                               class_names=CLASS_NAMES, paired=True)


def _pix2pix_folder(data_dir: Optional[str] = None, channels: int = 0,
                    direction: str = "AtoB", **_) -> datasets.Source:
    if not data_dir:
        raise ConfigError("dataset.name='pix2pix_folder' needs dataset.data_dir=<folder with "
                          "train/ (and val/) of side-by-side input|target images>")
    if not os.path.isdir(data_dir):
        raise ConfigError(f"dataset.data_dir={data_dir!r} does not exist or is not a folder")
    if direction not in data_config.DIRECTIONS:
        raise ConfigError(f"dataset.direction={direction!r} must be one of "
                          f"{data_config.DIRECTIONS}")
    # The split folders play the class folders' part in the listing rules.
    listing = image_files.list_tree(image_files.folder_entries(data_dir),
                                    image_files.TF_EXTENSIONS)
    if listing.skipped:
        logging.info("pix2pix_folder %s: %s", data_dir, listing.skipped_line())

    def files_of(split: str):
        if split not in listing.classes:
            raise ConfigError(f"dataset.split={split!r}: {data_dir} has no {split}/ folder of "
                              f"images (it has {listing.classes or 'none'})")
        return [os.path.join(data_dir, f) for f, label in zip(listing.files, listing.labels)
                if listing.classes[label] == split]
    if not channels:
        every = [os.path.join(data_dir, f) for f in listing.files]
        channels, _ = image_files.detect_channels(every, image_files.pil_mode)

    def check():
        from PIL import Image  # pylint: disable=import-outside-toplevel
        for split in listing.classes:
            for path in files_of(split):
                with Image.open(path) as image:
                    width, height = image.size
                if width % 2:
                    raise ConfigError(f"{path} is {width} x {height}: a pix2pix pair is its "
                                      f"input and target side by side, of even width")

    def decode(path, label):
        image = tf.io.decode_image(tf.io.read_file(path), channels=channels,
                                   expand_animations=False)
        image = tf.ensure_shape(image, [None, None, channels])
        return datasets.swap_halves(image) if direction == "BtoA" else image, label

    def records(split: str) -> tf.data.Dataset:
        files = files_of(split)
        order = datasets.stored_order(len(files))
        return tf.data.Dataset.from_tensor_slices(
            (np.array(files)[order], np.zeros(len(files), np.int32)))

    def make(split: str) -> tf.data.Dataset:
        return records(split).map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    return datasets.Source("pix2pix_folder", 1, channels, make, len(listing.files), check=check,
                           records=records, decode=decode, class_names=CLASS_NAMES,
                           paired=True)


def _synthetic_pairs(channels: int = 0, **_) -> datasets.Source:
    base = datasets.get_source("synthetic", channels=channels, num_classes=1)

    def make(split: str) -> tf.data.Dataset:
        return base.make(split).map(
            lambda image, label: (tf.concat([image, image[:, ::-1]], axis=1), label))
    return dataclasses.replace(base, name="synthetic_pairs", make=make,
                               class_names=CLASS_NAMES, paired=True)


def get_source(name: str, **options) -> datasets.Source:
    if name == "pix2pix_folder":
        return _pix2pix_folder(**options)
    if name == "synthetic_pairs":
        return _synthetic_pairs(**options)
    return _edges(name[:-len("_edges")], **options)


def split_pair(images: tf.Tensor):
    """A batch of fitted pairs [b, r, r, 2c] -> (inputs, targets), each [b, r, r, c]."""
    return tf.split(images, 2, axis=-1)
