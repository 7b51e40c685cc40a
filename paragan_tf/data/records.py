"""Prepared datasets: the format bin/prepare_dataset.py writes, and how it is streamed.

A prepared dataset is a directory, local or any `tf.io.gfile` URL (gs://...):
  dataset.json                     the manifest (`Manifest`): class names in label
                                   order, counts per class, every shard with its
                                   count and sha256, resolution, crop policy, source
  <split>-00000-of-00040.tfrecord  tf.train.Example records: `image` (PNG or JPEG
                                   bytes at the prepared resolution), `label` (int64)
Start-up reads the manifest and checks the shards exist; no image is looked at.

The stream of one input pipeline (`stream`) is a pure function of the seed and
of the position in it, and it can be entered at any position without reading
what comes before:
  - epoch e reads this pipeline's shards in a permutation drawn from (seed, e),
    `cycle_length` shards at a time, one record from each in turn (tf.data's
    interleave, deterministic, block length 1). The order depends on the cycle
    length only, never on how many shards are read in parallel, so the input
    tuner may change the parallelism without changing the data;
  - records are shuffled in consecutive windows of `window` records, each by a
    permutation drawn from (seed, window index): a shuffle with no hidden buffer;
  - entering at position p: `interleave_state` works out, from the shard counts
    alone, which shards the interleave holds at that point and how far each has
    been read; the stream restarts from there (each open shard skips its read
    records, rotated so the next one to serve comes first), at the start of p's
    window, and drops the records of the window before p.
The checkpoint holds the seed and the step (train/sync_trainer.py's input state); the
shard order and the offsets follow from them, and the log names them on resume.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from absl import logging
import tensorflow as tf

from paragan_tf.errors import ConfigError

MANIFEST = "dataset.json"
FORMAT = "paragan_tf records 1"
_FEATURES = {"image": tf.io.FixedLenFeature([], tf.string),
             "label": tf.io.FixedLenFeature([], tf.int64)}


def example_bytes(encoded: bytes, label: int) -> bytes:
    """One serialized record. Deterministic: protobuf may write a map's entries (the
    features) in any order, which would change a shard's checksum from run to run."""
    return tf.train.Example(features=tf.train.Features(feature={
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    })).SerializeToString(deterministic=True)


def parse(serialized: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """A serialized record -> (encoded image bytes, int32 label)."""
    example = tf.io.parse_single_example(serialized, _FEATURES)
    return example["image"], tf.cast(example["label"], tf.int32)


@dataclasses.dataclass(frozen=True)
class Shard:
    file: str  # relative to the dataset directory
    count: int
    sha256: str
    bytes: int
    label: Optional[int] = None  # the one class it holds (--group_by_class), else None


@dataclasses.dataclass(frozen=True)
class Manifest:
    """dataset.json."""

    classes: List[str]
    counts: Dict[str, int]
    shards: List[Shard]
    resolution: int
    policy: str
    channels: int
    encoding: str
    split: str
    source: str
    grouped_by_class: bool
    corrupt: List[str] = dataclasses.field(default_factory=list)
    skipped: Dict[str, int] = dataclasses.field(default_factory=dict)
    plan: str = ""  # names the preparation (bin/prepare_dataset.py reruns compare it)
    paired: bool = False  # input|target pairs, resolution x 2 resolution (data/paired.py)
    format: str = FORMAT

    @property
    def num_examples(self) -> int:
        return sum(s.count for s in self.shards)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)

    @classmethod
    def load(cls, data_dir: str) -> "Manifest":
        """The manifest of a prepared dataset; ConfigError naming what is wrong."""
        path = os.path.join(data_dir, MANIFEST)
        if not tf.io.gfile.exists(path):
            raise ConfigError(
                f"dataset.data_dir={data_dir!r} has no {MANIFEST}: dataset.name='records' "
                f"reads a directory written by bin/prepare_dataset.py --output={data_dir}")
        try:
            with tf.io.gfile.GFile(path) as f:
                raw = json.load(f)
            if raw.get("format") != FORMAT:
                raise ValueError(f"format {raw.get('format')!r}, expected {FORMAT!r}")
            raw["shards"] = [Shard(**s) for s in raw["shards"]]
            return cls(**raw)
        except (ValueError, TypeError, KeyError) as e:
            raise ConfigError(f"{path} is not a prepared dataset's manifest: {e}") from None

    def check_shards(self, data_dir: str) -> None:
        """ConfigError naming the first shard that is missing or has the wrong size."""
        for shard in self.shards:
            path = os.path.join(data_dir, shard.file)
            try:
                size = tf.io.gfile.stat(path).length
            except tf.errors.NotFoundError:
                raise ConfigError(f"{path} is missing ({len(self.shards)} shards listed in "
                                  f"{MANIFEST}); rerun bin/prepare_dataset.py to finish "
                                  f"it") from None
            if size != shard.bytes:
                raise ConfigError(f"{path} has {size} bytes, {MANIFEST} says {shard.bytes}: "
                                  f"the shard was changed or cut short; prepare it again")


