"""Model parallelism across real processes on 127.0.0.1 (bin/launch_local.py): the hybrid of
G/D placement and MultiWorkerMirrored data parallelism, every worker one replica on two
logical CPU devices, equal to plain MultiWorkerMirrored training of the same run."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers.clusters import Launch

pytestmark = pytest.mark.slow

# SGD: an update proportional to the gradient, so a gradient mismatch shows as one.
MWMS = ["--gin_bindings=strategy.kind='multi_worker_mirrored'",
        "--gin_bindings=train.total_steps=2", "--gin_bindings=train.checkpoint_every=1",
        "--gin_bindings=train.accumulation=2", "--gin_bindings=dataset.shuffle_buffer=1",
        "--gin_bindings=G/optimizer.name='sgd'", "--gin_bindings=D/optimizer.name='sgd'",
        "--gin_bindings=G/optimizer.learning_rate=0.05",
        "--gin_bindings=D/optimizer.learning_rate=0.05"]
NETWORKS = ("generator", "discriminator", "generator_ema")


def _finish(launch: Launch) -> str:
    assert launch.finish() == 0, launch.output()[-3000:]
    return launch.output()


def _networks(checkpoint: str) -> dict:
    reader = tf.train.load_checkpoint(checkpoint)
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if k.split("/")[0] in NETWORKS}


def test_hybrid_split_over_two_workers_equals_plain_multi_worker_training(tmp_path):
    """Both workers end with the same weights, and with those of the unsplit run: D's
    gradients, computed on each worker's second device, were all-reduced across workers."""
    plain = _finish(Launch(tmp_path / "plain", *MWMS))
    split = _finish(Launch(tmp_path / "split", *MWMS,
                           "--gin_bindings=model_parallel.placement='split'"))
    placed = re.findall(r"\[(worker:\d)\].*model parallel: G, EMA G and G's optimizer on "
                        r"(\S+); D and its optimizer on (\S+)", split)
    assert sorted(w for w, _, _ in placed) == ["worker:0", "worker:1"], split[-3000:]
    for worker, g_device, d_device in placed:
        assert g_device.endswith(f"task:{worker[-1]}/device:CPU:0"), g_device
        assert d_device.endswith(f"task:{worker[-1]}/device:CPU:1"), d_device
    digests = dict(re.findall(r"\[(worker:\d)\].*final weights digest (\w+)", split))
    assert len(digests) == 2 and len(set(digests.values())) == 1, digests
    assert len(set(re.findall(r"final weights digest (\w+)", plain))) == 1
    # The weights against the unsplit run's, per network: the largest difference over the
    # largest update of the last step. Measured: 2.7e-6 (G), 2.1e-7 (D), 2.3e-6 (EMA G):
    # float round-off. With D's gradients left per worker under the split (not
    # all-reduced) the two workers' digests differ, and D is 0.79 off.
    before = _networks(str(tmp_path / "plain" / "ckpt-1"))
    one, two = (_networks(str(tmp_path / run / "ckpt-2")) for run in ("plain", "split"))
    assert one.keys() == two.keys() and len(one) > 100
    for network in NETWORKS:
        names = [k for k in one if k.startswith(network + "/")]
        moved = max(float(np.max(np.abs(one[k] - before[k]))) for k in names)
        off = max(float(np.max(np.abs(two[k] - one[k]))) for k in names)
        assert moved > 1e-3 and off < 1e-4 * moved, (network, off, moved)
