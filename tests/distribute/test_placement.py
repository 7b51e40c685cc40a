"""G and D on two devices within a replica (distribute/mode.py, train/step.py): every
variable and op on its network's device, the split training run equal to the unsplit one with
every step feature on (and its checkpoint and evaluation too), the NaN guard, and what is
refused by name; pipeline stages (distribute/staging.py): the balance, each block's forward and
backward on its stage's device, the staged run equal to the unstaged one."""

from __future__ import annotations

import re

import gin
import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.distribute import model_parallel
from paragan_tf.distribute import staging
from paragan_tf.errors import ConfigError
from paragan_tf.eval import evaluator as evaluator_lib
from paragan_tf.measure import built
from paragan_tf.train import driver
from paragan_tf.train import experiment
from paragan_tf.train import step as step_lib
from tests.helpers.training import mirrored_2, parse_tiny

G_DEVICE, D_DEVICE = 0, 1  # the logical CPUs conftest.py makes
# Every step feature that touches placement: two D steps, two accumulated micro-batches,
# EMA from the first step, R1 and LeCam on D, the orthogonal regulariser on G, clipping.
# SGD: an update proportional to the gradient, so a gradient mismatch shows as one (Adam's
# first steps are ~lr * sign(g): a round-off in a near-zero gradient flips a whole step).
FEATURES = ("train.d_steps = 2", "train.accumulation = 2", "train.ema_decay = 0.5",
            "penalties.r1_gamma = 1.0", "penalties.lecam_weight = 0.1",
            "train.ortho_reg = 1e-4", "train.clip_norm = 10.0", "dataset.shuffle_buffer = 1",
            "G/optimizer.name = 'sgd'", "D/optimizer.name = 'sgd'",
            "G/optimizer.learning_rate = 0.05", "D/optimizer.learning_rate = 0.05")


def _one_device():
    return tf.distribute.OneDeviceStrategy("/cpu:0")


def _weights(exp):
    return {v.name: v.numpy() for m in (exp.generator, exp.discriminator, exp.generator_ema)
            for v in m.variables}


def _index(device: str) -> int:
    return tf.DeviceSpec.from_string(device).device_index


def _split(tiny_gin, *bindings):
    tiny_gin("model_parallel.placement = 'split'", *bindings)
    return experiment.build(_one_device())


def test_every_variable_lives_on_its_networks_device(tiny_gin):
    exp = _split(tiny_gin)
    assert exp.mode.spread
    g_side = (exp.generator.variables + exp.generator_ema.variables +
              exp.g_optimizer.variables())
    d_side = exp.discriminator.variables + exp.d_optimizer.variables()
    # The optimizers' scalar counters are made with the optimizer, on the replica's device.
    assert {_index(v.device) for v in g_side if v.shape.rank} == {G_DEVICE}
    assert {_index(v.device) for v in d_side if v.shape.rank} == {D_DEVICE}
    assert len([v for v in exp.d_optimizer.variables() if v.shape.rank]) == \
        2 * len(exp.discriminator.trainable_variables)  # Adam's two slots per weight


def test_every_op_of_the_step_runs_on_its_networks_device(tiny_gin):
    """D's backward in G's update included: one tape over both networks, or D's tape
    differentiated outside D's scope, leaves those ops without a device (they land on the
    first one); this fails then."""
    exp = _split(tiny_gin, "train.d_steps = 1", "penalties.r1_gamma = 1.0")
    gan_step = step_lib.for_experiment(exp)
    real = [(tf.zeros([8, 32, 32, 1]), tf.zeros([8], tf.int32))]
    noise = [(tf.zeros([8, 16]), tf.zeros([8], tf.int32))] * 2
    graph = tf.function(lambda r, n: exp.strategy.run(gan_step, args=(r, n)),
                        autograph=False).get_concrete_function(real, noise).graph
    devices = {"generator": set(), "discriminator": set()}
    for op in graph.get_operations():
        if op.type in ("ReadVariableOp", "Placeholder"):
            continue  # a read runs where its variable lives; a capture is an input
        for network, found in devices.items():
            # A model's n-th call in a graph is named network_n.
            if re.match(rf"(gradient_tape/)?{network}(_\d+)?/", op.name):
                found.add(_index(op.device) if op.device else None)
    backward = [op for op in graph.get_operations()
                if re.match(r"gradient_tape/discriminator(_\d+)?/", op.name)]
    assert len(backward) > 100  # D's backward (its update's, R1's and G's update's) is here
    assert devices == {"generator": {G_DEVICE}, "discriminator": {D_DEVICE}}, devices


