"""Prepared datasets (data/records.py): the interleave arithmetic, the records stream and
its exact resume. (The dataset tool that writes them: tests/data/test_prepare.py.)"""

import collections
import os

import gin
import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.data import datasets
from paragan_tf.data import records
from paragan_tf.errors import ConfigError
from paragan_tf.train import experiment
from paragan_tf.train import driver


# ---- the interleave arithmetic, against tf.data itself ------------------------------

def _tf_interleave(counts, inputs, cycle, parallel):
    """tf.data's deterministic interleave over inputs [(index, records to skip)]."""
    table = tf.constant(counts, tf.int64)
    ds = tf.data.Dataset.from_tensor_slices(
        (tf.constant([i for i, _ in inputs], tf.int64), tf.constant([k for _, k in inputs],
                                                                    tf.int64)))
    ds = ds.interleave(lambda i, k: tf.data.Dataset.range(100).map(lambda r: i * 100 + r)
                       .take(tf.gather(table, i)).skip(k), cycle_length=cycle, block_length=1,
                       num_parallel_calls=parallel, deterministic=True)
    return [int(x) for x in ds]


def test_interleave_state_continues_tf_datas_interleave_exactly():
    """The golden is tf.data's own interleave, sequential and parallel: entered at every
    position of 8 random shard layouts (empty shards, more shards than the cycle and
    fewer), the continuation equals the rest of the uninterrupted interleave."""
    rng = np.random.default_rng(1)
    for _ in range(8):
        counts = [int(c) for c in rng.integers(0, 6, int(rng.integers(1, 8)))]
        cycle = int(rng.integers(1, 5))
        full = _tf_interleave(counts, [(i, 0) for i in range(len(counts))], cycle, None)
        for position in range(len(full)):
            state = records.interleave_state(counts, cycle, position)
            for parallel in (None, min(2, cycle)):
                assert _tf_interleave(counts, state, cycle, parallel) == full[position:], \
                    (counts, cycle, position, parallel)


# ---- a small prepared dataset written directly ---------------------------------------

def _write_records(root, shard_labels, size=8, channels=3):
    """Shards of PNG records whose pixel value is the example's id; shard_labels: a
    list per shard of labels. Returns the manifest."""
    os.makedirs(root, exist_ok=True)
    shards, counts, next_id = [], {}, 0
    for s, labels in enumerate(shard_labels):
        name = f"train-{s:05d}-of-{len(shard_labels):05d}.tfrecord"
        with tf.io.TFRecordWriter(os.path.join(root, name)) as w:
            for label in labels:
                image = np.full((size, size, channels), next_id, np.uint8)
                w.write(records.example_bytes(tf.io.encode_png(image).numpy(), label))
                next_id += 1
                counts[str(label)] = counts.get(str(label), 0) + 1
        grouped = len(set(labels)) == 1
        shards.append(records.Shard(name, len(labels), "-", os.path.getsize(
            os.path.join(root, name)), labels[0] if grouped else None))
    classes = sorted({label for labels in shard_labels for label in labels})
    manifest = records.Manifest([str(c) for c in classes], counts, shards, size, "resize",
                                channels, "png", "train", "test", all(
                                    s.label is not None for s in shards))
    with open(os.path.join(root, records.MANIFEST), "w") as f:
        f.write(manifest.to_json())
    return manifest


def _ids(ds, n):
    return [int(image[0, 0, 0]) for image, _ in ds.take(n)]


