"""The dataset options (`dataset.*` in gin), checked when made."""

from __future__ import annotations

import dataclasses
from typing import Optional

import gin

from paragan_tf.errors import ConfigError

# Sources whose channel count is the reader's choice (dataset.channels); the others
# have the channels they have.
CHANNEL_CHOICE = ("image_folder", "pix2pix_folder", "records", "synthetic")
# Which half of a pix2pix_folder file is the input (data/paired.py).
DIRECTIONS = ("AtoB", "BtoA")


@gin.configurable("dataset")
@dataclasses.dataclass(frozen=True, kw_only=True)
class DatasetConfig:
    """What to train on and how images reach the models' resolution.

    Attributes:
      name: a registry name (see `datasets.names()`), e.g. mnist5k, tfds:cifar10.
      data_dir: where the data lives (TFDS data_dir, image folder root, ...).
      split: which split to train on.
      resolution: image height and width fed to the models; the models take
        their resolution from here.
      fit: how images reach `resolution`: "pad" (centre, pad with black),
        "resize" (centre-crop to square, then area-resize), or "auto" (pad
        when smaller, resize otherwise).
      random_flip: random horizontal flips (of both halves of a pair alike).
      jitter_size: resize each training image to this side (bicubic), then crop a random
        `resolution` square out of it (both halves of a pair alike): pix2pix's random
        jitter, 286 for 256 px; 0: none.
      shuffle_buffer: examples in the shuffle buffer.
      download: allow TFDS to download (never possible on air-gapped machines).
      skip_corrupt: image folders checked in full at start-up: train without
        the files that fail to decode (logged with their names) instead of
        stopping with an error naming them.
      channels: 1 or 3 for image_folder, records and synthetic (images are
        converted); 0: as the data is (an image folder whose images are all
        greyscale trains on one channel). Other sources have theirs.
      scan_images: image_folder: "full" decodes every file at start-up (a
        corrupt one is an error, or skipped with skip_corrupt); "lazy" decodes
        as the run reads, skipping a corrupt file and naming it in the log and
        in health/corrupt_images; "auto": full up to 20,000 files, else lazy.
      per_class_limit: train on the first this many examples of each class of
        `split` (in its stored order, the same subset on every run and worker);
        0: all. For small-data experiments: 100 gives a 1,000-image Fashion-MNIST.
      direction: pix2pix_folder and paired records: "AtoB" when each pair's left half is
        the input (the pix2pix format), "BtoA" when it is the target (facades, as its
        authors train it).
    """

    name: str = "mnist5k"
    data_dir: Optional[str] = None
    split: str = "train"
    resolution: int = 32
    fit: str = "auto"
    random_flip: bool = False
    jitter_size: int = 0
    shuffle_buffer: int = 10_000
    download: bool = False
    skip_corrupt: bool = False
    channels: int = 0
    scan_images: str = "auto"
    per_class_limit: int = 0
    direction: str = "AtoB"

    def __post_init__(self):
        if self.fit not in ("auto", "pad", "resize"):
            raise ConfigError(f"dataset.fit={self.fit!r} must be auto, pad or resize")
        if self.resolution <= 0:
            raise ConfigError(f"dataset.resolution={self.resolution} must be positive")
        if self.channels not in (0, 1, 3):
            raise ConfigError(f"dataset.channels={self.channels} must be 1, 3 or 0 (as the "
                              f"data is)")
        if self.scan_images not in ("auto", "full", "lazy"):
            raise ConfigError(f"dataset.scan_images={self.scan_images!r} must be auto, full "
                              f"or lazy")
        if self.direction not in DIRECTIONS:
            raise ConfigError(f"dataset.direction={self.direction!r} must be one of "
                              f"{DIRECTIONS}")
        if self.jitter_size and self.jitter_size < self.resolution:
            raise ConfigError(f"dataset.jitter_size={self.jitter_size} must be 0 (none) or at "
                              f"least dataset.resolution={self.resolution}")
        if self.per_class_limit < 0:
            raise ConfigError(f"dataset.per_class_limit={self.per_class_limit} must be >= 0 "
                              f"(0: every example)")