def _train(tiny_gin, model_dir, placement: str, *bindings):
    tiny_gin(f"model_parallel.placement = '{placement}'", "train.total_steps = 2",
             "train.checkpoint_every = 2", *FEATURES, *bindings)
    exp = experiment.build(_one_device())
    before = _weights(exp)
    result = driver.train(exp, str(model_dir))
    return exp, before, result


def _evaluation(classifier: str) -> tuple:
    return (f"eval.classifier_path = '{classifier}'", "eval.num_samples = 120",
            "eval.num_real = 120", "eval.batch_size = 60")


def _trained_and_evaluated(tiny_gin, model_dir, placement: str, *bindings):
    """(weights before, after, the evaluation at step 2) of _train's run. The weights are
    taken before evaluating: sampling runs the EMA generator's power iterations."""
    exp, before, result = _train(tiny_gin, model_dir, placement, *bindings)
    assert np.isfinite(result["loss/G"]) and result["step"] == 2
    after = _weights(exp)
    evaluation = evaluator_lib.Evaluator(experiment.eval_subject(exp),
                                         str(model_dir / "eval")).evaluate(2)
    return before, after, evaluation


@pytest.fixture(scope="module")
def replica_run(mnist_classifier, tmp_path_factory):
    """The reference both equality tests compare with, trained once: 2 steps of every
    feature on one device, unsplit and unstaged."""
    run = _trained_and_evaluated(parse_tiny, tmp_path_factory.mktemp("replica"), "replica",
                                 *_evaluation(mnist_classifier[0]))
    gin.clear_config()
    return run


def test_split_training_equals_one_device_and_its_checkpoint_and_evaluation_too(
        tiny_gin, tmp_path, mnist_classifier, replica_run):
    init_1, one, evaluated_1 = replica_run
    init_2, split, evaluated_2 = _trained_and_evaluated(
        tiny_gin, tmp_path / "split", "split", *_evaluation(mnist_classifier[0]))
    moved, off = {}, {}
    for name in one:
        np.testing.assert_array_equal(init_2[name], init_1[name], err_msg=name)
        network = name.split("/")[0]
        moved[network] = max(moved.get(network, 0.0),
                             float(np.max(np.abs(one[name] - init_1[name]))))
        off[network] = max(off.get(network, 0.0), float(np.max(np.abs(split[name] - one[name]))))
    assert min(moved.values()) > 1e-3, moved  # G, D and EMA G all really moved
    # Per network, the largest difference against the largest update. Measured: 1.9e-7 (G),
    # 3.2e-7 (D), 2.2e-7 (EMA G): float round-off. A split whose G backward dropped D's
    # image gradients (G's gradients of the images' sum instead) was 0.066 off for G.
    for network in moved:
        assert off[network] < 1e-5 * moved[network], (network, off[network], moved[network])
    for key, value in evaluated_1.items():
        assert evaluated_2[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    # The split run's checkpoint restores into an unsplit build: the same weights.
    restored, _ = experiment.restore(str(tmp_path / "split"),
                                     gin_bindings=["model_parallel.placement = 'replica'"])
    assert not restored.mode.spread
    for name, value in _weights(restored).items():
        np.testing.assert_array_equal(value, split[name], err_msg=name)


def test_a_nan_in_a_split_step_skips_both_updates_and_restores_both_devices_state(tiny_gin):
    exp = _split(tiny_gin, "train.d_steps = 1")
    gan_step = step_lib.for_experiment(exp)
    noise = [(tf.random.normal([8, 16], seed=i), tf.range(8) % 10) for i in range(2)]
    images = tf.random.uniform([8, 32, 32, 1], -1, 1, seed=1)
    poisoned = tf.tensor_scatter_nd_update(images, [[0, 3, 3, 0]], [float("nan")])
    run = tf.function(lambda r, n: exp.strategy.run(gan_step, args=(r, n)), autograph=False)
    before = _weights(exp)  # SN vectors and BN statistics included: the guard puts them back
    out = run([(poisoned, tf.range(8) % 10)], noise)
    assert float(out["health/skipped"]) == 1.0
    for name, value in _weights(exp).items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)
    out = run([(images, tf.range(8) % 10)], noise)  # clean: both move (the check can fail)
    assert float(out["health/skipped"]) == 0.0
    after = _weights(exp)
    for network in ("generator/", "discriminator/"):
        assert any(not np.array_equal(after[n], before[n]) for n in after
                   if n.startswith(network)), network