@pytest.mark.parametrize("parallelism", [None, 3])
def test_a_records_stream_entered_anywhere_equals_the_uninterrupted_stream(
        tmp_path, parallelism):
    # 5 shards of 7, 3, 6, 1, 5 records (22 an epoch), 3 open at a time, windows of 4:
    # positions inside windows, shards and later epochs, 2 pipelines splitting shards.
    manifest = _write_records(tmp_path, [[0] * 7, [1] * 3, [0] * 6, [1] * 1, [0] * 5])
    source = datasets.get_source("records", data_dir=str(tmp_path))
    for pipelines, pid in ((1, 0), (2, 1)):
        reading = records.Reading(seed=5, pipeline_id=pid, num_pipelines=pipelines,
                                  cycle_length=3, parallelism=parallelism, window=4)
        stream = records.Records(str(tmp_path), manifest)
        full = _ids(source.decoded(stream.stream(reading)), 70)
        per_epoch = 22 if pipelines == 1 else 3 + 1  # pipeline 1 of 2: shards 1 and 3
        whole = np.lcm(per_epoch, 4)  # whole epochs in whole windows: each record as often
        assert set(collections.Counter(full[:whole]).values()) == {whole // per_epoch}
        assert len(set(full[:whole])) == per_epoch
        for start in (1, 5, 9, 23, 30, 47):
            assert _ids(source.decoded(stream.stream(reading, start)), 20) == \
                full[start:start + 20], (pipelines, start)


def test_a_records_stream_builds_inside_a_tf_function(tmp_path):
    """Parameter-server workers build their datasets inside a tf.function."""
    manifest = _write_records(tmp_path, [[0] * 5, [1] * 4, [0] * 3])
    stream = records.Records(str(tmp_path), manifest)
    reading = records.Reading(seed=1, cycle_length=2, window=3)

    @tf.function
    def labels_from(start):
        return stream.stream(reading, start).take(6).reduce(
            tf.constant(0, tf.int64), lambda total, example: total * 2 + tf.cast(
                example[1], tf.int64))
    assert int(labels_from(4)) == int(stream.stream(reading, 4).take(6).reduce(
        tf.constant(0, tf.int64), lambda total, example: total * 2 + tf.cast(example[1],
                                                                            tf.int64)))


def test_a_records_stream_seeded_by_a_tensor_equals_the_same_seed_as_a_number(tmp_path):
    """A parameter-server worker's stream is seeded by a tensor (its worker index)."""
    manifest = _write_records(tmp_path, [[0] * 5, [1] * 4, [0] * 3])
    source = datasets.get_source("records", data_dir=str(tmp_path))
    stream = records.Records(str(tmp_path), manifest)

    def first_ids(seed):
        reading = records.Reading(seed=seed, cycle_length=2, window=3)
        return source.decoded(stream.stream(reading)).take(30).map(
            lambda image, label: tf.cast(image[0, 0, 0], tf.int64))

    @tf.function
    def from_tensor(seed):
        return first_ids(seed).batch(30).get_single_element()
    expected = [int(i) for i in first_ids(7)]
    assert from_tensor(tf.constant(7, tf.int64)).numpy().tolist() == expected
    assert from_tensor(tf.constant(8, tf.int64)).numpy().tolist() != expected  # the seed counts
    with pytest.raises(ValueError, match="part-way"):
        records.Records(str(tmp_path), manifest).stream(
            records.Reading(seed=tf.constant(7, tf.int64), window=3), 5)


def test_per_class_reading_opens_only_its_shards(tmp_path, caplog):
    grouped = _write_records(tmp_path / "grouped", [[0] * 4, [1] * 3, [2] * 5, [1] * 2])
    assert grouped.grouped_by_class
    # The other classes' shards are gone: opening one would fail the read.
    for shard in grouped.shards:
        if shard.label != 1:
            os.remove(tmp_path / "grouped" / shard.file)
    stream = records.Records(str(tmp_path / "grouped"), grouped)
    assert [s.file for s in stream.shards_for([1])[0]] == [grouped.shards[1].file,
                                                           grouped.shards[3].file]
    got = list(stream.stream(records.Reading(seed=0, window=1), classes=[1]).take(10))
    assert {int(label) for _, label in got} == {1}
    mixed = _write_records(tmp_path / "mixed", [[0, 1, 2, 1], [2, 1, 0]])
    stream = records.Records(str(tmp_path / "mixed"), mixed)
    shards, must_filter = stream.shards_for([1])
    assert (len(shards), must_filter) == (2, True)
    got = list(stream.stream(records.Reading(seed=0, window=1), classes=[1]).take(6))
    assert {int(label) for _, label in got} == {1}
    assert "not grouped by class" in caplog.text


def test_records_start_up_reads_the_manifest_and_names_a_missing_shard(tmp_path):
    with pytest.raises(ConfigError, match="has no dataset.json.*prepare_dataset"):
        datasets.get_source("records", data_dir=str(tmp_path))
    manifest = _write_records(tmp_path, [[0] * 3, [1] * 2])
    source = datasets.get_source("records", data_dir=str(tmp_path))
    assert (source.num_classes, source.channels, source.class_names) == (2, 3, ("0", "1"))
    source.check()
    os.remove(tmp_path / manifest.shards[1].file)
    with pytest.raises(ConfigError, match=f"{manifest.shards[1].file} is missing"):
        source.check()


# ---- training from records: exact resume -------------------------------------------

def _train_records(tiny_gin, model_dir, total_steps, data_dir, *extra):
    """Trains (or resumes) the tiny config on a prepared dataset; the weights digest."""
    gin.clear_config()
    tiny_gin(f"train.total_steps = {total_steps}", "train.d_steps = 2", "dataset.name = 'records'",
             f"dataset.data_dir = '{data_dir}'", "dataset.shuffle_buffer = 12",
             "dataset.random_flip = True", "train.checkpoint_every = 100",
             "train.sample_every = 100", "input_pipeline.max_read_parallelism = 3", *extra)
    exp = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
    driver.train(exp, str(model_dir))
    return experiment.weights_digest(exp)


@pytest.mark.slow
def test_resuming_from_records_equals_an_uninterrupted_run(tiny_gin, tmp_path, caplog):
    """4 steps straight reading one shard at a time against 2 + 2 resumed with parallel reads:
    16 real images a step from 22 an epoch in windows of 12, so the resume enters epoch 1
    inside a shard and a window. (Entering with sequential reads: the stream test above.)"""
    _write_records(tmp_path / "data", [[0] * 7, [1] * 3, [0] * 6, [1] * 1, [1] * 5])
    data = tmp_path / "data"
    straight = _train_records(tiny_gin, tmp_path / "a", 4, data,
                              "input_pipeline.read_parallelism = 1")
    _train_records(tiny_gin, tmp_path / "b", 2, data)
    caplog.clear()
    with caplog.at_level("INFO", logger="absl"):  # another test may have quietened absl
        resumed = _train_records(tiny_gin, tmp_path / "b", 4, data)
    assert resumed == straight
    assert "records: pipeline 0 enters epoch 1 at record 2 of 22" in caplog.text
