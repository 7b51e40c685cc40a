"""pix2pix trained by the framework (paragan_tf/families/): from gin/tiny_pix2pix.gin through
driver.train, its grid and its evaluation; one device = two Mirrored replicas = sharded
Adam = G and D split over two devices; a folder in pix2pix's format; what is refused."""

from __future__ import annotations

import gc
import json

import gin
import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.errors import ConfigError
from paragan_tf.train import driver
from paragan_tf.train import experiment
from tests.helpers.training import mirrored_2

TINY_PIX2PIX = "gin/tiny_pix2pix.gin"
# Adam with an epsilon far above the gradients moves each weight in proportion to its
# gradient (tests/e2e/test_model_parallel.py): a wrong factor on a replica's gradients
# shows in the weights. Sync batch norm: two replicas' statistics are the global batch's.
EQUAL = [f"{net}/optimizer.{name} = {value}" for net in ("G", "D")
         for name, value in (("epsilon", 10.0), ("learning_rate", 0.01))] + [
    "Pix2PixGenerator.sync_bn = True", "PatchDiscriminator.sync_bn = True",
    "train.total_steps = 2", "train.sample_every = 0", "train.checkpoint_every = 2",
    "dataset.shuffle_buffer = 1"]


@pytest.fixture(autouse=True)
def collect_garbage():
    """Keras models and traced steps hold reference cycles: freed after each test, not at
    the end of this test worker's run of the suite."""
    yield
    gc.collect()


def _parse(*bindings: str) -> None:
    gin.clear_config()
    experiment.parse([TINY_PIX2PIX], list(bindings), finalize=False)


def _weights(exp) -> dict:
    return {v.name: v.numpy() for m in (exp.generator, exp.discriminator, exp.generator_ema)
            for v in m.variables}


def _trained(model_dir, strategy, *bindings):
    """(weights before, after) of 2 steps of the tiny pix2pix run."""
    _parse(*EQUAL, *bindings)
    exp = experiment.build(strategy)
    before = _weights(exp)
    driver.train(exp, str(model_dir))
    gin.clear_config()
    return before, _weights(exp)


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
    return _trained(tmp_path_factory.mktemp("one"), tf.distribute.OneDeviceStrategy("/cpu:0"))


def _off(run, reference) -> dict:
    """Per network: the largest difference from the reference's weights over the
    reference's largest update."""
    (init, after), (init_ref, ref) = run, reference
    moved, off = {}, {}
    for name, value in ref.items():
        np.testing.assert_array_equal(init[name], init_ref[name], err_msg=name)
        network = name.split("/")[0]
        moved[network] = max(moved.get(network, 0.0),
                             float(np.max(np.abs(value - init_ref[name]))))
        off[network] = max(off.get(network, 0.0), float(np.max(np.abs(after[name] - value))))
    assert min(moved.values()) > 1e-3, moved  # G, D and the EMA copy all really moved
    return {network: off[network] / moved[network] for network in moved}


@pytest.mark.parametrize("strategy,bindings", [
    ("mirrored", ()),
    ("mirrored", ("model_parallel.shard_optimizer = True",)),
    ("one_device", ("model_parallel.placement = 'split'",)),
], ids=["mirrored", "sharded_adam", "split"])
def test_pix2pix_trains_alike_on_one_device_two_replicas_sharded_adam_and_split(
        one_device, tmp_path, strategy, bindings):
    made = mirrored_2() if strategy == "mirrored" else tf.distribute.OneDeviceStrategy("/cpu:0")
    ratios = _off(_trained(tmp_path, made, *bindings), one_device)
    print(strategy, bindings, "largest difference / largest update", ratios)
    # Measured (2026-11-29): 3.5e-7 (G and its EMA copy), 3.2e-8 (D) for both Mirrored
    # runs, 0.0 for the split: float round-off. Sharded Adam fed doubled gradients (on
    # purpose) was 8.2e-3 off for G; the replicas without sync batch norm, below.
    assert max(ratios.values()) < 1e-4, ratios


