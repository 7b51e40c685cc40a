"""Paired data (data/paired.py): the pix2pix folder format, the edges datasets built from
installed data, and pairs fitted and flipped as one through the input pipeline."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.data import config as data_config
from paragan_tf.data import datasets
from paragan_tf.data import paired
from paragan_tf.data import pipeline
from paragan_tf.data import prepare
from paragan_tf.errors import ConfigError
from paragan_tf.train import experiment


def _write_pairs(root: str, split: str, count: int, side: int = 12, channels: int = 3,
                 odd: bool = False) -> np.ndarray:
    """`count` random pairs written as PNG files root/split/NNN.png; the pairs, by name."""
    os.makedirs(os.path.join(root, split), exist_ok=True)
    rng = np.random.default_rng(len(split) + count)
    pairs = rng.integers(0, 256, (count, side, 2 * side + odd, channels), dtype=np.uint8)
    for i, pair in enumerate(pairs):
        tf.io.write_file(os.path.join(root, split, f"{i:03d}.png"), tf.io.encode_png(pair))
    return pairs


def test_a_pix2pix_folder_reads_each_split_as_side_by_side_pairs(tmp_path):
    train = _write_pairs(str(tmp_path), "train", 5)
    val = _write_pairs(str(tmp_path), "val", 2)
    (tmp_path / "train" / "notes.txt").write_text("not an image")
    source = datasets.get_source("pix2pix_folder", data_dir=str(tmp_path))
    source.check()
    assert source.paired and source.channels == 3 and source.num_classes == 1
    for split, written in (("train", train), ("val", val)):
        read = sorted((image.tobytes() for image, label in
                       source.make(split).as_numpy_iterator()))
        assert read == sorted(pair.tobytes() for pair in written)
    with pytest.raises(ConfigError, match="dataset.split='test'.*train"):
        source.make("test")


def test_btoa_swaps_the_halves(tmp_path):
    written = _write_pairs(str(tmp_path), "train", 1, channels=1)[0]
    source = datasets.get_source("pix2pix_folder", data_dir=str(tmp_path), direction="BtoA")
    image, _ = next(source.make("train").as_numpy_iterator())
    np.testing.assert_array_equal(image[:, :12], written[:, 12:])
    np.testing.assert_array_equal(image[:, 12:], written[:, :12])


def test_an_odd_width_file_is_named_at_start_up(tmp_path):
    _write_pairs(str(tmp_path), "train", 2, odd=True)
    source = datasets.get_source("pix2pix_folder", data_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="000.png is 25 x 12.*even width"):
        source.check()


def test_edges_mark_the_outline_of_a_shape():
    square = np.zeros((1, 12, 12, 1), np.uint8)
    square[:, 3:9, 3:9] = 255
    edges = paired.edges_of(square)[0, ..., 0]
    assert set(np.unique(edges)) == {0, 255}
    assert edges[3, 5] == 255 and edges[5, 3] == 255  # on the outline
    assert edges[5, 5] == 0 and edges[0, 0] == 0  # inside, outside


def test_mnist5k_edges_pairs_each_digit_with_its_edges():
    source = datasets.get_source("mnist5k_edges")
    digits = datasets.get_source("mnist5k")
    assert source.paired and source.num_examples == 5000 and source.channels == 1
    pair, label = next(source.make("train").as_numpy_iterator())
    digit, _ = next(digits.make("train").as_numpy_iterator())
    assert pair.shape == (28, 56, 1) and label == 0
    np.testing.assert_array_equal(pair[:, 28:], digit)
    np.testing.assert_array_equal(pair[:, :28], paired.edges_of(digit[None])[0])


def test_the_pipeline_fits_each_half_and_flips_both_alike(tmp_path):
    written = _write_pairs(str(tmp_path), "train", 4, side=8)
    source = datasets.get_source("pix2pix_folder", data_dir=str(tmp_path))
    config = data_config.DatasetConfig(name="pix2pix_folder", data_dir=str(tmp_path),
                                       resolution=16, fit="resize", shuffle_buffer=4,
                                       random_flip=True)
    input_fn = pipeline.real_input_fn(source, config, global_batch_size=4, seed=3)
    images, _ = next(iter(input_fn(tf.distribute.InputContext(1, 0, 1))))
    assert images.shape == (4, 16, 16, 6)
    inputs, targets = paired.split_pair(images)
    # Each half is its own image, fitted alone; a flip flips both or neither.
    expected = {}
    for pair in written:
        a = pipeline.fit_image(pair[:, :8], 16, "resize").numpy()
        b = pipeline.fit_image(pair[:, 8:], 16, "resize").numpy()
        expected[a.tobytes()] = (b, False)
        expected[a[:, ::-1].tobytes()] = (b[:, ::-1], True)
    found = [expected[a.tobytes()] for a in inputs.numpy()]
    for (target, _), b in zip(found, targets.numpy()):
        np.testing.assert_allclose(target, b, atol=1e-6)
    assert 0 < sum(flip for _, flip in found) < 4  # this seed flips some, not all


def test_the_jitter_crops_both_halves_alike_and_replays(tmp_path):
    """pix2pix's random jitter (dataset.jitter_size): resized up, cropped back at random, the
    same crop for input and target; keyed by the example's position, as the flips."""
    side = 8
    rng = np.random.default_rng(0)
    halves = rng.integers(0, 256, (4, side, side, 1), dtype=np.uint8)
    os.makedirs(tmp_path / "train")
    for i, half in enumerate(halves):  # the target is the input: a crop shows as a match
        tf.io.write_file(str(tmp_path / "train" / f"{i}.png"),
                         tf.io.encode_png(np.concatenate([half, half], 1)))
    source = datasets.get_source("pix2pix_folder", data_dir=str(tmp_path))

    def batch(jitter_size):
        config = data_config.DatasetConfig(name="pix2pix_folder", data_dir=str(tmp_path),
                                           resolution=side, shuffle_buffer=1,
                                           jitter_size=jitter_size)
        input_fn = pipeline.real_input_fn(source, config, global_batch_size=4, seed=3)
        return next(iter(input_fn(tf.distribute.InputContext(1, 0, 1))))[0].numpy()
    plain, jittered = batch(0), batch(12)
    inputs, targets = np.split(jittered, 2, axis=-1)
    np.testing.assert_array_equal(inputs, targets)
    assert jittered.shape == plain.shape and np.max(np.abs(jittered - plain)) > 0.1
    assert np.all(np.abs(jittered) <= 1.0)
    np.testing.assert_array_equal(batch(12), jittered)  # the same crops on a replay
    with pytest.raises(ConfigError, match="dataset.jitter_size=6 must be 0"):
        data_config.DatasetConfig(resolution=8, jitter_size=6)