def interleave_state(counts: Sequence[int], cycle_length: int,
                     position: int) -> List[Tuple[int, int]]:
    """Where a deterministic tf.data interleave (block length 1) over inputs with these
    record counts stands after `position` records, as the inputs of a fresh interleave
    that continues it exactly: [(input index, records of it already read), ...].

    It follows tf.data's InterleaveDataset: the cycle visits its slots in turn; an
    empty slot, when visited, opens the next input and reads from it at once; a
    finished input is noticed at its next visit, which frees the slot and moves on
    without a record. The fresh interleave starts at the slot due next and opens the
    inputs in that visiting order, so it continues with the same records in the
    same order (a slot whose input is spent continues as an input with nothing left).
    """
    slots: List[Optional[List[int]]] = [None] * cycle_length  # [input, read]
    pending, slot, produced = 0, 0, 0
    while produced < position:
        current = slots[slot]
        if current is None:
            if pending == len(counts):
                if all(s is None for s in slots):
                    raise ValueError(f"position {position} is past the {produced} records")
                slot = (slot + 1) % cycle_length
                continue
            slots[slot] = [pending, 0]
            pending += 1
            continue
        if current[1] < counts[current[0]]:
            current[1] += 1
            produced += 1
        else:
            slots[slot] = None
        slot = (slot + 1) % cycle_length
    state, opened = [], pending
    for k in range(cycle_length):
        current = slots[(slot + k) % cycle_length]
        if current is not None:
            state.append((current[0], current[1]))
        elif opened < len(counts):
            state.append((opened, 0))
            opened += 1
    return state + [(i, 0) for i in range(opened, len(counts))]


@dataclasses.dataclass(frozen=True)
class Reading:
    """How one input pipeline reads a prepared dataset (see the module doc)."""

    seed: Union[int, tf.Tensor]  # a tensor: a stream per parameter-server worker
    pipeline_id: int = 0
    num_pipelines: int = 1
    cycle_length: int = 16  # shards open at once: this and the seed fix the order
    parallelism: Optional[int] = None  # shards read at once; None: one after another
    deterministic: bool = True  # False: records as they arrive (no exact resume)
    window: int = 1024  # records shuffled together
    # Called on each shard's records as read (tuning.ReadHook: a benchmark's slow store).
    read_hook: Optional[Callable[[tf.data.Dataset, tf.Tensor], tf.data.Dataset]] = None


