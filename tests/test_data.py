"""The dataset registry and the per-input-context pipelines, on real shipped data."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.data import class_groups
from paragan_tf.data import config as data_config
from paragan_tf.data import datasets
from paragan_tf.data import pipeline
from paragan_tf.data import tuning
from paragan_tf.errors import ConfigError
from tiny_tfds import TinyDigits


def _config(**kw):
    return data_config.DatasetConfig(**dict(dict(name="mnist5k", shuffle_buffer=100), **kw))


def _first(input_fn, pipelines=1, pipeline_id=0, replicas=1):
    ctx = tf.distribute.InputContext(pipelines, pipeline_id, replicas)
    return next(iter(input_fn(ctx)))


def test_mnist5k_is_real_digits_padded_to_32_in_minus_one_one():
    source = datasets.get_source("mnist5k")
    assert (source.num_classes, source.channels, source.num_examples) == (10, 1, 5000)
    images, labels = _first(pipeline.real_input_fn(source, _config(), 16, seed=0))
    assert images.shape == (16, 32, 32, 1) and labels.shape == (16,)
    assert images.dtype == tf.float32 and labels.dtype == tf.int32
    x = images.numpy()
    assert x.min() == -1.0 and x.max() == 1.0
    assert np.all(x[:, :2] == -1.0) and np.all(x[:, :, -2:] == -1.0)  # the 2-pixel pad border
    assert set(labels.numpy()) <= set(range(10))
    all_labels = np.concatenate([y for _, y in source.make("train").batch(5000)])
    assert np.bincount(all_labels).tolist() == [500] * 10


def test_fashion_mnist_reads_the_debian_package_files():
    source = datasets.get_source("fashion_mnist")
    source.check()  # `make setup` installs dataset-fashion-mnist
    images, labels = next(iter(source.make("test").batch(10000)))
    assert images.shape == (10000, 28, 28, 1) and images.dtype == tf.uint8
    assert np.bincount(labels.numpy()).tolist() == [1000] * 10
    assert source.make("train").cardinality() == 60000


def test_fashion_mnist_missing_files_name_the_apt_command(tmp_path):
    source = datasets.get_source("fashion_mnist", data_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="apt-get install dataset-fashion-mnist"):
        source.check()


def test_unknown_dataset_lists_the_choices():
    with pytest.raises(ConfigError, match=r"dataset.name='cifar11' is unknown.*mnist5k"):
        datasets.get_source("cifar11")


def test_image_folder_reads_class_subfolders_and_resizes(tmp_path):
    rng = np.random.default_rng(0)
    for cls in ("cat", "dog"):
        os.makedirs(tmp_path / cls)
        for i in range(3):
            image = rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)
            tf.io.write_file(str(tmp_path / cls / f"{i}.png"), tf.io.encode_png(image))
    (tmp_path / "dog" / "notes.txt").write_text("not an image")
    source = datasets.get_source("image_folder", data_dir=str(tmp_path))
    assert (source.name, source.num_classes, source.num_examples) == ("image_folder", 2, 6)
    images, labels = _first(pipeline.real_input_fn(
        source, _config(name="image_folder", data_dir=str(tmp_path)), 6, seed=0))
    assert images.shape == (6, 32, 32, 3)
    assert sorted(labels.numpy().tolist()) == [0, 0, 0, 1, 1, 1]


def _decodes_per_shard(source):
    """(examples in shard 1 of 4, decodes it took, the same examples from make())."""
    decodes = []

    def counting(encoded, label):
        tf.py_function(lambda: decodes.append(1) or 0, [], tf.int32)
        return source.decode(encoded, label)
    shard = list(dataclasses.replace(source, decode=counting).shard("train", 4, 1))
    expected = list(source.make("train").shard(4, 1))
    for (a, la), (b, lb) in zip(shard, expected):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        assert int(la) == int(lb)
    return len(shard), len(decodes), len(expected)


def test_a_shard_of_encoded_files_decodes_its_own_files_only(tmp_path):
    # tf.data's shard pulls every record it skips: sharding the decoded stream
    # would decode all 12 files to read 3 (a sharded read of 16 shards: 16x the work).
    for i in range(12):
        os.makedirs(tmp_path / "images" / str(i % 2), exist_ok=True)
        tf.io.write_file(str(tmp_path / "images" / str(i % 2) / f"{i}.png"),
                         tf.io.encode_png(np.full((8, 8, 3), 20 * i, np.uint8)))
    folder = datasets.get_source("image_folder", data_dir=str(tmp_path / "images"))
    assert _decodes_per_shard(folder) == (3, 3, 3)
    TinyDigits(data_dir=str(tmp_path / "tfds")).download_and_prepare()
    tfds_source = datasets.get_source("tfds:tiny_digits", data_dir=str(tmp_path / "tfds"))
    assert _decodes_per_shard(tfds_source) == (3, 3, 3)


def test_image_folder_missing_or_empty_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="dataset.data_dir"):
        datasets.get_source("image_folder", data_dir=str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="holds no images"):
        datasets.get_source("image_folder", data_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="needs dataset.data_dir"):
        datasets.get_source("image_folder")


def test_tfds_dataset_from_a_prepared_data_dir(tmp_path):
    with pytest.raises(ConfigError, match=r"not prepared in dataset.data_dir.*tfds build"):
        datasets.get_source("tfds:tiny_digits", data_dir=str(tmp_path)).check()
    TinyDigits(data_dir=str(tmp_path)).download_and_prepare()
    source = datasets.get_source("tfds:tiny_digits", data_dir=str(tmp_path))
    source.check()
    assert (source.num_classes, source.channels) == (4, 3)
    images, labels = _first(pipeline.real_input_fn(
        source, _config(name="tfds:tiny_digits", data_dir=str(tmp_path)), 12, seed=0))
    assert images.shape == (12, 32, 32, 3)
    assert sorted(labels.numpy().tolist()) == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    with pytest.raises(ConfigError, match="is not a TFDS dataset"):
        datasets.get_source("tfds:no_such_dataset_xyz", data_dir=str(tmp_path))


def test_input_pipelines_read_disjoint_shards_at_per_replica_batch():
    source = datasets.get_source("mnist5k")
    fn = pipeline.real_input_fn(source, _config(shuffle_buffer=1), 8, seed=0)
    # 2 pipelines x 2 replicas: per-replica batch 2; pipeline p reads examples i % 2 == p.
    a = _first(fn, pipelines=2, pipeline_id=0, replicas=4)[0].numpy()
    b = _first(fn, pipelines=2, pipeline_id=1, replicas=4)[0].numpy()
    assert a.shape == (2, 32, 32, 1)
    everything = next(iter(source.make("train").batch(4)))[0].numpy()
    np.testing.assert_allclose(a[0, 2:30, 2:30, 0], everything[0, ..., 0] / 127.5 - 1.0, atol=1e-6)
    np.testing.assert_allclose(b[0, 2:30, 2:30, 0], everything[1, ..., 0] / 127.5 - 1.0, atol=1e-6)


def test_noise_is_a_function_of_example_index_not_of_the_batch_split():
    fn = pipeline.noise_input_fn(dim_z=8, num_classes=10, global_batch_size=6, seed=3)
    whole_z, whole_y = _first(fn)
    split = iter(fn(tf.distribute.InputContext(1, 0, 2)))  # two replicas of 3
    parts = [next(split) for _ in range(2)]
    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), whole_z)
    np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), whole_y)
    assert abs(float(tf.reduce_mean(whole_z))) < 1.0 and whole_y.dtype == tf.int32


def test_bad_dataset_options_are_config_errors():
    with pytest.raises(ConfigError, match="dataset.fit"):
        data_config.DatasetConfig(fit="stretch")
    with pytest.raises(ConfigError, match="dataset.split='test'"):
        datasets.get_source("mnist5k").make("test")
    with pytest.raises(ConfigError, match="dataset.scan_images=.*must be"):
        data_config.DatasetConfig(scan_images="sometimes")
    with pytest.raises(ConfigError, match="apply to image_folder only, not to mnist5k"):
        pipeline.load_source(_config(scan_images="lazy"), check=False)
    with pytest.raises(ConfigError, match="apply to image_folder only, not to mnist5k"):
        pipeline.load_source(_config(skip_corrupt=True), check=False)


def test_class_groups_split_the_labels_contiguously():
    assert class_groups.classes_for(10) == list(range(10))
    assert class_groups.classes_for(10, group=0, num_groups=3) == [0, 1, 2, 3]
    assert class_groups.classes_for(10, group=2, num_groups=3) == [7, 8, 9]
    groups = [class_groups.classes_for(10, g, 4) for g in range(4)]
    assert sorted(sum(groups, [])) == list(range(10))
    with pytest.raises(ConfigError, match="per_class.group=2 must be in"):
        class_groups.classes_for(10, group=2, num_groups=2)
    with pytest.raises(ConfigError, match="per_class.num_groups=11"):
        class_groups.classes_for(10, group=0, num_groups=11)


def test_a_label_group_restricts_real_and_noise_labels():
    source = datasets.get_source("mnist5k")
    _, labels = _first(pipeline.real_input_fn(source, _config(shuffle_buffer=5000), 64, seed=0,
                                              classes=[3, 7]))
    assert set(labels.numpy().tolist()) == {3, 7}
    _, noise_labels = _first(pipeline.noise_input_fn(8, 10, 64, seed=0, classes=[3, 7]))
    assert set(noise_labels.numpy().tolist()) == {3, 7}


def _png(path, array):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tf.io.write_file(str(path), tf.io.encode_png(array))


def test_a_greyscale_folder_trains_on_one_channel_unless_told(tmp_path):
    for i in range(4):
        _png(tmp_path / ("a" if i % 2 else "b") / f"{i}.png", np.full((9, 9, 1), i, np.uint8))
    grey = datasets.get_source("image_folder", data_dir=str(tmp_path))
    assert grey.channels == 1 and next(iter(grey.make("train")))[0].shape[-1] == 1
    rgb = datasets.get_source("image_folder", data_dir=str(tmp_path), channels=3)
    assert rgb.channels == 3 and next(iter(rgb.make("train")))[0].shape[-1] == 3
    _png(tmp_path / "a" / "colour.png", np.full((9, 9, 3), [255, 0, 0], np.uint8))
    assert datasets.get_source("image_folder", data_dir=str(tmp_path)).channels == 3
    with pytest.raises(ConfigError, match=r"dataset.channels=3: mnist5k has 1"):
        pipeline.load_source(_config(channels=3), check=False)


def test_a_lazily_checked_folder_skips_a_corrupt_file_once_and_names_it(tmp_path, caplog):
    for i in range(5):
        _png(tmp_path / "c" / f"{i}.png", np.full((6, 6, 3), 10 * i, np.uint8))
    (tmp_path / "c" / "3.png").write_bytes(b"\x89PNG\r\n\x1a\ncut short")
    source = datasets.get_source("image_folder", data_dir=str(tmp_path), scan_images="lazy")
    source.check()  # no scan: nothing decoded yet
    assert source.corrupt.count == 0
    with caplog.at_level("WARNING"):
        values = [int(image[0, 0, 0]) for image, _ in source.make("train").repeat(2)]
    assert sorted(values) == [0, 0, 10, 10, 20, 20, 40, 40]
    assert source.corrupt.count == 1
    assert caplog.text.count("skipping corrupt image file") == 1 and "c/3.png" in caplog.text
    # The negative control: the full scan finds it before anything is read.
    with pytest.raises(ConfigError, match=r"1 corrupt image file.*c/3\.png"):
        datasets.get_source("image_folder", data_dir=str(tmp_path), scan_images="full").check()


def test_hidden_folders_are_no_class_and_a_changed_class_list_is_refused(
        tiny_gin, tmp_path, caplog):
    """The new user's notebook: `.ipynb_checkpoints` inside the folder is skipped (and
    counted); the class list is printed and kept; a renamed class is refused by name on
    resume, before anything is restored. Lazy checking counts the corrupt file in
    health/corrupt_images."""
    import gin  # pylint: disable=import-outside-toplevel
    from paragan_tf.train import experiment, loop  # pylint: disable=import-outside-toplevel
    for i in range(6):
        _png(tmp_path / "data" / ("cat", "dog")[i % 2] / f"{i}.png",
             np.full((12, 12, 3), 30 * i, np.uint8))
    _png(tmp_path / "data" / ".ipynb_checkpoints" / "0-checkpoint.png",
         np.zeros((12, 12, 3), np.uint8))
    (tmp_path / "data" / "dog" / "labels.csv").write_text("not an image")
    (tmp_path / "data" / "cat" / "bad.png").write_bytes(b"")

    def train():
        gin.clear_config()
        tiny_gin("dataset.name = 'image_folder'", f"dataset.data_dir = '{tmp_path / 'data'}'",
                 "dataset.scan_images = 'lazy'", "train.total_steps = 2")
        exp = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
        return exp, loop.train(exp, str(tmp_path / "run"))
    with caplog.at_level("INFO", logger="absl"):  # another test may have quietened absl
        exp, result = train()
    assert exp.source.class_names == ("cat", "dog")
    assert "2 classes: 0=cat, 1=dog" in caplog.text
    assert "skipped 1 hidden (.ipynb_checkpoints); 1 not an image (dog/labels.csv)" in \
        caplog.text
    assert result["health/corrupt_images"] == 1.0
    assert (tmp_path / "run" / "classes.json").exists()
    # Same class count, other names: only the class list can tell (the models still fit).
    os.rename(tmp_path / "data" / "dog", tmp_path / "data" / "ant")
    with pytest.raises(ConfigError, match=r"label 0 was 'cat', is now 'ant'"):
        train()


def test_a_per_class_limit_trains_on_the_first_examples_of_each_class_in_every_pipeline(
        tmp_path, caplog):
    source = datasets.get_source("mnist5k")
    config = _config(per_class_limit=3, shuffle_buffer=50)
    # The subset by hand: the first 3 of each class in the stored order.
    images, labels = zip(*source.make("train").as_numpy_iterator())
    subset, seen = [], np.zeros(10, int)
    for image, label in zip(images, labels):
        if seen[label] < 3:
            seen[label] += 1
            subset.append(image[..., 0].tobytes())
    assert len(subset) == 30
    # Two input pipelines, two epochs each: every image they see is in the subset, and
    # between them they see all of it (the subset is taken before the pipelines split it).
    fn = pipeline.real_input_fn(source, config, 10, seed=0)
    seen_images = set()
    for pipeline_id in (0, 1):
        for batch, _ in fn(tf.distribute.InputContext(2, pipeline_id, 2)).take(6):
            for image in batch.numpy():
                digits = np.round((image[2:30, 2:30, 0] + 1.0) * 127.5).astype(np.uint8)
                seen_images.add(digits.tobytes())
    assert seen_images == set(subset)
    with caplog.at_level("INFO", logger="absl"):
        pipeline.check_not_empty(source, config)
        pipeline.check_not_empty(source, _config(per_class_limit=10_000))
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "training on 30 examples" in logged
    assert "class(es) [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] have fewer examples (500," in logged
    # Encoded files are limited as records (file names), before any decoding.
    for i in range(6):
        _png(tmp_path / ("a" if i % 2 else "b") / f"{i}.png", np.full((8, 8, 1), i, np.uint8))
    folder = datasets.get_source("image_folder", data_dir=str(tmp_path))
    folder_config = _config(name="image_folder", data_dir=str(tmp_path), per_class_limit=2)
    stored = [(int(image[0, 0, 0]), int(label)) for image, label in folder.make("train")]
    first_two = sorted([v for v, label in stored if label == 0][:2] +
                       [v for v, label in stored if label == 1][:2])
    values = sorted(int(round((float(image[16, 16, 0]) + 1.0) * 127.5)) for image in
                    _first(pipeline.real_input_fn(folder, folder_config, 4, seed=0))[0])
    assert values == first_two and len(set(first_two)) == 4
    with pytest.raises(ConfigError, match="dataset.per_class_limit=-1 must be >= 0"):
        data_config.DatasetConfig(per_class_limit=-1)
    with pytest.raises(ConfigError, match="dataset.per_class_limit is not supported with "
                                          "shard-by-shard reads .input_pipeline.read_hook"):
        pipeline.real_input_fn(source, config, 10, seed=0,
                               inputs=tuning.InputConfig(read_hook=lambda records, shard:
                                                         records))