def test_direction_elsewhere_and_biggan_on_pairs_are_refused_by_name(tiny_gin):
    with pytest.raises(ConfigError, match="direction='BtoA' applies to pix2pix_folder and"):
        pipeline.load_source(data_config.DatasetConfig(name="mnist5k", direction="BtoA"))
    with pytest.raises(ConfigError, match="direction='CtoD' must be one of"):
        data_config.DatasetConfig(name="pix2pix_folder", direction="CtoD")
    tiny_gin("dataset.name = 'mnist5k_edges'")
    with pytest.raises(ConfigError, match="mnist5k_edges.*pairs.*pix2pix"):
        experiment.build(check_data=False)


def test_prepared_pairs_fit_each_half_and_read_back_as_pairs(tmp_path):
    """bin/prepare_dataset.py --paired: each half fitted alone, stored side by side; the
    records source reads pairs (swapped with BtoA); an odd-width file is listed, not lost."""
    written = _write_pairs(str(tmp_path / "src"), "val", 3, side=8, channels=1)
    _write_pairs(str(tmp_path / "src"), "train", 1, side=8, channels=1)
    tf.io.write_file(str(tmp_path / "src" / "val" / "odd.png"),
                     tf.io.encode_png(np.zeros((8, 17, 1), np.uint8)))
    manifest = prepare.prepare(prepare.Options(
        str(tmp_path / "src"), str(tmp_path / "out"), 16, policy="resize", split="val",
        workers=1, paired=True), log=lambda _: None)
    assert manifest.paired and manifest.num_examples == 3 and manifest.split == "val"
    assert len(manifest.corrupt) == 1 and "odd.png: NotAPair: 17 x 8" in manifest.corrupt[0]
    for direction in ("AtoB", "BtoA"):
        source = datasets.get_source("records", data_dir=str(tmp_path / "out"),
                                     direction=direction)
        assert source.paired
        read = [image for image, _ in source.make("val").as_numpy_iterator()]
        assert all(image.shape == (16, 32, 1) for image in read)
        # Each stored half is the written half, stretched alone: its mean survives.
        halves = sorted((float(r[:, :16].mean()), float(r[:, 16:].mean())) for r in read)
        means = sorted((float(w[:, :8].mean()), float(w[:, 8:].mean())) for w in written)
        if direction == "BtoA":
            means = sorted((b, a) for a, b in means)
        np.testing.assert_allclose(halves, means, atol=2.0)
    # The same folder prepared as images (its split folders taken for classes).
    prepare.prepare(prepare.Options(str(tmp_path / "src"), str(tmp_path / "flat"), 8,
                                    workers=1), log=lambda _: None)
    with pytest.raises(ConfigError, match="holds images, not pairs"):
        datasets.get_source("records", data_dir=str(tmp_path / "flat"), direction="BtoA")
