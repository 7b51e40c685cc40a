"""Model parallelism across real processes on 127.0.0.1 (bin/launch_local.py), each against
plain MultiWorkerMirrored training of the same run: the hybrids of G/D placement and of
pipeline stages with data parallelism (every worker one replica on two logical CPU
devices), and Adam's moments sharded over the workers (then resumed in one process)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers.clusters import TINY, Launch, run_binary

pytestmark = pytest.mark.slow

# Adam with an epsilon far above the gradients (|g| << 10) updates by about
# learning_rate / epsilon x its momentum, in proportion to the gradient, where Adam as
# configured would move each weight by about its learning rate whatever the gradient's
# scale: so a wrong factor on a mode's gradients changes the weights here. The sharded
# optimizer is still Adam (its moments are what it shards).
LINEAR_ADAM = [f"--gin_bindings={net}/optimizer.{name}={value}" for net in ("G", "D")
               for name, value in (("epsilon", 10.0), ("learning_rate", 0.01))]
MWMS = ["--gin_bindings=strategy.kind='multi_worker_mirrored'",
        "--gin_bindings=train.total_steps=2", "--gin_bindings=train.checkpoint_every=1",
        "--gin_bindings=train.accumulation=2", "--gin_bindings=dataset.shuffle_buffer=1",
        *LINEAR_ADAM]
NETWORKS = ("generator", "discriminator", "generator_ema")


def _finish(launch: Launch) -> str:
    assert launch.finish() == 0, launch.output()[-3000:]
    return launch.output()


def _networks(checkpoint: str) -> dict:
    reader = tf.train.load_checkpoint(checkpoint)
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if k.split("/")[0] in NETWORKS}


def _off(run_dir, plain_dir) -> dict:
    """Per network: the largest difference from the plain run's weights over the largest
    update of the plain run's last step."""
    before = _networks(str(plain_dir / "ckpt-1"))
    one, two = _networks(str(plain_dir / "ckpt-2")), _networks(str(run_dir / "ckpt-2"))
    assert one.keys() == two.keys() and len(one) > 100
    ratios = {}
    for network in NETWORKS:
        names = [k for k in one if k.startswith(network + "/")]
        moved = max(float(np.max(np.abs(one[k] - before[k]))) for k in names)
        assert moved > 1e-5, network
        ratios[network] = max(float(np.max(np.abs(two[k] - one[k]))) for k in names) / moved
    return ratios


def _digests(output: str) -> set:
    return set(re.findall(r"final weights digest (\w+)", output))


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """Plain MultiWorkerMirrored training, Adam: (its folder, its output)."""
    run_dir = tmp_path_factory.mktemp("mwms") / "plain"
    output = _finish(Launch(run_dir, *MWMS))
    assert len(_digests(output)) == 1  # the two workers agree
    return run_dir, output


def test_hybrid_split_over_two_workers_equals_plain_multi_worker_training(plain, tmp_path):
    """Both workers end with the same weights, and with those of the unsplit run: D's
    gradients, computed on each worker's second device, were all-reduced across workers."""
    split = _finish(Launch(tmp_path / "split", *MWMS,
                           "--gin_bindings=model_parallel.placement='split'"))
    placed = re.findall(r"\[(worker:\d)\].*model parallel: G, EMA G and G's optimizer on "
                        r"(\S+); D and its optimizer on (\S+)", split)
    assert sorted(w for w, _, _ in placed) == ["worker:0", "worker:1"], split[-3000:]
    for worker, g_device, d_device in placed:
        assert g_device.endswith(f"task:{worker[-1]}/device:CPU:0"), g_device
        assert d_device.endswith(f"task:{worker[-1]}/device:CPU:1"), d_device
    assert len(_digests(split)) == 1, _digests(split)
    # Measured (2026-11-28, LINEAR_ADAM): 0.0 for G, D and EMA G; 1e-4 leaves room for
    # another machine's round-off. With D's gradients doubled under the split
    # (train/step.py, on purpose) D is off by 1.14 of its largest update and this fails;
    # with Adam's own epsilon (1e-8, the bound 2e-3 it had) it was off by 6.5e-4 and
    # passed. With D's gradients left per worker (not all-reduced) the two workers'
    # digests differ and this fails too.
    ratios = _off(tmp_path / "split", plain[0])
    print("split: largest difference / largest update", ratios)
    assert max(ratios.values()) < 1e-4, ratios


def test_pipeline_stages_over_two_workers_equal_plain_multi_worker_training(plain, tmp_path):
    """Each worker's replica over two devices, both networks' blocks in two stages: the
    same weights on both workers and as the unstaged run."""
    staged = _finish(Launch(tmp_path / "stages", *MWMS,
                            "--gin_bindings=model_parallel.stages=2"))
    assert re.search(r"\[worker:1\].*model parallel: G's blocks in 2 stages on "
                     r"\S+task:1/device:CPU:0, \S+task:1/device:CPU:1; D's on", staged), \
        staged[-3000:]
    assert len(_digests(staged)) == 1, _digests(staged)
    # Measured (2026-11-28): 0.0, as the split's; D's gradients doubled: D off by 1.14.
    ratios = _off(tmp_path / "stages", plain[0])
    print("stages: largest difference / largest update", ratios)
    assert max(ratios.values()) < 1e-4, ratios


def test_sharded_adam_over_two_workers_equals_plain_and_resumes_in_one_process(plain, tmp_path):
    """Adam's moments 1/2 per worker: the same weights as keras' Adam; the checkpoint holds
    the whole moments, and a one-process run (one replica) resumes from it."""
    sharded = _finish(Launch(tmp_path / "sharded", *MWMS,
                             "--gin_bindings=model_parallel.shard_optimizer=True"))
    assert len(_digests(sharded)) == 1, _digests(sharded)
    # Measured (2026-11-28): 0.0; the gradients doubled in ShardedAdam.apply (on purpose):
    # D off by 1.13, G by 2.3e-3.
    ratios = _off(tmp_path / "sharded", plain[0])
    print("sharded: largest difference / largest update", ratios)
    assert max(ratios.values()) < 1e-6, ratios
    resumed = run_binary("train.py", f"--model_dir={tmp_path / 'sharded'}", *TINY,
                         *[b for b in MWMS if "multi_worker" not in b],
                         "--gin_bindings=model_parallel.shard_optimizer=True",
                         "--gin_bindings=train.total_steps=3")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert re.search(r"resumed from .*ckpt-2 at step 2", resumed.stderr), resumed.stderr[-3000:]