def test_what_a_split_cannot_run_under_is_refused_by_name(tiny_gin):
    tiny_gin("model_parallel.placement = 'split'")
    with pytest.raises(ConfigError, match="placement='split' is available under strategy.kind "
                                          "in .* only, not 'mirrored'"):
        experiment.build(mirrored_2())
    for kind in ("mirrored", "parameter_server", "tpu"):
        with pytest.raises(ConfigError, match=f"only, not {kind!r}"):
            model_parallel.prepare_devices(model_parallel.ModelParallelConfig(placement="split"),
                                          kind)
    gin.clear_config()
    tiny_gin("model_parallel.placement = 'split'", "layout.xla = 'on'")
    with pytest.raises(ConfigError, match="layout.xla='on' cannot be used here: "
                                          "model_parallel.placement='split'"):
        experiment.build(_one_device())
    with pytest.raises(ConfigError, match="model_parallel.placement='pipe' is unknown"):
        model_parallel.ModelParallelConfig(placement="pipe")


def test_balance_gives_contiguous_stages_with_the_smallest_largest_cost():
    assert staging.balance([1, 1, 1, 1], 2) == [0, 0, 1, 1]
    assert staging.balance([10, 1, 1, 1], 2) == [0, 1, 1, 1]
    assert staging.balance([1, 2, 3, 4, 5], 3) == [0, 0, 0, 1, 2]  # 6 / 4 / 5
    assert staging.balance([3], 1) == [0]
    with pytest.raises(ValueError):
        staging.balance([1, 1], 3)


def test_pipeline_stages_place_each_block_and_its_backward_on_its_device_and_equal_one(
        tiny_gin, tmp_path, mnist_classifier, replica_run):
    """Two stages per network on the two logical CPUs: block by block, forward and
    backward ops on the block's stage; the run equals the unstaged one."""
    tiny_gin("model_parallel.stages = 2", *FEATURES)
    exp = experiment.build(_one_device())
    for model in (exp.generator, exp.generator_ema, exp.discriminator):
        stages = [_index(d) for d in model.block_devices]
        assert stages == sorted(stages) and set(stages) == {0, 1}, (model.name, stages)
        for block, device in zip(model.blocks, model.block_devices):
            assert {_index(v.device) for v in block.variables} == {_index(device)}
    gan_step = step_lib.for_experiment(exp)
    real = [(tf.zeros([8, 32, 32, 1]), tf.zeros([8], tf.int32))] * 4
    noise = [(tf.zeros([8, 16]), tf.zeros([8], tf.int32))] * 6
    graph = tf.function(lambda r, n: exp.strategy.run(gan_step, args=(r, n)),
                        autograph=False).get_concrete_function(real, noise).graph
    # Forward and backward ops alike (the backward's names hold the forward's scope
    # somewhere): each block's on its stage, G's output layers on its last.
    ops = [op for op in graph.get_operations() if op.type not in ("ReadVariableOp",
                                                                   "Placeholder")]
    for network, model in (("generator", exp.generator), ("discriminator", exp.discriminator)):
        parts = [(f"block{i}/", device) for i, device in enumerate(model.block_devices)]
        if network == "generator":
            parts.append(("out_(conv|bn)/", model.block_devices[-1]))
        for scope, device in parts:
            found = {_index(op.device) for op in ops
                     if re.search(rf"{network}(_\d+)?/{scope}", op.name)}
            assert found == {_index(device)}, (network, scope, found)
    # Accumulation's running sums of the gradients (train.accumulation = 2) stay beside
    # their gradients: an add of two tensors made on one device runs there.
    adds = [op for op in ops if op.type == "AddV2" and op.inputs[0].op.device and
            {_index(t.op.device) for t in op.inputs} == {_index(op.inputs[0].op.device)}]
    assert len(adds) > 20 and all(_index(op.device or "/device:CPU:0") == _index(
        op.inputs[0].op.device) for op in adds), [op.name for op in adds if _index(
            op.device or "/device:CPU:0") != _index(op.inputs[0].op.device)][:5]
    # The memory plan traces each side as the unstaged step runs it; its stages share it.
    staged = built.memory_of(exp)
    gin.clear_config()
    tiny_gin(*FEATURES)
    unstaged = built.memory_of(experiment.build(_one_device()))
    for side in ("G", "D"):
        for update in ("d_update", "g_update"):
            assert staged.sides[side].activation_bytes(update, 8, False) == \
                unstaged.sides[side].activation_bytes(update, 8, False), (side, update)
    gin.clear_config()
    # Against the reference run (one stage), trained once for this file, with its bindings.
    exp, before, _ = _train(tiny_gin, tmp_path / "2", "replica", "model_parallel.stages = 2",
                            *_evaluation(mnist_classifier[0]))
    (init_1, one, _), init_2, two = replica_run, before, _weights(exp)
    for name in one:
        np.testing.assert_array_equal(init_2[name], init_1[name], err_msg=name)
        network = name.split("/")[0]
        moved = max(float(np.max(np.abs(one[n] - init_1[n]))) for n in one
                    if n.startswith(network + "/"))
        assert float(np.max(np.abs(two[name] - one[name]))) < 1e-5 * moved, name
