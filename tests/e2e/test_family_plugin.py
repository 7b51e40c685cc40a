"""A GAN family of a user's own (tests/plugins/dcgan_family.py, outside paragan_tf/),
registered by its gin file's `import` line alone, through the binaries: trained, sampled,
exported (and reloaded), planned; what it does not do refused by name; its module missing
from the path refused in one line (docs/families.md)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers.repo import REPO, relative, run_binary

pytestmark = pytest.mark.slow

GIN = "--gin_file=tests/plugins/tiny_dcgan.gin"
ON_PATH = {"PYTHONPATH": os.path.join(REPO, "tests", "plugins")}


def _ok(result):
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip()


def test_a_users_family_trains_samples_exports_and_plans_through_the_binaries(tmp_path):
    run = relative(tmp_path / "run")
    _ok(run_binary("train.py", GIN, f"--model_dir={run}", env=ON_PATH))
    with open(tmp_path / "run" / "train_result.json") as f:
        assert json.load(f)["step"] == 4
    assert "import dcgan_family" in (tmp_path / "run" / "operative_config.gin").read_text()
    grid = _ok(run_binary("sample.py", f"--model_dir={run}", env=ON_PATH))
    assert tf.io.decode_png(tf.io.read_file(grid)).shape == (8 * 34 + 2, 8 * 34 + 2, 1)
    exported = _ok(run_binary("export.py", f"--model_dir={run}", env=ON_PATH))
    images = tf.saved_model.load(exported).signatures["serving_default"](
        z=tf.random.normal([3, 16]), labels=tf.zeros([3], tf.int32))["images"].numpy()
    assert images.shape == (3, 32, 32, 1) and np.all(np.abs(images) <= 1.0)
    planned = _ok(run_binary("plan.py", GIN, "--devices=v100x8", env=ON_PATH))
    assert planned.splitlines()[0].startswith("v100x8 float32:"), planned
    refused = run_binary("translate.py", f"--model_dir={run}", "--input=docs/images/edges",
                         env=ON_PATH)
    assert refused.returncode == 2 and refused.stderr.strip().endswith(
        "the GAN family 'dcgan' (labelled images) cannot translate images (bin/translate.py)")
    missing = run_binary("train.py", GIN, f"--model_dir={run}_2")
    assert missing.returncode == 2 and missing.stderr.strip().splitlines()[-1].endswith(
        "No module named 'dcgan_family'; put the module's folder on PYTHONPATH or install it")
