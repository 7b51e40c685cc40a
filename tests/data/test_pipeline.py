"""The input pipelines (data/pipeline.py): per-input-context shards and batches, noise, label
groups, the per-class limit, an empty dataset refused, and each parameter-server worker's own
shuffle (on real server processes on 127.0.0.1)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.data import config as data_config
from paragan_tf.data import datasets
from paragan_tf.data import pipeline
from paragan_tf.data import tuning
from paragan_tf.errors import ConfigError
from paragan_tf.train import experiment
from tests.helpers.ps_cluster import coordinate
from tests.helpers.training import image_folder


def _config(**kw):
    return data_config.DatasetConfig(**dict(dict(name="mnist5k", shuffle_buffer=100), **kw))


def _first(input_fn, pipelines=1, pipeline_id=0, replicas=1):
    ctx = tf.distribute.InputContext(pipelines, pipeline_id, replicas)
    return next(iter(input_fn(ctx)))


def _png(path, array):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tf.io.write_file(str(path), tf.io.encode_png(array))


def _one_device():
    return tf.distribute.OneDeviceStrategy("/cpu:0")



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


def test_a_label_group_restricts_real_and_noise_labels():
    source = datasets.get_source("mnist5k")
    _, labels = _first(pipeline.real_input_fn(source, _config(shuffle_buffer=5000), 64, seed=0,
                                              classes=[3, 7]))
    assert set(labels.numpy().tolist()) == {3, 7}
    _, noise_labels = _first(pipeline.noise_input_fn(8, 10, 64, seed=0, classes=[3, 7]))
    assert set(noise_labels.numpy().tolist()) == {3, 7}


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


def test_an_empty_dataset_is_a_clear_error_not_a_hang(tiny_gin, tmp_path):
    image_folder(tmp_path)
    os.makedirs(tmp_path / "emu")  # a class folder with no images
    tiny_gin(f"dataset.name = 'image_folder'", f"dataset.data_dir = '{tmp_path}'",
             "per_class.num_groups = 3", "per_class.group = 2")
    with pytest.raises(ConfigError, match=r"holds no examples of the classes \[2\]"):
        experiment.build(_one_device())


def _chance_bound(a: int, b: int, population: int) -> float:
    """Examples two independent uniform draws of a and b share, plus 6 standard deviations."""
    mean = a * b / population
    return mean + 6 * mean ** 0.5 + 1


@pytest.mark.slow
def test_each_worker_reads_its_own_permutation_and_the_pid_offset_scheme_did_not(tmp_path):
    batches = 4  # 256 examples per worker out of 5,000: ~13 shared by chance
    report = coordinate("tests/helpers/ps_streams.py", batches, tmp_path)
    assert report["reproducible"], "a rebuilt input gave a worker other examples"
    # 256 distinct examples per worker. Not asserted of the replaced scheme: when a pid %
    # 5,000 falls in an epoch's last 256 examples, its window runs into the next epoch's
    # reshuffle and repeats a few (a make test run saw 253 and 253).
    assert report["worker_seed"]["examples"] == [batches * 64] * 2
    new, old = report["worker_seed"], report["pid_offset"]
    bound = _chance_bound(*new["examples"], new["dataset"])
    assert new["overlap"] <= bound, report
    # The negative control: consecutive pids shift one permutation by a few examples.
    assert old["overlap"] > bound, report
