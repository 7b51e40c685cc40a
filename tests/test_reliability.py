"""Faults and bad input, in process: the NaN guard, checkpoints that must not be written or
half-loaded, exact resume and determinism. (Killing real processes: test_crash_resume.py.)"""

from __future__ import annotations

import os
import re
import shutil

import gin
import numpy as np
import pytest
import tensorflow as tf

from conftest import mirrored_2
from paragan_tf.errors import ConfigError
from paragan_tf.errors import Diverged
from paragan_tf.train import checkpoints
from paragan_tf.train import experiment
from paragan_tf.train import loop


def _weights(exp):
    return {v.name: v.numpy() for m in (exp.generator, exp.discriminator, exp.generator_ema)
            for v in m.variables}


def _one_device():
    return tf.distribute.OneDeviceStrategy("/cpu:0")


@pytest.mark.parametrize("two_replicas", [False, True])
def test_nan_in_a_real_batch_skips_the_update_of_both_networks(tiny_gin, two_replicas):
    tiny_gin("train.d_steps = 1")
    exp = experiment.build(mirrored_2() if two_replicas else _one_device())
    gan_step = loop.make_gan_step(exp)
    noise = [(tf.random.normal([8, 16], seed=i), tf.range(8) % 10) for i in range(2)]
    images = tf.random.uniform([8, 32, 32, 1], -1, 1, seed=1)
    # One NaN pixel in one example: on two replicas only the first replica sees it.
    poisoned = tf.tensor_scatter_nd_update(images, [[0, 3, 3, 0]], [float("nan")])

    def step(images):
        # The global batch distributed over the replicas exactly as training does it.
        dataset = tf.data.Dataset.from_tensors((((images, tf.range(8) % 10),), tuple(noise)))
        real, noise_ = next(iter(exp.strategy.experimental_distribute_dataset(dataset)))
        return run(real, noise_)

    @tf.function(autograph=False)
    def run(real, noise_):
        return exp.strategy.run(gan_step, args=(real, noise_))

    trainable = [v.name for v in exp.generator.trainable_variables +
                 exp.discriminator.trainable_variables]
    before = _weights(exp)
    out = step(poisoned)
    skipped = exp.strategy.experimental_local_results(out["health/skipped"])
    assert all(float(s) == 1.0 for s in skipped)
    after = _weights(exp)
    for name in trainable:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    assert int(exp.d_optimizer.iterations.numpy()) == 0
    assert int(exp.g_optimizer.iterations.numpy()) == 0
    # The same step on clean data updates both (so the check above can fail).
    out = step(images)
    assert float(exp.strategy.experimental_local_results(out["health/skipped"])[0]) == 0.0
    changed = _weights(exp)
    assert any(not np.array_equal(changed[n], before[n]) for n in trainable
               if n.startswith("generator/"))
    assert any(not np.array_equal(changed[n], before[n]) for n in trainable
               if n.startswith("discriminator/"))
    assert int(exp.g_optimizer.iterations.numpy()) == 1


def test_diverging_run_stops_after_k_skipped_steps_with_only_finite_checkpoints(
        tiny_gin, tmp_path):
    # A D learning rate of 1e38 puts D's weights near float32's limit after one
    # update; from then on its spectral norm and logits are Inf/NaN every step.
    tiny_gin("train.total_steps = 40", "train.checkpoint_every = 1", "train.log_every = 1",
             "train.steps_per_loop = 8", "train.max_consecutive_skips = 3",
             "D/optimizer.learning_rate = 1e38", "train.max_to_keep = 100")
    exp = experiment.build(_one_device())
    with pytest.raises(Diverged, match=r"3 consecutive steps .*max_consecutive_skips=3"):
        loop.train(exp, str(tmp_path))
    skipped = int(exp.health.skipped.numpy())
    assert skipped == 3 and int(exp.health.consecutive.numpy()) == 3
    assert int(exp.step.numpy()) < 40
    written = tf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths
    assert written
    for path in written:
        reader = tf.train.load_checkpoint(path)
        for name, dtype in reader.get_variable_to_dtype_map().items():
            if dtype.is_floating:
                assert np.all(np.isfinite(reader.get_tensor(name))), (path, name)
    events = tf.io.gfile.glob(os.path.join(str(tmp_path), "events.out.tfevents.*"))
    tags = {v.tag for e in events for ev in tf.compat.v1.train.summary_iterator(e)
            for v in ev.summary.value}
    assert "health/skipped_steps" in tags


