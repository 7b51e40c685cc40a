"""The tf.data input pipelines: real images and generator noise, per input context.

Both are built by functions of a `tf.distribute.InputContext`, for
`strategy.distribute_datasets_from_function`: each input pipeline (one per
worker) reads its own shard and batches at the per-replica batch size.

Real images are read one of four ways (the settings: data/tuning.py):
  cached   in-memory arrays: fitted once, cached, shuffled, repeated;
  files    encoded files (image folders, TFDS): the records (names or bytes)
           shuffled, then decoded every epoch;
  sharded  a slow store (`input_pipeline.read_hook`; benchmarks/congestion.py
           simulates one): every epoch reads the source as shards ("files") in a
           shuffled order, by a parallel interleave whose read parallelism and
           prefetch depth the tuner raises while the trainer measures input
           stalls, decode AUTOTUNE; optionally through tf.data service workers
           (data/service.py);
  records  a prepared dataset (data/records.py): always read shard by shard
           as above, and entered at a position instead of replayed on resume.

Noise comes from the pipeline too, as a pure function of (seed, pipeline id,
example index). That makes a step's noise independent of the replica count
(N replicas of B examples see exactly the examples one device sees in a batch
of N*B, which is what the multi-replica equivalence test checks) and lets the
noise position be checkpointed with the iterator.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Optional, Sequence

from absl import logging
import numpy as np
import tensorflow as tf

from paragan_tf.data import class_groups
from paragan_tf.data import config as data_config
from paragan_tf.data import datasets
from paragan_tf.data import records as records_lib
from paragan_tf.data import service as service_lib
from paragan_tf.data.tuning import InputConfig, InputTuner, Tuning
from paragan_tf.errors import ConfigError

InputFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]


def load_source(config: data_config.DatasetConfig, check: bool = True) -> datasets.Source:
    """The registry source for `config`; fails fast (ConfigError) on unknown or missing data.

    With check=False only the spec is needed (dry runs): absent data is not an error.
    """
    directed = config.name in ("pix2pix_folder", "records")  # pairs as their files hold them
    if config.direction != "AtoB" and not directed:
        raise ConfigError(f"dataset.direction={config.direction!r} applies to pix2pix_folder "
                          f"and paired records only, not to {config.name}")
    source = datasets.get_source(config.name, data_dir=config.data_dir,
                                 download=config.download, skip_corrupt=config.skip_corrupt,
                                 channels=config.channels, scan_images=config.scan_images,
                                 **({"direction": config.direction} if directed else {}))
    if config.channels and config.name not in data_config.CHANNEL_CHOICE and \
            config.channels != source.channels:
        raise ConfigError(f"dataset.channels={config.channels}: {config.name} has "
                          f"{source.channels} channel(s); the setting applies to "
                          f"{', '.join(data_config.CHANNEL_CHOICE)}")
    if config.name != "image_folder" and (config.scan_images != "auto" or config.skip_corrupt):
        raise ConfigError(f"dataset.scan_images and dataset.skip_corrupt apply to image_folder "
                          f"only, not to {config.name}")
    if source.prepared is not None and source.prepared.manifest.resolution != config.resolution:
        logging.warning("dataset.data_dir=%s was prepared at %d px and is fitted to "
                        "dataset.resolution=%d on every read; prepare it at %d px to save that",
                        config.data_dir, source.prepared.manifest.resolution,
                        config.resolution, config.resolution)
    if config.per_class_limit and source.prepared is not None:
        raise ConfigError("dataset.per_class_limit does not apply to dataset.name='records' "
                          "(streamed by position); prepare the subset with "
                          "bin/prepare_dataset.py instead")
    if check:
        source.check()
    return source


def check_not_empty(source: datasets.Source, config: data_config.DatasetConfig,
                    classes: Optional[Sequence[int]] = None) -> None:
    """ConfigError unless the training stream has an example (an empty one would not
    hang, tf.data ends an empty repeat, but would fail mid-run with no explanation).

    With dataset.per_class_limit the subset is counted and logged, and a class with
    fewer examples than the limit is named in a warning.
    """
    ds = keep_classes(training_examples(source, config, source.make), classes,
                      source.num_classes)
    if config.per_class_limit:
        # Counted on the encoded records where there are some: labels without decoding.
        counted = keep_classes(training_examples(source, config, source.records or source.make),
                               classes, source.num_classes)
        counts = np.zeros(source.num_classes, np.int64)
        for _, label in counted.map(lambda example, label: (0, label)).as_numpy_iterator():
            counts[label] += 1
        short = [c for c in (classes if classes is not None else range(source.num_classes))
                 if counts[c] < config.per_class_limit]
        logging.info("dataset.per_class_limit=%d: training on %d examples of %s split %r",
                     config.per_class_limit, counts.sum(), config.name, config.split)
        if short:
            logging.warning("dataset.per_class_limit=%d: class(es) %s have fewer examples "
                            "(%s)", config.per_class_limit, short,
                            ", ".join(str(counts[c]) for c in short))
    if next(iter(ds.take(1)), None) is None:
        which = "" if classes is None or len(classes) >= source.num_classes else \
            f" of the classes {list(classes)} this run trains on"
        raise ConfigError(f"dataset.name={config.name!r} split {config.split!r} holds no "
                          f"examples{which}; check dataset.data_dir / dataset.split / per_class")


def fit_image(image: tf.Tensor, resolution: int, fit: str) -> tf.Tensor:
    """uint8 [h, w, c] of any size -> float32 [resolution, resolution, c] in [-1, 1]."""
    image = tf.cast(image, tf.float32)
    shape = tf.shape(image)
    h, w = shape[0], shape[1]
    fits = tf.logical_and(h <= resolution, w <= resolution)
    def pad():
        top, left = (resolution - h) // 2, (resolution - w) // 2
        return tf.pad(image, [[top, resolution - h - top], [left, resolution - w - left], [0, 0]])
    def resize():
        side = tf.minimum(h, w)
        crop = tf.image.crop_to_bounding_box(image, (h - side) // 2, (w - side) // 2, side, side)
        return tf.image.resize(crop, [resolution, resolution], method="area")
    if fit == "pad":
        out = tf.cond(fits, pad, lambda: tf.image.resize_with_crop_or_pad(image, resolution,
                                                                          resolution))
    elif fit == "resize":
        out = resize()
    else:
        out = tf.cond(fits, pad, resize)
    out = tf.ensure_shape(out, [resolution, resolution, image.shape[-1]])
    return out / 127.5 - 1.0


def fit_pair(pair: tf.Tensor, resolution: int, fit: str) -> tf.Tensor:
    """A paired example (data/paired.py), uint8 [h, 2w, c] -> float32 [resolution,
    resolution, 2c] in [-1, 1]: each half fitted on its own, the input's channels first."""
    inputs, targets = tf.split(pair, 2, axis=1)
    return tf.concat([fit_image(inputs, resolution, fit), fit_image(targets, resolution, fit)],
                     axis=-1)