class Records:
    """A prepared dataset on its storage: the manifest and the streams of its shards."""

    def __init__(self, data_dir: str, manifest: Manifest):
        self.data_dir, self.manifest = data_dir, manifest

    def _paths(self, shards: Sequence[Shard]) -> List[str]:
        return [os.path.join(self.data_dir, s.file) for s in shards]

    def all_records(self) -> tf.data.Dataset:
        """Every record once, shard after shard in manifest order: (encoded, label)."""
        return tf.data.TFRecordDataset(self._paths(self.manifest.shards)).map(parse)

    def shards_for(self, classes: Optional[Sequence[int]]) -> Tuple[List[Shard], bool]:
        """(the shards to open, whether records must still be filtered by label)."""
        shards = self.manifest.shards
        if classes is None or len(classes) >= len(self.manifest.classes):
            return list(shards), False
        if self.manifest.grouped_by_class:
            wanted = set(classes)
            mine = [s for s in shards if s.label in wanted]
            logging.info("records: classes %s: opening %d of %d shards (grouped by class)",
                         list(classes), len(mine), len(shards))
            return mine, False
        logging.warning(
            "records: %s is not grouped by class: reading all %d shards to keep the classes "
            "%s (a resumed run replays its stream); prepare it with --group_by_class to open "
            "only their shards", self.data_dir, len(shards), list(classes))
        return list(shards), True

    def stream(self, reading: Reading, start: int = 0,
               classes: Optional[Sequence[int]] = None) -> tf.data.Dataset:
        """This pipeline's endless (encoded, label) stream, entered at its record `start`."""
        shards, must_filter = self.shards_for(classes)
        pipelines, pid = reading.num_pipelines, reading.pipeline_id
        split_records = pipelines > 1 and len(shards) < pipelines
        if pipelines > 1 and not split_records:
            shards = shards[pid::pipelines]
        counts = [s.count for s in shards]
        if split_records:  # every pipeline reads every shard, its share of the records
            counts = [len(range(pid, c, pipelines)) for c in counts]
        if not shards or sum(counts) == 0:
            raise ConfigError(f"input pipeline {pid} of {pipelines} has no records to read in "
                              f"dataset.data_dir={self.data_dir!r}")
        files = tf.constant(self._paths(shards))
        cycle = max(1, min(reading.cycle_length, len(shards)))
        parallel = None if reading.parallelism is None else \
            (reading.parallelism if reading.parallelism == tf.data.AUTOTUNE
             else max(1, min(reading.parallelism, cycle)))

        def read(index, skip):
            records = tf.data.TFRecordDataset(tf.gather(files, index))
            if split_records:
                records = records.shard(pipelines, pid)
            records = records.skip(skip)
            return reading.read_hook(records, index) if reading.read_hook else records

        def interleave(indices, skips):
            return tf.data.Dataset.from_tensor_slices((indices, skips)).interleave(
                read, cycle_length=cycle, block_length=1, num_parallel_calls=parallel,
                deterministic=None if parallel is None else reading.deterministic)

        def epoch_order(epoch):
            return tf.random.experimental.stateless_shuffle(
                tf.range(len(shards), dtype=tf.int64),
                seed=tf.stack([tf.cast(reading.seed, tf.int64), epoch]))

        per_epoch = sum(counts)
        window = reading.window
        # Filtering by label after the stream: positions no longer map to records,
        # so such a stream is replayed from its beginning (shards_for says so).
        seek = 0 if must_filter else start // window * window
        epoch, offset = divmod(seek, per_epoch)
        if offset:  # entering an epoch part-way: where each shard stands, from the counts
            if isinstance(reading.seed, tf.Tensor):
                raise ValueError("a records stream seeded per worker (a tensor) cannot be "
                                 "entered part-way through an epoch")
            with tf.init_scope():  # eager even where the stream is built in a tf.function
                order = epoch_order(tf.constant(epoch, tf.int64)).numpy()
            state = interleave_state([counts[i] for i in order], cycle, offset)
            logging.info("records: pipeline %d enters epoch %d at record %d of %d: %s", pid,
                         epoch, offset, per_epoch, ", ".join(
                             f"{shards[order[i]].file}@{read_}" for i, read_ in state[:cycle]))
            first = interleave(tf.constant([order[i] for i, _ in state], tf.int64),
                               tf.constant([n for _, n in state], tf.int64))
        else:
            first = interleave(epoch_order(tf.constant(epoch, tf.int64)),
                               tf.zeros([len(shards)], tf.int64))
        rest = tf.data.Dataset.counter(epoch + 1).flat_map(
            lambda e: interleave(epoch_order(e), tf.zeros([len(shards)], tf.int64)))
        ds = first.concatenate(rest).map(parse)

        def shuffle_window(index, batch):
            key = tf.stack([tf.cast(reading.seed, tf.int64) + 1, index])
            order = tf.random.experimental.stateless_shuffle(tf.range(tf.shape(batch[1])[0]),
                                                             seed=key)
            return tf.gather(batch[0], order), tf.gather(batch[1], order)
        ds = ds.batch(window).enumerate(start=seek // window).map(shuffle_window).unbatch()
        if must_filter:
            wanted = tf.constant(list(classes), tf.int32)
            ds = ds.filter(lambda _, label: tf.reduce_any(tf.equal(label, wanted)))
        return ds.skip(start - seek)