def test_a_checkpoint_with_non_finite_weights_is_never_written(tiny_gin, tmp_path):
    tiny_gin()
    exp = experiment.build(_one_device())
    ckpt = checkpoints.Checkpointer(str(tmp_path), 3, **exp.trackables())
    ckpt.save(1)
    kernel = exp.discriminator.trainable_variables[0]
    kernel.assign(tf.fill(kernel.shape, float("inf")))
    with pytest.raises(Diverged, match=r"not writing the checkpoint of step 2: .*NaN or Inf"):
        ckpt.save(2)
    assert ckpt.latest.endswith("ckpt-1")
    assert not tf.io.gfile.glob(os.path.join(str(tmp_path), "ckpt-2*"))


def test_another_architecture_fails_loudly_and_nothing_is_half_loaded(tiny_gin, tmp_path):
    tiny_gin()
    exp = experiment.build(_one_device())
    checkpoints.Checkpointer(str(tmp_path), 3, **exp.trackables()).save(2)
    gin.clear_config()
    tiny_gin("Discriminator.ch = 8", "train.seed = 5")  # wider D, same G
    other = experiment.build(_one_device())
    before = _weights(other)
    ckpt = checkpoints.Checkpointer(str(tmp_path), 3, **other.trackables())
    with pytest.raises(ConfigError, match="does not match this run's models"):
        ckpt.restore_latest()
    # G matches the checkpoint and may have been assigned before D failed: it was put back.
    for name, value in _weights(other).items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)
    assert int(other.step.numpy()) == 0