def test_two_replicas_without_sync_batch_norm_differ_from_one_device(one_device, tmp_path):
    """The negative control of the test above: each replica's batch statistics of its own
    half of the batch are not the global batch's (measured 2026-11-29: 3.0e-3 for G)."""
    ratios = _off(_trained(tmp_path, mirrored_2(), "Pix2PixGenerator.sync_bn = False",
                           "PatchDiscriminator.sync_bn = False"), one_device)
    assert ratios["generator"] > 1e-3, ratios


def _train_binary(model_dir, *bindings):
    """bin/train.py in a process of its own: the runs that evaluate load the FID Inception,
    whose ~0.7 GB would stay in this test worker for the rest of the suite."""
    from tests.helpers.clusters import run_binary
    result = run_binary("train.py", f"--model_dir={model_dir}", f"--gin_file={TINY_PIX2PIX}",
                        *[f"--gin_bindings={b}" for b in bindings])
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


def test_a_tiny_pix2pix_run_writes_its_grid_evaluation_and_resumes(tmp_path):
    _train_binary(tmp_path, "train.total_steps = 2", "train.sample_every = 2",
                  "eval.every_steps = 2")
    # Input | output | target for 8 held-out pairs: 8 rows, 3 columns of 32 px, 2 px apart.
    grid = tf.io.decode_png(tf.io.read_file(str(tmp_path / "samples" / "step_0000002.png")))
    assert grid.shape == (8 * 34 + 2, 3 * 34 + 2, 1)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    evaluation = metrics["evaluations"][0]
    assert metrics["protocol"]["name"] == "pix2pix_train[4900:]16"
    assert evaluation["l1_identity"] > 0.05 and evaluation["l1"] > 0.0
    assert {"psnr", "ssim", "fid"} <= set(evaluation)
    assert metrics["best"]["step"] == 2
    # The input stream and the weights continue from the checkpoint.
    resumed = _train_binary(tmp_path, "train.total_steps = 4", "train.sample_every = 0")
    assert "resumed from" in resumed and "ckpt-2 at step 2" in resumed, resumed[-3000:]
    assert json.loads((tmp_path / "train_result.json").read_text())["step"] == 4


def test_a_folder_in_pix2pix_format_trains_and_is_evaluated_on_its_val_split(tmp_path):
    rng = np.random.default_rng(0)
    for split, count in (("train", 6), ("val", 3)):
        (tmp_path / "pairs" / split).mkdir(parents=True)
        for i in range(count):  # input | target, 40 x 40 each, as pix2pix's files are
            pair = rng.integers(0, 256, (40, 80, 3), dtype=np.uint8)
            tf.io.write_file(str(tmp_path / "pairs" / split / f"{i}.jpg"),
                             tf.io.encode_jpeg(pair))
    _train_binary(tmp_path / "run", "dataset.name = 'pix2pix_folder'",
                  f"dataset.data_dir = '{tmp_path / 'pairs'}'", "dataset.split = 'train'",
                  "eval.reference_split = 'auto'", "train.batch_size = 2",
                  "train.total_steps = 2", "train.sample_every = 2", "eval.every_steps = 2")
    assert json.loads((tmp_path / "run" / "train_result.json").read_text())["step"] == 2
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["protocol"]["split"] == "val" and metrics["protocol"]["pairs"] == 3
    grid = tf.io.decode_png(tf.io.read_file(str(tmp_path / "run" / "samples" /
                                                "step_0000002.png")))
    assert grid.shape[-1] == 3  # the folder's colour pairs


