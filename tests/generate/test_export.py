"""The exported generator (generate/export.py): a SavedModel that runs without paragan_tf."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

import numpy as np
import tensorflow as tf

from paragan_tf.generate import export
from paragan_tf.train import experiment
from tests.helpers.repo import PYTHON


def test_exported_generator_runs_in_a_fresh_process_without_paragan_tf(tiny_gin, tmp_path):
    tiny_gin()
    g = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0")).generator_ema
    path = export.export_generator(g, str(tmp_path / "generator"), dict(step=0))
    z = tf.random.stateless_normal([4, g.dim_z], [3, 4])
    labels = tf.constant([1, 2, 3, 4])
    expected = g((z, labels), training=False).numpy()
    np.save(tmp_path / "z.npy", z.numpy())
    script = textwrap.dedent(f"""
        import sys
        sys.modules["paragan_tf"] = None  # importing it anywhere below would fail
        import numpy as np, tensorflow as tf
        serve = tf.saved_model.load({path!r}).signatures["serving_default"]
        z = tf.constant(np.load({str(tmp_path / 'z.npy')!r}))
        images = serve(z=z, labels=tf.constant([1, 2, 3, 4]))["images"]
        np.save({str(tmp_path / 'images.npy')!r}, images.numpy())
        """)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TF_USE_LEGACY_KERAS")}
    proc = subprocess.run([PYTHON, "-c", script], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_allclose(np.load(tmp_path / "images.npy"), expected, atol=1e-5)
    info = json.loads((tmp_path / "generator" / export.INFO_FILE).read_text())
    assert info["dim_z"] == g.dim_z and info["resolution"] == 32