def test_an_unreadable_newest_checkpoint_falls_back_to_the_one_before(tiny_gin, tmp_path):
    tiny_gin()
    exp = experiment.build(_one_device())
    ckpt = checkpoints.Checkpointer(str(tmp_path), 3, **exp.trackables())
    exp.step.assign(1)
    ckpt.save(1)
    at_one = _weights(exp)
    exp.step.assign(2)
    exp.generator.trainable_variables[0].assign_add(
        tf.ones_like(exp.generator.trainable_variables[0]))
    ckpt.save(2)
    data, = tf.io.gfile.glob(os.path.join(str(tmp_path), "ckpt-2.data-*"))
    with open(data, "r+b") as f:  # a damaged disk: the data file loses its tail
        f.truncate(os.path.getsize(data) // 2)
    fresh = checkpoints.Checkpointer(str(tmp_path), 3, **exp.trackables())
    assert fresh.restore_latest().endswith("ckpt-1")
    assert int(exp.step.numpy()) == 1
    for name, value in _weights(exp).items():
        np.testing.assert_array_equal(value, at_one[name], err_msg=name)


def _train(tiny_gin, model_dir, total_steps, *extra):
    """Trains (or resumes) to total_steps; returns the experiment."""
    gin.clear_config()
    tiny_gin(f"train.total_steps = {total_steps}", "dataset.random_flip = True",
             "train.checkpoint_every = 100", "train.sample_every = 100", *extra)
    exp = experiment.build(_one_device())
    loop.train(exp, str(model_dir))
    return exp


@pytest.mark.slow
def test_same_seed_is_bitwise_deterministic_and_resume_equals_an_uninterrupted_run(
        tiny_gin, tmp_path):
    """One CPU device: identical weights, bit for bit (tolerance 0). Resuming restores
    every variable exactly (optimizer step counts included) and replays both input
    streams to the checkpoint's position, and the CPU kernels of this model are
    deterministic here without enable_op_determinism, so nothing may differ. Two
    separately built runs of the same seed (a, c) agreeing is the determinism check; c
    stopping at 3 and resuming is the resume check. A copy of c's step-3 checkpoint
    resumed with `resume_input='reshuffle'` sees other data and must differ: the
    comparison can fail."""
    straight = _weights(_train(tiny_gin, tmp_path / "a", 6))
    _train(tiny_gin, tmp_path / "c", 3)
    shutil.copytree(tmp_path / "c", tmp_path / "d")
    exp = _train(tiny_gin, tmp_path / "c", 6)
    resumed = _weights(exp)
    reshuffled = _weights(_train(tiny_gin, tmp_path / "d", 6,
                                 "train.resume_input = 'reshuffle'"))
    for name in straight:
        np.testing.assert_array_equal(resumed[name], straight[name], err_msg=name)
    assert any(not np.array_equal(reshuffled[n], straight[n]) for n in straight)
    # 3 restored + 3 new updates (tiny.gin: 2 D steps per G step), saved as ckpt-6.
    assert int(exp.g_optimizer.iterations.numpy()) == 6
    assert int(exp.d_optimizer.iterations.numpy()) == 12
    assert tf.train.latest_checkpoint(str(tmp_path / "c")).endswith("ckpt-6")


def _image_folder(root, corrupt=()):
    rng = np.random.default_rng(0)
    for cls in ("cat", "dog"):
        os.makedirs(root / cls, exist_ok=True)
        for i in range(4):
            image = rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)
            tf.io.write_file(str(root / cls / f"{i}.png"), tf.io.encode_png(image))
    for name in corrupt:  # a PNG cut short, as an interrupted copy leaves it
        data = (root / name).read_bytes()
        (root / name).write_bytes(data[:len(data) // 3])
    return [f"dataset.name = 'image_folder'", f"dataset.data_dir = '{root}'"]


def test_a_corrupt_image_file_is_named_before_training(tiny_gin, tmp_path):
    tiny_gin(*_image_folder(tmp_path, corrupt=["dog/2.png"]))
    with pytest.raises(ConfigError, match=r"1 corrupt image file.*dog/2\.png.*skip_corrupt"):
        experiment.build(_one_device())


def test_corrupt_image_files_are_skipped_and_counted_when_asked(tiny_gin, tmp_path, caplog):
    tiny_gin(*_image_folder(tmp_path, corrupt=["dog/2.png", "cat/0.png"]),
             "dataset.skip_corrupt = True", "train.total_steps = 2")
    exp = experiment.build(_one_device())
    assert "skipping 2 corrupt image file(s)" in caplog.text
    assert "cat/0.png" in caplog.text and "dog/2.png" in caplog.text
    seen = list(exp.source.make("train").as_numpy_iterator())
    assert len(seen) == 6
    result = loop.train(exp, str(tmp_path / "run"))
    assert result["step"] == 2 and np.isfinite(result["loss/D"])


def test_an_empty_dataset_is_a_clear_error_not_a_hang(tiny_gin, tmp_path):
    _image_folder(tmp_path)
    os.makedirs(tmp_path / "emu")  # a class folder with no images
    tiny_gin(f"dataset.name = 'image_folder'", f"dataset.data_dir = '{tmp_path}'",
             "per_class.num_groups = 3", "per_class.group = 2")
    with pytest.raises(ConfigError, match=r"holds no examples of the classes \[2\]"):
        experiment.build(_one_device())


@pytest.mark.parametrize("text,where", [
    ("train.total_steps = 5\ntrain.batch_size = (\n", "EOF in multi-line statement in {} "),
    ("include 'gin/tiny.gin'\ntrain.batch_size 8\n", r"\({}, line 2: train.batch_size 8\)"),
    ("train.total_steps = 5\nGeneratr.ch = 3\n", r"'Generatr'.*{}\", line 2: Generatr.ch = 3"),
])
def test_a_malformed_gin_file_is_named_with_its_line(tmp_path, text, where):
    from paragan_tf.train import experiment  # pylint: disable=import-outside-toplevel
    path = tmp_path / "broken.gin"
    path.write_text(text)
    with pytest.raises(ConfigError, match=where.format(re.escape(str(path)))):
        experiment.parse([str(path)], [])


def test_a_checkpoint_with_the_preemption_counter_restores_elsewhere(tiny_gin, tmp_path):
    """A MultiWorkerMirrored run stopped by SIGTERM saves TensorFlow's preemption counter
    too; one-device readers (bin/eval.py, sample.py, export.py) must still restore it."""
    tiny_gin()
    exp = experiment.build(_one_device())
    for extra, ok in (("checkpointed_runs", True), ("something_else", False)):
        folder = str(tmp_path / extra)
        written = tf.train.Checkpoint(**exp.trackables(),
                                      **{extra: tf.Variable(3, dtype=tf.int64)})
        tf.train.CheckpointManager(written, folder, 3, checkpoint_name="ckpt").save(7)
        saver = checkpoints.Checkpointer(folder, 3, **exp.trackables())
        if ok:
            assert saver.restore(os.path.join(folder, "ckpt-7")).endswith("ckpt-7")
        else:  # the negative control: any other extra object is still a mismatch
            with pytest.raises(ConfigError, match="does not match this run's models"):
                saver.restore(os.path.join(folder, "ckpt-7"))
