"""Prepared datasets: the dataset tool, the records stream and its exact resume."""

import collections
import hashlib
import json
import os
import signal
import subprocess
import zipfile

import gin
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from PIL import Image

import clusters
from conftest import PYTHON, REPO
from tiny_tfds import TinyDigits
from benchmarks import data as data_bench
from paragan_tf.data import datasets
from paragan_tf.data import prepare
from paragan_tf.data import records
from paragan_tf.errors import ConfigError
from paragan_tf.train import experiment
from paragan_tf.train import loop


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


# ---- the dataset tool ----------------------------------------------------------------

def _messy_folder(root):
    """Mixed formats and sizes, a grey and an RGBA image, a corrupt file, a stray text
    file, a hidden notebook folder."""
    rng = np.random.default_rng(0)
    formats = ["png", "jpg", "bmp", "webp", "gif", "tiff"]
    for c, cls in enumerate(("cat", "dog")):
        os.makedirs(root / cls)
        for i, fmt in enumerate(formats):
            image = rng.integers(0, 256, (20 + 7 * i, 40 - 3 * i, 3), dtype=np.uint8)
            Image.fromarray(image).save(root / cls / f"{i}.{fmt}")
    Image.fromarray(np.full((30, 12), 200, np.uint8)).save(root / "cat" / "grey.png")
    rgba = np.zeros((16, 16, 4), np.uint8)
    rgba[..., 0], rgba[:8, :, 3] = 255, 255  # red, the bottom half transparent
    Image.fromarray(rgba).save(root / "dog" / "rgba.png")
    (root / "dog" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    (root / "dog" / "notes.txt").write_text("labels are folder names")
    os.makedirs(root / ".ipynb_checkpoints")
    Image.fromarray(np.zeros((4, 4), np.uint8)).save(root / ".ipynb_checkpoints" / "x.png")


def _read_back(out):
    manifest = records.Manifest.load(str(out))
    examples = [(tf.io.decode_png(e).numpy(), int(label))
                for e, label in records.Records(str(out), manifest).all_records()]
    return manifest, examples


def test_prepare_a_messy_folder_counts_and_labels_everything(tmp_path):
    _messy_folder(tmp_path / "src")
    lines = []
    prepare.prepare(prepare.Options(str(tmp_path / "src"), str(tmp_path / "out"), 16,
                                    policy="pad", images_per_shard=4, workers=2),
                    log=lines.append)
    manifest, examples = _read_back(tmp_path / "out")
    assert manifest.classes == ["cat", "dog"]  # the hidden folder is no class
    assert manifest.counts == {"cat": 7, "dog": 7}  # dog: 6 + rgba, broken skipped
    assert [c.split(":")[0] for c in manifest.corrupt] == ["dog/broken.jpg"]
    assert manifest.skipped == {"hidden": 1, "not an image": 1}
    assert sum(s.count for s in manifest.shards) == len(examples) == 14
    assert manifest.channels == 3 and all(image.shape == (16, 16, 3) for image, _ in examples)
    assert sorted(label for _, label in examples) == [0] * 7 + [1] * 7
    assert any("1 corrupt file(s) skipped (dog/broken.jpg" in line for line in lines)
    # RGBA: composited on black, padded to the square (the transparent half is black).
    red = [image for image, label in examples if label == 1 and image[4, 8, 0] == 255
           and image[12, 8].max() == 0]
    assert len(red) == 1
    # Every shard's checksum is its file's.
    for shard in manifest.shards:
        with open(tmp_path / "out" / shard.file, "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == shard.sha256


def test_prepare_a_zip_of_greyscale_images_by_class_as_one_channel(tmp_path):
    archive = zipfile.ZipFile(tmp_path / "digits.zip", "w")
    rng = np.random.default_rng(0)
    for cls in ("a", "b", "c"):
        for i in range(3):
            path = tmp_path / f"{cls}{i}.png"
            Image.fromarray(rng.integers(0, 256, (10, 14), dtype=np.uint8)).save(path)
            archive.write(path, f"digits/{cls}/{i}.png")  # one wrapping folder
    archive.close()
    prepare.prepare(prepare.Options(str(tmp_path / "digits.zip"), str(tmp_path / "out"), 8,
                                    group_by_class=True, images_per_shard=2, workers=1),
                    log=lambda _: None)
    manifest, examples = _read_back(tmp_path / "out")
    assert (manifest.classes, manifest.channels) == (["a", "b", "c"], 1)
    assert [s.label for s in manifest.shards] == [0, 0, 1, 1, 2, 2]
    assert all(image.shape == (8, 8, 1) for image, _ in examples)


def _prepare_command(src, out, resolution=32):
    return [PYTHON, os.path.join(REPO, "bin", "prepare_dataset.py"), f"--source={src}",
            f"--output={out}", f"--resolution={resolution}", "--images_per_shard=4",
            "--workers=1"]


@pytest.mark.slow
def test_an_interrupted_prepare_resumes_to_the_same_shards(tmp_path):
    rng = np.random.default_rng(0)
    for cls in ("x", "y"):
        os.makedirs(tmp_path / "src" / cls)
        for i in range(60):
            Image.fromarray(rng.integers(0, 256, (48, 48, 3), dtype=np.uint8)).save(
                tmp_path / "src" / cls / f"{i}.png")
    prepare.prepare(prepare.Options(str(tmp_path / "src"), str(tmp_path / "straight"), 32,
                                    images_per_shard=4, workers=1), log=lambda _: None)
    # Killed (the whole process group, no clean-up) once two shards are done.
    log = tmp_path / "cut.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(_prepare_command(tmp_path / "src", tmp_path / "cut"),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    work = tmp_path / "cut" / ".prepare"

    def shards_done():
        return sum(f.endswith(".tfrecord.json") for f in os.listdir(work)) if work.is_dir() else 0

    # No deadline: wait while it prints or writes shards (clusters.wait_while_progressing).
    try:
        clusters.wait_while_progressing(
            lambda: True if shards_done() >= 2 or proc.poll() is not None else None,
            lambda: log.read_text() + "\n" * shards_done(), "the prepare run", poll=0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not (tmp_path / "cut" / records.MANIFEST).exists(), "finished before the kill"
    resumed = clusters.run_while_progressing(_prepare_command(tmp_path / "src",
                                                              tmp_path / "cut"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming:" in resumed.stdout and "of 30 shards were already written" in \
        resumed.stdout
    a, b = (json.loads((tmp_path / d / records.MANIFEST).read_text())
            for d in ("straight", "cut"))
    assert [(s["file"], s["count"], s["sha256"]) for s in a["shards"]] == \
        [(s["file"], s["count"], s["sha256"]) for s in b["shards"]], resumed.stdout
    assert len(a["shards"]) == 30
    assert sorted(os.listdir(tmp_path / "cut")) == sorted(os.listdir(tmp_path / "straight"))
    lines = []
    options = prepare.Options(str(tmp_path / "src"), str(tmp_path / "cut"), 32,
                              images_per_shard=4, workers=1)
    prepare.prepare(options, log=lines.append)
    assert "already holds this preparation" in lines[-1]
    with pytest.raises(ConfigError, match="prepared from another source or with other options"):
        prepare.prepare(prepare.Options(str(tmp_path / "src"), str(tmp_path / "cut"), 16,
                                        images_per_shard=4, workers=1), log=lines.append)


# ---- training from records: exact resume -------------------------------------------

def _train_records(tiny_gin, model_dir, total_steps, data_dir, *extra):
    """Trains (or resumes) the tiny config on a prepared dataset; the weights digest."""
    gin.clear_config()
    tiny_gin(f"train.total_steps = {total_steps}", "dataset.name = 'records'",
             f"dataset.data_dir = '{data_dir}'", "dataset.shuffle_buffer = 12",
             "dataset.random_flip = True", "train.checkpoint_every = 100",
             "train.sample_every = 100", "input_pipeline.max_read_parallelism = 3", *extra)
    exp = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
    loop.train(exp, str(model_dir))
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


def test_prepare_a_tfds_dataset_keeps_its_labels_and_class_names(tmp_path):
    TinyDigits(data_dir=str(tmp_path / "tfds")).download_and_prepare()
    prepare.prepare(prepare.Options("tfds:tiny_digits", str(tmp_path / "out"), 16,
                                    images_per_shard=5, tfds_data_dir=str(tmp_path / "tfds"),
                                    workers=1), log=lambda _: None)
    manifest, examples = _read_back(tmp_path / "out")
    assert [s.count for s in manifest.shards] == [5, 5, 2]
    assert manifest.classes == ["0", "1", "2", "3"] and manifest.source == "tfds:tiny_digits"
    # In TFDS's own stored order; TinyDigits' example i is grey level 10 i, label i % 4.
    stored = [(int(ex["image"][0, 0, 0]), int(ex["label"])) for ex in tfds.as_numpy(tfds.load(
        "tiny_digits", split="train", data_dir=str(tmp_path / "tfds"), shuffle_files=False))]
    assert [(int(image[0, 0, 0]), label) for image, label in examples] == stored
    assert sorted(stored) == [(10 * i, i % 4) for i in range(12)]
    with pytest.raises(ConfigError, match="--group_by_class needs every label"):
        prepare.plan(prepare.Options("tfds:tiny_digits", str(tmp_path / "x"), 16,
                                     group_by_class=True, tfds_data_dir=str(tmp_path / "tfds")))


@pytest.mark.slow
def test_the_data_benchmark_on_a_small_folder():
    # 10 timed batches after 3 of warm-up: past the first shuffle window (8 batches), so
    # the timed part reads records (3 would all come from the first window's buffer).
    result = data_bench.data_suite(sizes=(200,), batches=10, progress=lambda _: None)
    row = result["sizes"]["200"]
    assert row["shards"] == 1 and "200 images of 10 classes" in row["prepare"]["summary"]
    assert row["prepare"]["peak_rss_bytes"] > 100e6  # the tool and a worker, TF loaded
    assert set(row["startup_seconds"]) == {"image_folder_full_scan", "image_folder_lazy",
                                           "records"}
    rates = row["records_images_per_sec"]
    assert rates["latency_read_parallelism_1"] < rates["no_latency_read_parallelism_1"]