@pytest.mark.parametrize("binding,named", [
    ("Generator.ch = 8", "Generator.ch configures biggan"),
    ("loss.fn = @hinge", "loss.fn configures biggan"),
    ("penalties.r1_gamma = 1.0", "penalties.*"),
    ("augment.policy = 'color'", "augment.policy"),
    ("train.recompute = True", "train.recompute"),
    ("model_parallel.stages = 2", "model_parallel.stages"),
    ("strategy.kind = 'parameter_server'", "strategy.kind"),
    ("eval.num_samples = 100", "eval.num_samples"),
])
def test_what_pix2pix_does_not_take_is_refused_by_name(binding, named):
    _parse(binding)
    with pytest.raises(ConfigError, match=named.replace("*", r"\*").replace(".", r"\.")):
        experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
    gin.clear_config()


def test_pix2pix_bindings_are_refused_for_biggan(tiny_gin):
    tiny_gin("Pix2PixGenerator.ch = 8")
    with pytest.raises(ConfigError, match=r"Pix2PixGenerator\.ch configures pix2pix"):
        experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
    gin.clear_config()


@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
def test_pix2pix_trains_in_mixed_precision_with_accumulation_and_clipping(tmp_path, precision):
    """float16 starts at the loss scale 2**15, where G's first steps overflow (its loss
    carries 100 x L1): they are skipped, the scale comes down and the rest train, as
    BigGAN's (tests/train/test_step.py). float16 is emulated on this CPU; nothing here has
    run on a GPU."""
    _parse(f"layout.precision = '{precision}'", "train.accumulation = 2",
           "train.clip_norm = 2.0", "train.total_steps = 8", "train.steps_per_loop = 4",
           "train.log_every = 8", "train.checkpoint_every = 8", "train.sample_every = 0")
    exp = experiment.build()
    assert exp.family.name == "pix2pix" and exp.generator.dim_z == 0
    assert exp.generator.down[1].op_dtype == precision.split("_")[1]
    result = driver.train(exp, str(tmp_path))
    skipped = int(exp.health.skipped.numpy())
    print(precision, "skipped", skipped, {k: v for k, v in result.items() if "/" in k})
    assert result["step"] == 8 and int(exp.health.consecutive.numpy()) == 0
    assert np.isfinite(result["loss/G"]) and np.isfinite(result["loss/D"])
    if precision == "mixed_float16":  # dynamic loss scaling lowered G's scale
        assert 1 <= skipped < 8 and 1.0 <= result["health/loss_scale_G"] < 2.0 ** 15
    else:
        assert skipped == 0
    gin.clear_config()


def test_the_memory_plan_traces_pix2pix_updates_and_splits_them_by_network():
    from paragan_tf.measure import built
    _parse()
    model = built.plan_model(["float32"], progress=lambda _: None)
    memory = model.memory["float32"]
    exp = experiment.build(check_data=False)
    variables = sum(v.shape.num_elements() * 4 for m in (exp.generator, exp.discriminator)
                    for v in m.variables)
    assert memory.parameter_bytes == variables  # G's and D's weights, BN statistics included
    assert model.g_blocks == () and model.image_bytes == 4 * 32 * 32 * 1
    g, d = memory.sides["G"], memory.sides["D"]
    for update in ("d_update", "g_update"):
        one, eight = (memory.activation_bytes(update, b, False) for b in (1, 8))
        assert 0 < one < eight, (update, one, eight)  # per-example activations
        parts = [side.activation_bytes(update, 8, False) for side in (g, d)]
        assert max(parts) <= memory.activation_bytes(update, 8, False) <= sum(parts)
    gin.clear_config()


def test_the_plan_binary_plans_the_pix2pix_experiment(tmp_path):
    from tests.helpers.repo import run_binary
    result = run_binary("plan.py", "--gin_file=gin/pix2pix_fashion_mnist_edges.gin",
                        "--devices=v100x8,h100x8", f"--output={tmp_path / 'plan.json'}")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("v100x8 ") and "bound by" in lines[0], lines
    plans = json.loads((tmp_path / "plan.json").read_text())["plans"]
    assert [p["target"] for p in plans] == ["v100x8", "h100x8"]
