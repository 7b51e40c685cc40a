"""The dataset tool (data/prepare.py, bin/prepare_dataset.py): a messy folder, a zip of
greyscale images, a TFDS dataset, and an interrupted preparation resumed to the same shards."""

import hashlib
import json
import os
import signal
import subprocess
import zipfile

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from PIL import Image

from paragan_tf.data import prepare
from paragan_tf.data import records
from paragan_tf.errors import ConfigError
from tests.helpers import clusters
from tests.helpers.repo import PYTHON, REPO
from tests.helpers.tiny_tfds import TinyDigits


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