def jitter(image: tf.Tensor, size: int, key: tf.Tensor) -> tf.Tensor:
    """[r, r, c] resized to `size`, cropped back to a random [r, r, c]: pix2pix's jitter."""
    resized = tf.image.resize(image, [size, size], method="bicubic")
    return tf.clip_by_value(tf.image.stateless_random_crop(resized, tf.shape(image), key),
                            -1.0, 1.0)


def keep_classes(ds: tf.data.Dataset, classes: Optional[Sequence[int]],
                 num_classes: int) -> tf.data.Dataset:
    """(image, label) examples of `classes` only; all of them when classes is None or all."""
    if classes is None or len(classes) >= num_classes:
        return ds
    wanted = tf.constant(list(classes), tf.int32)
    return ds.filter(lambda image, label: tf.reduce_any(
        tf.equal(tf.cast(label, tf.int32), wanted)))


def limit_per_class(ds: tf.data.Dataset, limit: int, num_classes: int) -> tf.data.Dataset:
    """The first `limit` (image, label) examples of each class, in stream order; all at 0.

    A running count per class (tf.data scan) decides each example, so the stream is
    read once, in order, with nothing held but the counts.
    """
    if not limit:
        return ds

    def count(seen, example):
        label = tf.cast(example[1], tf.int32)
        seen = tf.tensor_scatter_nd_add(seen, [[label]], [1])
        return seen, (example, seen[label] <= limit)

    def within_limit(example, keep):
        del example
        return keep

    def example_only(example, keep):
        del keep
        return example
    return (ds.scan(tf.zeros([num_classes], tf.int32), count)
            .filter(within_limit).map(example_only))


def training_examples(source: datasets.Source, config: data_config.DatasetConfig,
                      read: Callable[[str], tf.data.Dataset]) -> tf.data.Dataset:
    """`read(config.split)` (the examples or the encoded records of the training split),
    limited to dataset.per_class_limit examples per class; before any sharding, so
    every input pipeline draws from the same subset."""
    return limit_per_class(read(config.split), config.per_class_limit, source.num_classes)


