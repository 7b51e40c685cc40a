"""Encoded image records -> examples, and the image files that do not decode.

A source of encoded files (data/datasets.py: image folders, prepared records, TFDS)
decodes its records as the run reads them (`decode_records`). A corrupt file must
not stop a long run, nor pass unnoticed: image folders either decode every file once
at start-up (`find_corrupt`, so a corrupt one is an error naming it, or skipped when
asked), or, when they are too large for that, skip a record that fails to decode as
the run meets it, naming the file in the log once and counting it (`CorruptImages`,
read into `health/corrupt_images`).
"""

from __future__ import annotations

import os
import threading
from typing import List, Optional, Sequence

from absl import logging
import numpy as np
import tensorflow as tf


class CorruptImages:
    """Image files found corrupt while a run reads them: each named in the log once, counted."""

    def __init__(self):
        self._seen: set = set()
        self._lock = threading.Lock()

    def report(self, path: tf.Tensor) -> np.int64:
        name = path.numpy().decode()  # called through tf.py_function
        with self._lock:
            if name not in self._seen:
                self._seen.add(name)
                logging.warning("skipping corrupt image file %s (%d found so far)", name,
                                len(self._seen))
        return np.int64(0)

    @property
    def count(self) -> int:
        with self._lock:
            return len(self._seen)


def decode_records(records: tf.data.Dataset, decode, channels: int,
                   corrupt: Optional[CorruptImages],
                   parallel: Optional[int] = tf.data.AUTOTUNE) -> tf.data.Dataset:
    """Encoded records -> examples, in order; with `corrupt`, a record that does not
    decode is skipped and reported to it instead of failing the run."""
    deterministic = None if parallel is None else True
    if corrupt is None:
        return records.map(decode, num_parallel_calls=parallel, deterministic=deterministic)

    def one(encoded, label):
        # The decoded example when it decodes, else a label -1 marker that reports the
        # file: ignore_errors drops a failed decode, and take(1) drops the marker after
        # a good one, so the report runs for corrupt files only.
        record = tf.data.Dataset.from_tensors((encoded, label))
        good = record.map(decode).ignore_errors()
        bad = record.map(lambda e, _: (
            tf.zeros([1, 1, channels], tf.uint8),
            tf.cast(tf.py_function(corrupt.report, [e], tf.int64), tf.int32) - 1))
        return good.concatenate(bad).take(1)
    return records.interleave(one, cycle_length=max(2, os.cpu_count() or 1),
                              num_parallel_calls=parallel, deterministic=deterministic
                              ).filter(lambda _, label: label >= 0)


def find_corrupt(files: Sequence[str], channels: int) -> List[str]:
    """The files TensorFlow cannot decode as images, in order (decoded in parallel)."""
    logging.info("checking %d image files", len(files))
    ds = tf.data.Dataset.from_tensor_slices(list(files)).map(
        lambda path: (path, tf.shape(tf.io.decode_image(tf.io.read_file(path),
                                                        channels=channels,
                                                        expand_animations=False))),
        num_parallel_calls=tf.data.AUTOTUNE)
    # A file whose decode fails drops out; the ones missing from the output are corrupt.
    ds = ds.ignore_errors()
    readable = {path.decode() for path, _ in ds.as_numpy_iterator()}
    return [f for f in files if f not in readable]
