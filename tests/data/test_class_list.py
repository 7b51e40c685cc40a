"""The class list a run trains on (data/class_list.py): printed and kept, a changed one refused."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.errors import ConfigError


def _png(path, array):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tf.io.write_file(str(path), tf.io.encode_png(array))


def test_hidden_folders_are_no_class_and_a_changed_class_list_is_refused(
        tiny_gin, tmp_path, caplog):
    """The new user's notebook: `.ipynb_checkpoints` inside the folder is skipped (and
    counted); the class list is printed and kept; a renamed class is refused by name on
    resume, before anything is restored. Lazy checking counts the corrupt file in
    health/corrupt_images."""
    import gin  # pylint: disable=import-outside-toplevel
    from paragan_tf.train import driver, experiment  # pylint: disable=import-outside-toplevel
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
        return exp, driver.train(exp, str(tmp_path / "run"))
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


def test_the_class_list_appears_whole_to_the_other_workers(tmp_path, monkeypatch):
    """The chief writes classes.json while the other workers read it (a Slurm job once
    failed on a half-written list): it is written under another name, then renamed."""
    from paragan_tf.data import class_list
    written, real_gfile = [], tf.io.gfile.GFile

    def recording_gfile(path, mode="r"):
        if "w" in mode:
            written.append(os.path.basename(path))
        return real_gfile(path, mode)
    monkeypatch.setattr(tf.io.gfile, "GFile", recording_gfile)
    class_list.keep_or_check(str(tmp_path), ["a", "b"], "data", write=True)
    assert written and class_list.FILE not in written, written
    assert class_list.saved(str(tmp_path)) == ["a", "b"]
    assert sorted(os.listdir(tmp_path)) == [class_list.FILE]