def _sharded_records(source: datasets.Source, split: str, inputs: InputConfig,
                     tuning: Tuning, ctx: tf.distribute.InputContext,
                     seed: Optional[int]) -> tf.data.Dataset:
    """Raw examples, read shard by shard through the (possibly congested) store, forever."""
    shards = tf.data.Dataset.range(inputs.num_shards)
    split_records = ctx.num_input_pipelines > 1 and inputs.num_shards < ctx.num_input_pipelines
    if ctx.num_input_pipelines > 1 and not split_records:
        shards = shards.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
    shards = shards.shuffle(inputs.num_shards, seed=seed, reshuffle_each_iteration=True).repeat()
    # The interleave's order depends on its cycle length only: fixed here, so the tuner
    # changes how many shards are read at once, never which records come when.
    cycle = max(1, min(inputs.num_shards, inputs.max_read_parallelism))

    def read(shard):
        records = source.shard(split, inputs.num_shards, shard, parallel=tf.data.AUTOTUNE)
        if split_records:  # fewer shards than pipelines: split each shard's records
            records = records.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return inputs.read_hook(records, shard) if inputs.read_hook else records
    return shards.interleave(read, cycle_length=cycle,
                             num_parallel_calls=min(tuning.read_parallelism, cycle),
                             deterministic=inputs.deterministic)


def _records_stream(source: datasets.Source, config: data_config.DatasetConfig, inputs: InputConfig,
                    tuning: Tuning, ctx: tf.distribute.InputContext, seed, batch: int,
                    start: int, classes: Optional[Sequence[int]]) -> tf.data.Dataset:
    """A prepared dataset's examples for this input pipeline, entered at its example `start`."""
    reading = records_lib.Reading(
        seed=seed, pipeline_id=ctx.input_pipeline_id, num_pipelines=ctx.num_input_pipelines,
        cycle_length=inputs.max_read_parallelism, parallelism=tuning.read_parallelism,
        deterministic=inputs.deterministic,
        # Records are shuffled in windows (seekable); as for the other sharded reads a
        # window of the full shuffle_buffer would first wait for that many slow reads.
        window=min(config.shuffle_buffer, 8 * batch), read_hook=inputs.read_hook)
    return source.decoded(source.prepared.stream(reading, start, classes), tf.data.AUTOTUNE)


