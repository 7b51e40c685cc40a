"""A user's own images through a translator (paragan_tf/generate/translate.py): a folder or
one file, fitted to the model's size or kept at their own, every refusal by name before any
work."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.errors import ConfigError
from paragan_tf.generate import translate


def _write(path, image: np.ndarray) -> str:
    encode = tf.io.encode_jpeg if str(path).endswith(".jpg") else tf.io.encode_png
    tf.io.write_file(str(path), encode(image))
    return str(path)


@pytest.fixture
def folder(tmp_path):
    rng = np.random.default_rng(0)
    _write(tmp_path / "a.png", rng.integers(0, 256, (28, 28, 1), dtype=np.uint8))
    _write(tmp_path / "b.jpg", rng.integers(0, 256, (40, 20, 3), dtype=np.uint8))
    (tmp_path / "notes.txt").write_text("not an image")
    return tmp_path


def _run(files, out, calls, **options):
    def negate(images):  # a translator that shows it ran: the images negated
        calls.append(tuple(images.shape))
        return -images
    settings = dict(channels=1, resolution=32, fit="resize", multiple=4, batch_size=16)
    settings.update(options)
    return translate.translate_files(files, str(out), negate, **settings)


def test_a_folder_is_fitted_to_the_model_translated_in_one_batch_and_written(folder, tmp_path):
    files = translate.inputs_of(str(folder))
    assert [os.path.basename(f) for f in files] == ["a.png", "b.jpg"]  # notes.txt skipped
    calls = []
    written = _run(files, tmp_path / "out", calls)
    assert calls == [(2, 32, 32, 1)]
    assert [os.path.basename(p) for p in written] == ["a.png", "b.png"]
    a = tf.io.decode_png(tf.io.read_file(written[0])).numpy()
    assert a.shape == (32, 32, 1) and a.dtype == np.uint8


def test_native_sizes_keep_each_image_and_refuse_one_that_does_not_divide(folder, tmp_path):
    calls = []
    written = _run(translate.inputs_of(str(folder)), tmp_path / "out", calls, size="native")
    assert calls == [(1, 28, 28, 1), (1, 40, 20, 1)]  # a batch per size
    assert tf.io.decode_png(tf.io.read_file(written[1])).shape == (40, 20, 1)
    with pytest.raises(ConfigError, match=r"a.png is 28 x 28: --size=native takes sides that "
                                          r"are multiples of 32"):
        _run(translate.inputs_of(str(folder)), tmp_path / "out2", [], size="native",
             multiple=32)


def test_one_file_and_every_refusal_before_any_work(folder, tmp_path):
    calls = []
    _run(translate.inputs_of(str(folder / "a.png")), tmp_path / "one", calls)
    assert calls == [(1, 32, 32, 1)]
    (folder / "c.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(ConfigError, match=r"c.png is not an image TensorFlow can decode"):
        _run(translate.inputs_of(str(folder)), tmp_path / "out", calls)
    os.remove(folder / "c.png")
    _write(folder / "a.jpg", np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(ConfigError, match=r"a.jpg and .*a.png would both be written to"):
        _run(translate.inputs_of(str(folder)), tmp_path / "out", calls)
    assert len(calls) == 1 and not os.path.exists(tmp_path / "out")
    with pytest.raises(ConfigError, match="neither an image file nor a folder"):
        translate.inputs_of(str(folder / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no image files"):
        translate.inputs_of(str(tmp_path / "empty"))
