"""Adam with sharded moments (distribute/sharded_adam.py, model_parallel.shard_optimizer): equal to
keras' Adam over 10 steps on two replicas, each replica holding the matching slice of its
moments; checkpoints saved whole and restored onto another replica count; what is refused."""

from __future__ import annotations

import json
import shutil

import gin
import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.errors import ConfigError
from paragan_tf.train import driver
from paragan_tf.train import experiment
from tests.helpers.training import mirrored_2

SHARD = "model_parallel.shard_optimizer = True"
STEPS = ("train.d_steps = 1", "dataset.shuffle_buffer = 1", "Generator.sync_bn = True",
         "train.checkpoint_every = 5")


def _one_device():
    return tf.distribute.OneDeviceStrategy("/cpu:0")


def _weights(exp):
    return {v.name: v.numpy() for m in (exp.generator, exp.discriminator, exp.generator_ema)
            for v in m.variables}


def _train(model_dir, strategy, steps, *bindings):
    experiment.parse(["gin/tiny.gin"], [f"train.total_steps = {steps}", *STEPS, *bindings],
                     finalize=False)
    exp = experiment.build(strategy)
    driver.train(exp, str(model_dir))
    gin.clear_config()
    return exp


def _shards(exp, optimizer):
    """Each replica's (m, v) slices, in replica order."""
    moments = optimizer.moments
    return [(m.numpy(), v.numpy()) for m, v in zip(
        exp.strategy.experimental_local_results(moments.m),
        exp.strategy.experimental_local_results(moments.v))]


@pytest.fixture(scope="module")
def sharded_dir(tmp_path_factory):
    """The folder of the `sharded` run: ckpt-5 and ckpt-10 (read-only for the tests)."""
    return tmp_path_factory.mktemp("sharded")


@pytest.fixture(scope="module")
def sharded(sharded_dir):
    """10 steps with sharded Adam on 2 Mirrored replicas (checkpoints every 5)."""
    return _train(sharded_dir, mirrored_2(), 10, SHARD)


def test_sharded_adam_equals_keras_adam_and_each_replica_holds_its_slice(sharded, tmp_path):
    plain = _train(tmp_path / "plain", mirrored_2(), 10)
    one, two = _weights(plain), _weights(sharded)
    worst = max(float(np.max(np.abs(two[n] - one[n]))) for n in one)
    # Measured: 0.0 (the same float operations in the same order, on slices).
    assert worst < 1e-6, worst
    assert int(sharded.g_optimizer.iterations.numpy()) == 10
    assert int(sharded.d_optimizer.iterations.numpy()) == 10
    for network, keras_adam, ours in (
            (plain.generator, plain.g_optimizer, sharded.g_optimizer),
            (plain.discriminator, plain.d_optimizer, sharded.d_optimizer)):
        del network
        whole_m = np.concatenate([m.numpy().ravel() for m in keras_adam._momentums])  # pylint: disable=protected-access
        whole_v = np.concatenate([v.numpy().ravel() for v in keras_adam._velocities])  # pylint: disable=protected-access
        shards = _shards(sharded, ours)
        size, shard = ours.moments.size, ours.moments.shard
        assert size == whole_m.size and len(shards) == 2 and shard == (size + 1) // 2
        assert np.abs(whole_m).max() > 0  # the moments moved
        for replica, (m, v) in enumerate(shards):
            part = slice(replica * shard, min(size, (replica + 1) * shard))
            width = part.stop - part.start
            np.testing.assert_allclose(m[:width], whole_m[part], rtol=1e-6, atol=1e-9)
            np.testing.assert_allclose(v[:width], whole_v[part], rtol=1e-6, atol=1e-12)


def _stopped_at_5(run_dir, stopped):
    """A copy of `run_dir` as a run stopped at step 5 left it: ckpt-5 its newest."""
    shutil.copytree(run_dir, stopped,
                    ignore=shutil.ignore_patterns("ckpt-10.*", "checkpoint", ".lock"))
    (stopped / "checkpoint").write_text('model_checkpoint_path: "ckpt-5"\n'
                                        'all_model_checkpoint_paths: "ckpt-5"\n')
    assert tf.train.latest_checkpoint(str(stopped)) == str(stopped / "ckpt-5")
    assert not list(stopped.glob("ckpt-10*"))


def test_a_sharded_checkpoint_restores_onto_another_replica_count(sharded, sharded_dir,
                                                                  tiny_gin, tmp_path):
    """Saved from 2 replicas, restored onto 1: the one replica holds both halves; and
    the same checkpoint resumed on 2 replicas continues exactly as if never stopped.
    The `sharded` run saved ckpt-5 on its way to step 10 (checkpoint_every=5): its folder,
    cut back to ckpt-5, is a run stopped there."""
    _stopped_at_5(sharded_dir, tmp_path / "stopped")
    saved = tf.train.load_checkpoint(str(tmp_path / "stopped" / "ckpt-5"))
    whole_m = saved.get_tensor("g_optimizer/moments/.ATTRIBUTES/m")
    copied = len((tmp_path / "stopped" / "stats.jsonl").read_text().splitlines())
    resumed = _train(tmp_path / "stopped", mirrored_2(), 10, SHARD)
    # It resumed at step 5 (from scratch, 10 deterministic steps would end equal too).
    logged = [json.loads(line)["step"] for line in
              (tmp_path / "stopped" / "stats.jsonl").read_text().splitlines()[copied:]
              if json.loads(line)["kind"] == "log"]
    assert logged and min(logged) > 5, logged
    for name, value in _weights(sharded).items():
        np.testing.assert_array_equal(_weights(resumed)[name], value, err_msg=name)
    # Onto one replica: its single shard is the whole vector the two replicas saved.
    tiny_gin("train.total_steps = 5", *STEPS, SHARD)
    one = experiment.build(_one_device())
    from paragan_tf.train import checkpoints  # pylint: disable=import-outside-toplevel
    checkpoints.Checkpointer(str(tmp_path / "stopped"), 3, **one.trackables()).restore(
        str(tmp_path / "stopped" / "ckpt-5"))
    (m, _), = _shards(one, one.g_optimizer)
    np.testing.assert_array_equal(m, whole_m)
    assert int(one.g_optimizer.iterations.numpy()) == 5


def test_what_sharding_cannot_run_under_is_refused_by_name(tiny_gin):
    tiny_gin(SHARD, "G/optimizer.name = 'sgd'")
    with pytest.raises(ConfigError, match="shards Adam's moments; G/optimizer.name='sgd'"):
        experiment.build(_one_device())
    # pylint: disable-next=import-outside-toplevel
    from paragan_tf.distribute import model_parallel as mode
    for kind in ("parameter_server", "tpu"):
        with pytest.raises(ConfigError, match=f"shard_optimizer=True is available under .* "
                                              f"only, not {kind!r}"):
            mode.prepare_devices(mode.ModelParallelConfig(shard_optimizer=True), kind)
    with pytest.raises(ConfigError, match="shard_optimizer=True is not available with "
                                          "model_parallel.placement='split'"):
        mode.ModelParallelConfig(shard_optimizer=True, placement="split")