def real_input_fn(source: datasets.Source, config: data_config.DatasetConfig, global_batch_size: int,
                  seed: int, per_worker: bool = False,
                  classes: Optional[Sequence[int]] = None,
                  inputs: InputConfig = InputConfig(),
                  tuning: Optional[Tuning] = None,
                  service: Optional[service_lib.LocalDataService] = None,
                  replica_batches_done: int = 0) -> InputFn:
    """Per-input-pipeline dataset of (images float32 [b, r, r, c] in [-1, 1], labels int32 [b]).

    replica_batches_done: batches each replica already took from this stream (a
    resumed run). A prepared dataset (dataset.name='records') is entered at that
    position without reading what came before; other streams are replayed past
    them. Either way it continues exactly where it stopped when the order is
    deterministic (input_pipeline.deterministic; streams read through tf.data
    service are not).

    classes: keep only examples of these labels (per-class training); None: all.
    inputs, tuning: how to read (see tuning.InputConfig); tuning None: the tuner's start.
    service: read through these tf.data service workers (inputs.service_workers).

    per_worker: parameter-server workers (ClusterCoordinator.create_per_worker_dataset).
    The dataset function is traced once and every worker gets input pipeline id
    0, so the seed alone would give every worker the same stream; the shuffle is
    instead seeded by a tensor: the seed plus the index of the worker building
    it (the coordinator's task index, fixed for a task across restarts), so each
    worker reads its own reproducible permutation.
    """
    tuning = tuning or InputTuner(inputs).tuning
    parallel = tf.data.AUTOTUNE

    def keep(ds):
        return keep_classes(ds, classes, source.num_classes)

    fit_example = fit_pair if source.paired else fit_image

    def fit(ds):
        return ds.map(lambda image, label: (fit_example(image, config.resolution, config.fit),
                                            label),
                      num_parallel_calls=parallel, deterministic=True)

    if config.per_class_limit and inputs.read_hook is not None:
        raise ConfigError("dataset.per_class_limit is not supported with shard-by-shard "
                          "reads (input_pipeline.read_hook, a slow store): the subset is "
                          "taken from the stream in its stored order")
    if service and source.prepared is not None:
        raise ConfigError("input_pipeline.service_workers with dataset.name='records' is not "
                          "supported: each input pipeline enters its own records stream by "
                          "position; read prepared datasets in the trainer (service_workers=0)")

    def input_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        if per_worker:
            with _graph_seed_cleared():
                return build(ctx, worker_seed(seed + ctx.input_pipeline_id))
        return build(ctx, None if service else seed + ctx.input_pipeline_id)

    def build(ctx: tf.distribute.InputContext, shuffle_seed) -> tf.data.Dataset:
        batch = ctx.get_per_replica_batch_size(global_batch_size)
        # Examples this pipeline already delivered (a resumed run): a prepared dataset
        # is entered there; the other streams are replayed past them (below).
        done = replica_batches_done * _replicas_per_pipeline(ctx) * batch
        first_index = 0
        if source.prepared is not None:
            ds = fit(_records_stream(source, config, inputs, tuning, ctx, shuffle_seed, batch,
                                     done, classes))
            first_index, done = done, 0
        elif inputs.sharded:
            ds = fit(keep(_sharded_records(source, config.split, inputs, tuning, ctx,
                                           shuffle_seed)))
            # Shards arrive interleaved in a fresh order every epoch already; a
            # record buffer of the full size would first wait for that many slow reads.
            ds = ds.shuffle(min(config.shuffle_buffer, 8 * batch), seed=shuffle_seed)
        elif source.records is not None:
            # Encoded files: shuffle the records (file names or encoded bytes) and decode
            # after, so the first batch waits for a batch of decodes, not a buffer of them.
            ds = training_examples(source, config, source.records)
            if ctx.num_input_pipelines > 1:
                ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            ds = keep(ds).shuffle(config.shuffle_buffer, seed=shuffle_seed,
                                  reshuffle_each_iteration=True).repeat()
            ds = fit(source.decoded(ds, parallel))
        else:
            ds = training_examples(source, config, source.make)
            if ctx.num_input_pipelines > 1:
                ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            ds = fit(keep(ds))
            if source.in_memory:  # resize/pad once, not every epoch
                ds = ds.cache()
            ds = ds.shuffle(config.shuffle_buffer, seed=shuffle_seed,
                            reshuffle_each_iteration=True).repeat()
        if config.random_flip or config.jitter_size:
            # Stateless, keyed by the example's position: the same on a replay.
            key_seed = seed + ctx.input_pipeline_id

            def moved(index, example):
                image, label = example
                key = tf.stack([tf.constant(key_seed, tf.int64), index])
                if config.jitter_size:
                    image = jitter(image, config.jitter_size,
                                   tf.random.experimental.stateless_fold_in(key, 1))
                if config.random_flip:
                    image = tf.image.stateless_random_flip_left_right(image, key)
                return image, label
            ds = ds.enumerate(start=first_index).map(moved, num_parallel_calls=parallel,
                                                     deterministic=True)
        ds = ds.batch(batch, drop_remainder=True)
        if done:
            ds = ds.skip(done // batch)
        if service:
            ds = service.distribute(ds, job_name=f"real_{seed}_{ctx.input_pipeline_id}")
        return ds.prefetch(tuning.prefetch if inputs.tuned else tf.data.AUTOTUNE)
    return input_fn


@contextlib.contextmanager
def _graph_seed_cleared():
    """Lets tf.data take tensor seeds while a global seed of 0 is set.

    tf.data checks its seeds in Python against (0, 0), and with the graph seed 0
    (keras.utils.set_random_seed(0)) that compares the tensor too: "using a symbolic
    tf.Tensor as a Python bool". Every random op of the pipeline has its own seed, so
    the graph seed is cleared while the pipeline is built.
    """
    graph = tf.compat.v1.get_default_graph()
    saved, graph.seed = graph.seed, None
    try:
        yield
    finally:
        graph.seed = saved


# Seeds of different workers lie this far apart, beyond any `seed + step` a resume adds.
WORKER_SEED_STRIDE = 1 << 40


def worker_seed(seed: int) -> tf.Tensor:
    """`seed` made distinct per parameter-server worker (call inside a worker's function)."""
    index = tf.distribute.coordinator.experimental_get_current_worker_index()
    return tf.constant(seed, tf.int64) + WORKER_SEED_STRIDE * tf.cast(index, tf.int64)


def _replicas_per_pipeline(ctx: tf.distribute.InputContext) -> int:
    # distribute_datasets_from_function hands each local replica its own batch.
    return max(1, ctx.num_replicas_in_sync // ctx.num_input_pipelines)


def noise_input_fn(dim_z: int, num_classes: int, global_batch_size: int, seed: int,
                   classes: Optional[Sequence[int]] = None,
                   replica_batches_done: int = 0) -> InputFn:
    """Per-input-pipeline dataset of (z float32 [b, dim_z], labels int32 [b]) for G samples.

    Labels are uniform over classes (or over `classes`), as BigGAN samples them.
    replica_batches_done: batches each replica already took (a resumed run); the
    stream starts right after them at no cost, being indexed.
    """
    labels = list(classes) if classes is not None else list(range(num_classes))
    def input_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        batch = ctx.get_per_replica_batch_size(global_batch_size)
        key = tf.constant([seed, 7919 * ctx.input_pipeline_id + 1], tf.int64)

        def example(i):
            z = tf.random.stateless_normal([dim_z], tf.stack([key[0] + i, key[1]]))
            label = class_groups.draw_labels(labels, [], tf.stack([key[1], key[0] + i]))
            return z, label
        first = replica_batches_done * _replicas_per_pipeline(ctx) * batch
        ds = tf.data.Dataset.counter(start=first).map(
            example, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return ds.batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    return input_fn
