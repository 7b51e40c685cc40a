"""The training step (train/step.py): one step per loss, d_steps and BN mode, multi-replica and
accumulation equivalence, the simultaneous update, the NaN guard, bfloat16 at every
resolution, D's penalties and augmentation inside the step, and mixed_float16's dynamic loss
scaling."""

from __future__ import annotations

import types

import gin
import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.objective import augment
from paragan_tf.objective import losses
from paragan_tf.objective import penalties
from paragan_tf.train import experiment
from paragan_tf.train import driver
from paragan_tf import precision as precision_lib
from paragan_tf.train import sync_trainer
from paragan_tf.train import step as step_lib
from tests.helpers.paper_biggan import _tiny_step
from tests.helpers.training import mirrored_2, parse_tiny


def _weights(exp):
    return {v.name: v.numpy() for m in (exp.generator, exp.discriminator, exp.generator_ema)
            for v in m.variables}


def _one_device():
    return tf.distribute.OneDeviceStrategy("/cpu:0")


# Every loss, both d_steps values and both BN modes, each in some case (each case builds
# and traces a whole training loop; the two-replica SyncBN one costs most). A loss is a
# function of the logits alone (objective/losses.py), so it cannot interact with the
# other two: their pairs need no cases of their own. The two-replica SyncBN case is the
# run the equivalence tests below compare (SGD, hinge, d_steps 2): made once for both.
@pytest.mark.parametrize("loss,d_steps,sync_bn", [
    ("hinge", 2, True), ("non_saturating", 1, False), ("wasserstein", 2, False)])
def test_one_step_trains_every_loss_d_steps_and_bn_mode(request, tiny_gin, tmp_path, loss,
                                                        d_steps, sync_bn):
    if sync_bn:
        run = request.getfixturevalue("two_replica_step")
        assert {f"loss.fn = @{loss}", f"train.d_steps = {d_steps}",
                f"Generator.sync_bn = {sync_bn}"} <= set(run.bindings), run.bindings
        assert run.replicas == 2
    else:
        run = _one_step(tiny_gin, _one_device(), tmp_path, f"loss.fn = @{loss}",
                        f"train.d_steps = {d_steps}", f"Generator.sync_bn = {sync_bn}",
                        "train.ema_decay = 0.5")
    before, after, result = run.initial, run.after, run.result
    assert result["step"] == 1 and run.step == 1
    assert run.d_iterations == d_steps
    assert run.g_iterations == 1
    for key in ("loss/D", "loss/G", "grad_norm/D", "grad_norm/G"):
        assert np.isfinite(result[key]), key
    for name, value in after.items():
        assert np.all(np.isfinite(value)), name
    changed = [n for n in before if not np.array_equal(before[n], after[n])]
    assert any(n.startswith("generator/") for n in changed)
    assert any(n.startswith("discriminator/") for n in changed)
    assert any(n.startswith("generator_ema/") for n in changed)


def _one_step(tiny_gin, strategy, model_dir, *bindings):
    """One training step of gin/tiny.gin with `bindings` under `strategy`: the weights
    before and after it, the run's result, its step and optimizer step counters."""
    bindings = ("train.total_steps = 1", *bindings)
    tiny_gin(*bindings)
    exp = experiment.build(strategy)
    initial = _weights(exp)
    result = driver.train(exp, str(model_dir))
    gin.clear_config()
    return types.SimpleNamespace(
        bindings=bindings, replicas=strategy.num_replicas_in_sync, initial=initial,
        after=_weights(exp), result=result, step=int(exp.step.numpy()),
        d_iterations=int(exp.d_optimizer.iterations.numpy()),
        g_iterations=int(exp.g_optimizer.iterations.numpy()))


@pytest.fixture(scope="module")
def one_device_step(tmp_path_factory):
    """_train_one_step on one device, made once for the two tests that compare two replicas
    with it (with and without synchronised BN: on one device the two are the same BN)."""
    return _train_one_step(parse_tiny, _one_device(), tmp_path_factory.mktemp("one_device"))


@pytest.fixture(scope="module")
def two_replica_step(tmp_path_factory):
    """_train_one_step on two replicas with synchronised BN: the equivalence test's run and
    the two-replica SyncBN case of test_one_step_trains_every_loss_d_steps_and_bn_mode."""
    return _train_one_step(parse_tiny, mirrored_2(), tmp_path_factory.mktemp("two_replicas"))


def _train_one_step(tiny_gin, strategy, model_dir, sync_bn=True):
    # SGD: an update proportional to the gradient, so any gradient mismatch shows
    # (Adam's first step is ~lr * sign(g) and would hide a factor of two). Two D steps:
    # D's second update and G's then see D already updated, on each side alike.
    return _one_step(tiny_gin, strategy, model_dir, "loss.fn = @hinge", "train.d_steps = 2",
                     f"Generator.sync_bn = {sync_bn}", "G/optimizer.name = 'sgd'",
                     "D/optimizer.name = 'sgd'", "G/optimizer.learning_rate = 0.05",
                     "D/optimizer.learning_rate = 0.05", "dataset.shuffle_buffer = 1")


def test_two_replicas_match_one_device_after_a_step(one_device_step, two_replica_step):
    init_1, one = one_device_step.initial, one_device_step.after
    init_2, two = two_replica_step.initial, two_replica_step.after
    assert (one_device_step.replicas, two_replica_step.replicas) == (1, 2)
    assert init_1.keys() == init_2.keys()
    for name in init_1:
        np.testing.assert_array_equal(init_1[name], init_2[name], err_msg=name)
    # Per network, the largest difference against the largest update. Measured with
    # d_steps 1: 3e-5 with oneDNN on an Intel Xeon (AMX), 1.4e-6 with
    # TF_ENABLE_ONEDNN_OPTS=0 (batch-4 BN in G amplifies round-off); without synchronised
    # BN, 0.33 (the test below). With d_steps 2 on a 2-core AVX-512 VM (oneDNN on): 1.3e-6
    # for G, 1.0e-6 for D; without synchronised BN, 1.18.
    ratios = _mismatch(init_1, one, two)
    print(f"two replicas against one device, largest difference / largest update: {ratios}")
    for network, ratio in ratios.items():
        assert ratio < 1e-3, (network, ratio)


def _mismatch(initial, one, two) -> dict:
    """{network: max |two - one| / max |one - initial|} over the network's variables."""
    ratios = {}
    for network in ("generator/", "discriminator/", "generator_ema/"):
        names = [n for n in one if n.startswith(network)]
        moved = max(float(np.max(np.abs(one[n] - initial[n]))) for n in names)
        assert moved > 1e-3, network  # the step did something measurable
        ratios[network] = max(float(np.max(np.abs(two[n] - one[n]))) for n in names) / moved
    return ratios


def test_two_replicas_without_sync_bn_differ_so_the_equivalence_test_can_fail(
        tiny_gin, tmp_path, one_device_step):
    initial, one = one_device_step.initial, one_device_step.after
    run = _train_one_step(tiny_gin, mirrored_2(), tmp_path / "two", sync_bn=False)
    initial_2, two = run.initial, run.after
    assert run.replicas == 2
    for name in initial:  # the same start: the difference is the unsynchronised BN's
        np.testing.assert_array_equal(initial_2[name], initial[name], err_msg=name)
    ratio = _mismatch(initial, one, two)["generator/"]
    print(f"two replicas without synchronised BN against one device: {ratio}")
    assert ratio > 1e-2


def test_gradient_clipping_and_accumulation_run_and_bound_the_update(tiny_gin, tmp_path):
    tiny_gin("train.total_steps = 1", "train.d_steps = 1", "train.accumulation = 2",
             "train.clip_norm = 1e-3", "G/optimizer.name = 'sgd'", "D/optimizer.name = 'sgd'",
             "G/optimizer.learning_rate = 1.0", "D/optimizer.learning_rate = 1.0",
             "train.ortho_reg = 1e-4")
    exp = experiment.build(_one_device())
    before = [v.numpy() for v in exp.discriminator.trainable_variables]
    result = driver.train(exp, str(tmp_path))
    assert result["grad_norm/D"] > 1e-3  # the raw norm was above the clip ...
    delta = np.sqrt(sum(np.sum((v.numpy() - b) ** 2)
                        for v, b in zip(exp.discriminator.trainable_variables, before)))
    assert delta == pytest.approx(1e-3, rel=1e-3)  # ... so the SGD step has exactly that norm


def _converge_power_iterations(exp):
    """Many SN power iterations, so one more (accumulation does extra D/G calls) is a no-op."""
    z, labels = tf.random.normal([4, exp.generator.dim_z]), tf.zeros([4], tf.int32)

    @tf.function  # traced once: 60 eager passes cost ~8 s an experiment
    def iterate():
        fakes = exp.generator((z, labels), training=True)
        exp.discriminator((fakes, labels), training=True)

    for _ in range(60):
        iterate()

def test_accumulating_two_micro_batches_equals_two_replicas_of_one(tiny_gin, tmp_path):
    """Per-replica batch 4 on 2 replicas == 2 accumulated micro-batches of 4 on one device.

    Both see the same examples in the same groups of 4 (so G's batch statistics
    agree) and divide by the same effective global batch of 8. D's update is
    exact. G's is exact up to spectral norm: accumulation calls D once per
    micro-batch, and every training call runs one more power iteration on D's
    freshly updated kernels, so G's gradients see slightly different sigmas.
    """
    results = []
    for strategy, batch, accumulation in ((mirrored_2(), 8, 1), (_one_device(), 4, 2)):
        tiny_gin("train.total_steps = 1", "train.d_steps = 1", f"train.batch_size = {batch}",
                 f"train.accumulation = {accumulation}", "dataset.shuffle_buffer = 1",
                 "G/optimizer.name = 'sgd'", "D/optimizer.name = 'sgd'",
                 "G/optimizer.learning_rate = 1e-3", "D/optimizer.learning_rate = 1e-3")
        exp = experiment.build(strategy)
        _converge_power_iterations(exp)
        before = _weights(exp)
        driver.train(exp, str(tmp_path / str(accumulation)))
        gin.clear_config()
        results.append((before, _weights(exp)))
    (before_a, after_a), (before_b, after_b) = results
    names = [n for n in after_a if "/sn_u" not in n and "moving_" not in n
             and not n.startswith("generator_ema/")]
    for name in names:
        np.testing.assert_allclose(before_a[name], before_b[name], rtol=1e-5, atol=1e-6)
    update = {n: after_a[n] - before_a[n] for n in names}
    for network in ("discriminator/", "generator/"):
        largest = max(float(np.max(np.abs(update[n]))) for n in names if n.startswith(network))
        assert largest > 1e-4, network  # both networks really moved
    for name in names:
        tolerance = dict(rtol=1e-4, atol=1e-6) if name.startswith("discriminator/") else \
            dict(rtol=2e-2, atol=2e-5)
        np.testing.assert_allclose(after_b[name] - before_b[name], update[name], err_msg=name,
                                   **tolerance)


def _assign(exp, values):
    for model in (exp.generator, exp.discriminator):
        for v in model.variables:
            v.assign(values[v.name])


def test_simultaneous_update_takes_g_against_the_d_before_the_d_update(tiny_gin):
    """ParaGAN's asynchronous update inside a sync strategy: G_{t+1} from D_t, not D_{t+1}."""
    tiny_gin("train.d_steps = 1", "G/optimizer.name = 'sgd'", "D/optimizer.name = 'sgd'",
             "G/optimizer.learning_rate = 0.05", "D/optimizer.learning_rate = 0.05")
    exp = experiment.build(_one_device())
    _converge_power_iterations(exp)  # so the extra SN iteration of one path changes nothing
    snapshot = _weights(exp)
    real = (tf.random.uniform([8, 32, 32, 1], -1, 1, seed=1), tf.range(8) % 10)
    noise_d = (tf.random.normal([8, 16], seed=2), tf.range(8) % 10)
    noise_g = (tf.random.normal([8, 16], seed=3), (tf.range(8) + 3) % 10)

    def run(fn):
        _assign(exp, snapshot)
        exp.strategy.run(fn)
        return _weights(exp)

    def make(simultaneous):
        gan_step = step_lib.GANStep(exp.generator, exp.discriminator, exp.g_optimizer,
                                    exp.d_optimizer, exp.objective,
                                    step_lib.StepConfig(8, 1, simultaneous=simultaneous))
        return gan_step
    simultaneous = run(lambda: make(True)([real], [noise_d, noise_g]))
    sequential = run(lambda: make(False)([real], [noise_d, noise_g]))
    plain = make(False)
    g_from_snapshot = run(lambda: plain.g_update([noise_g]))
    g_names = [n for n in snapshot if n.startswith("generator/") and "moving_" not in n
               and "/sn_u" not in n]
    d_names = [n for n in snapshot if n.startswith("discriminator/") and "/sn_u" not in n]
    for name in d_names:  # D's update does not depend on the order
        np.testing.assert_allclose(simultaneous[name], sequential[name], rtol=1e-5, atol=1e-7)

    def distance(a, b):  # of the G updates a - snapshot and b - snapshot
        return float(np.sqrt(sum(np.sum((a[n] - b[n]) ** 2) for n in g_names)))
    update = distance(g_from_snapshot, snapshot)
    to_expected = distance(simultaneous, g_from_snapshot)
    sequential_off = distance(sequential, g_from_snapshot)
    # G's update is the one against the snapshot's D, up to the extra spectral-norm power
    # iteration the D step runs first; the sequential G (against the updated D) is far off.
    print(f"G update {update:.3g}, simultaneous off by {to_expected:.3g}, sequential off by "
          f"{sequential_off:.3g}")
    assert update > 1e-3
    assert to_expected < 0.01 * update, (to_expected, update)
    assert sequential_off > 20 * to_expected, (sequential_off, to_expected)


@pytest.mark.parametrize("two_replicas", [False, True])
def test_nan_in_a_real_batch_skips_the_update_of_both_networks(tiny_gin, two_replicas):
    tiny_gin("train.d_steps = 1")
    exp = experiment.build(mirrored_2() if two_replicas else _one_device())
    gan_step = step_lib.for_experiment(exp)
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


# 32 px: the architecture without attention; 128 px: the smallest with attention in both
# networks (D's first block halves 64 px before its attention). Larger sizes only add the
# same blocks: families/test_biggan_networks.py checks every size's shapes, and
# e2e/test_binaries.py trains the 1024 px config.
@pytest.mark.parametrize("resolution", [32, 128])
def test_bfloat16_step_at_every_architecture(policy, resolution):
    """Shared embedding, hierarchical z and attention under mixed_bfloat16 (this crashed)."""
    policy("mixed_bfloat16")
    g, d, step = _tiny_step(resolution)
    assert g.blocks[0].conv1.op_dtype == "bfloat16"
    z = tf.random.normal([2, g.dim_z])
    labels = tf.constant([0, 3])
    images = tf.random.uniform([2, resolution, resolution, 3], -1.0, 1.0)
    before = [v.numpy() for v in g.trainable_variables[:3]]
    metrics = tf.function(lambda: step([(images, labels)], [(z, labels), (z, labels)]))()
    for key in ("loss/D", "loss/G", "grad_norm/D", "grad_norm/G"):
        assert np.isfinite(float(metrics[key])), key
    assert float(metrics["health/skipped"]) == 0.0
    assert any(not np.array_equal(b, v.numpy()) for b, v in zip(before, g.trainable_variables))
    variables = g.variables + d.variables + step.g_optimizer.variables() + \
        step.d_optimizer.variables()
    assert {v.dtype for v in variables if v.dtype != tf.int64} == {tf.float32}



# --- in the step: each setting changes D's gradient; all of them train under two replicas ---

def _gradients(exp, penalties, augment=None, loss=None):
    """D's gradient for one fixed batch under `exp`'s step with BigGAN's objective of
    `penalties`, `augment` and the loss pair `loss` (default: the run's)."""
    from paragan_tf import precision as precision_lib
    from paragan_tf.families.biggan import objective as objective_lib
    from paragan_tf.objective import d_terms as d_terms_lib
    step = step_lib.for_experiment(exp)
    cfg = exp.settings.train
    d_terms = d_terms_lib.DTerms(exp.discriminator, penalties,
                                 precision_lib.Precision(exp.d_optimizer), exp.d_optimizer,
                                 cfg.batch_size * cfg.accumulation, augment, exp.lecam_state)
    objective = objective_lib.ClassConditional(loss or exp.objective.loss, augment, d_terms)
    step = type(step)(exp.generator, exp.discriminator, exp.g_optimizer, exp.d_optimizer,
                      objective, step.config)
    rng = np.random.default_rng(0)
    real = (tf.constant(rng.uniform(-1, 1, (8, 32, 32, 1)), tf.float32),
            tf.constant(rng.integers(0, 10, 8), tf.int32))
    noise = (tf.constant(rng.normal(size=(8, exp.generator.dim_z)), tf.float32),
             tf.constant(rng.integers(0, 10, 8), tf.int32))
    _, grads, _, _, _ = exp.strategy.run(lambda: step.d_gradients([real], [noise]))
    return np.concatenate([tf.reshape(g, [-1]).numpy() for g in grads])


def test_each_setting_changes_ds_gradient_and_off_changes_nothing(tiny_gin):
    from paragan_tf.train import experiment
    tiny_gin("penalties.lecam_weight = 0.0")
    exp = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
    exp.lecam_state = tf.Variable([0.5, -0.5])  # averages the LeCam term pulls toward
    off = penalties.Penalties()
    baseline = _gradients(exp, penalties=off)
    # Each D pass also moves the spectral-norm power iteration a little: the floor.
    floor = np.max(np.abs(_gradients(exp, penalties=off) - baseline))
    assert floor < 1e-4
    variants = {
        "augment": dict(penalties=off,
                        augment=augment.DiffAugment(["color", "translation", "cutout"])),
        "r1": dict(penalties=penalties.Penalties(r1_gamma=10.0)),
        "r2": dict(penalties=penalties.Penalties(r2_gamma=10.0)),
        "lecam": dict(penalties=penalties.Penalties(lecam_weight=10.0)),
        "bcr": dict(penalties=penalties.Penalties(bcr_real=10.0, bcr_fake=10.0)),
        "relativistic": dict(loss=losses.LossPair(losses.relativistic, pairs_real=True),
                             penalties=off),
    }
    for name, changes in variants.items():
        change = np.max(np.abs(_gradients(exp, **changes) - baseline))
        assert change > 100 * floor + 1e-4, (name, change, floor)


def test_every_setting_at_once_trains_two_replicas_and_lecam_follows_the_logits(tiny_gin,
                                                                                 tmp_path):
    from paragan_tf.train import checkpoints
    from paragan_tf.train import experiment
    from paragan_tf.train import driver
    everything = ("augment.policy = 'color,translation,cutout'", "loss.fn = @relativistic",
                  "penalties.r1_gamma = 1.0", "penalties.r2_gamma = 1.0",
                  "penalties.lazy_interval = 2", "penalties.bcr_real = 10.0",
                  "penalties.bcr_fake = 10.0", "penalties.lecam_weight = 0.3")
    # decay 0 and one D update per step: the averages are that update's mean logits,
    # which the trainer also reports, through its own all-reduce.
    tiny_gin(*everything, "penalties.lecam_decay = 0.0", "train.d_steps = 1",
             "train.total_steps = 1")
    exp = experiment.build(mirrored_2())
    result = driver.train(exp, str(tmp_path))
    for key in ("loss/D", "loss/G", "grad_norm/D", "grad_norm/G"):
        assert np.isfinite(result[key]), key
    np.testing.assert_allclose(exp.lecam_state.numpy(),
                               [result["logits/real"], result["logits/fake"]], rtol=1e-4)
    gin.clear_config()
    tiny_gin(*everything, "train.seed = 5")
    fresh = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
    checkpoints.Checkpointer(str(tmp_path), 3, **fresh.trackables()).restore_latest()
    np.testing.assert_array_equal(fresh.lecam_state.numpy(), exp.lecam_state.numpy())


def test_lazy_r1_under_bfloat16_stays_finite(tiny_gin, tmp_path):
    from paragan_tf.train import experiment
    from paragan_tf.train import driver
    tiny_gin("layout.precision = 'mixed_bfloat16'", "penalties.r1_gamma = 10.0",
             "penalties.r2_gamma = 10.0", "penalties.lazy_interval = 2",
             "augment.policy = 'color,translation,cutout'", "train.total_steps = 2")
    exp = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
    result = driver.train(exp, str(tmp_path))
    assert exp.layout.precision == "mixed_bfloat16"
    for key in ("loss/D", "loss/G", "grad_norm/D", "grad_norm/G"):
        assert np.isfinite(result[key]), key
    assert int(exp.health.skipped.numpy()) == 0


# --- mixed_float16: dynamic loss scaling (train/step.py, paragan_tf/precision.py) ---
# float16 is emulated on this CPU: slow, not wrong. Nothing here has run on a GPU.

def _float16(tiny_gin, strategy, *bindings):
    tiny_gin("layout.precision = 'mixed_float16'", "train.d_steps = 1", *bindings)
    exp = experiment.build(strategy)
    assert exp.layout.precision == "mixed_float16"
    assert exp.discriminator.blocks[0].conv1.op_dtype == "float16"
    return exp


def _set_scale(optimizer, value: float) -> None:
    precision_lib.Precision(optimizer).set_scale(value)


def _trainer_steps(exp):
    """run(n): n steps of `exp`'s synchronous training loop (train/sync_trainer.py), its NaN guard
    counters included, on the run's own input streams."""
    loop_fn = sync_trainer.make_loop_fn(exp, step_lib.for_experiment(exp))
    real_it, noise_it = sync_trainer.real_batches(exp, 1), sync_trainer.noise_batches(exp, 2)
    return lambda n=1: loop_fn(real_it, noise_it, tf.constant(n, tf.int64))


def test_float16_trains_through_the_trainer_and_checkpoints_its_loss_scales(tiny_gin, policy,
                                                                            tmp_path):
    """(a) A few steps from the default scale 2**15: the first ones overflow and are skipped
    (counted), the scales come down, the rest train; with train.max_consecutive_skips = 1
    the run would stop at the first skip if those counted as divergence."""
    from paragan_tf.train import checkpoints
    exp = _float16(tiny_gin, _one_device(), "penalties.r1_gamma = 1.0",
                   "penalties.lazy_interval = 2", "train.total_steps = 8",
                   "train.max_consecutive_skips = 1", "train.sample_every = 8")
    result = driver.train(exp, str(tmp_path))
    skipped = int(exp.health.skipped.numpy())
    scales = {n: result[f"health/loss_scale_{n}"] for n in "GD"}
    print(f"float16 run: {skipped} of 8 steps skipped, scales {scales}, losses "
          f"D {result['loss/D']:.4g} G {result['loss/G']:.4g}")
    assert result["step"] == 8
    assert 1 <= skipped < 8 and int(exp.health.consecutive.numpy()) == 0
    for key in ("loss/D", "loss/G", "grad_norm/D", "grad_norm/G"):
        assert np.isfinite(result[key]), key
    for name, scale in scales.items():
        assert scale == float(getattr(exp, f"{name.lower()}_optimizer").loss_scale)
        assert 1.0 <= scale < 2.0 ** 15 and np.log2(scale) == int(np.log2(scale)), (name, scale)
    variables = (exp.generator.variables + exp.discriminator.variables +
                 exp.generator_ema.variables + exp.g_optimizer.variables() +
                 exp.d_optimizer.variables())
    assert {v.dtype for v in variables if v.dtype != tf.int64} == {tf.float32}
    assert int(exp.d_optimizer.iterations.numpy()) == 8 - skipped  # skips do not count
    for values in _weights(exp).values():
        assert np.all(np.isfinite(values))
    # The checkpoint (the final one, step 8) carries each scale and its counter.
    saved = [(float(o.loss_scale), int(o.dynamic_counter.numpy()))
             for o in (exp.g_optimizer, exp.d_optimizer)]
    for optimizer in (exp.g_optimizer, exp.d_optimizer):
        _set_scale(optimizer, 3.0)
        optimizer.dynamic_counter.assign(99)
    checkpoints.Checkpointer(str(tmp_path), 3, **exp.trackables()).restore_latest()
    assert [(float(o.loss_scale), int(o.dynamic_counter.numpy()))
            for o in (exp.g_optimizer, exp.d_optimizer)] == saved


@pytest.mark.parametrize("two_replicas", [False, True])
def test_float16_overflow_skips_the_update_halves_the_scale_and_counts_a_skip(
        tiny_gin, policy, two_replicas):
    """(b) An overflow injected through the scale (2**100: every float16 gradient is
    inf) is skipped as the NaN guard skips (weights, optimizer steps and forward state
    unchanged, `health/skipped_steps` + 1), halves that network's scale only, and does
    not add to the consecutive skips; at the least scale (1) a non-finite step does."""
    exp = _float16(tiny_gin, mirrored_2() if two_replicas else _one_device())
    run = _trainer_steps(exp)
    for optimizer in (exp.g_optimizer, exp.d_optimizer):
        _set_scale(optimizer, 16.0)
    before = _weights(exp)
    _set_scale(exp.d_optimizer, 2.0 ** 100)
    run()
    assert float(exp.d_optimizer.loss_scale) == 2.0 ** 99
    assert float(exp.g_optimizer.loss_scale) == 16.0  # G's gradients were finite
    assert int(exp.health.skipped.numpy()) == 1 and int(exp.health.consecutive.numpy()) == 0
    assert int(exp.d_optimizer.iterations.numpy()) == 0
    assert int(exp.g_optimizer.iterations.numpy()) == 0
    after = _weights(exp)
    for name in before:
        if not name.startswith("generator_ema/"):  # the EMA follows G, unchanged too
            np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    # At the least scale a non-finite step is divergence: D's output bias NaN.
    _set_scale(exp.d_optimizer, 1.0)
    bias = next(v for v in exp.discriminator.trainable_variables if "linear/bias" in v.name)
    saved_bias = bias.numpy()
    bias.assign(np.full_like(saved_bias, np.nan))
    run()
    bias.assign(saved_bias)
    assert float(exp.d_optimizer.loss_scale) == 1.0
    assert int(exp.health.skipped.numpy()) == 2 and int(exp.health.consecutive.numpy()) == 1
    # A scale that fits: the same loop trains (so the checks above can fail).
    _set_scale(exp.d_optimizer, 16.0)
    run()
    assert int(exp.health.skipped.numpy()) == 2 and int(exp.health.consecutive.numpy()) == 0
    assert int(exp.d_optimizer.iterations.numpy()) == 1
    trained = _weights(exp)
    for network in ("generator/", "discriminator/"):
        assert any(not np.array_equal(trained[n], before[n]) for n in before
                   if n.startswith(network) and "kernel" in n), network


def test_float16_scale_doubles_after_growth_steps_finite_updates(tiny_gin, policy):
    """(c) tf_keras' growth rule: doubled after `loss_scale_growth_steps` finite updates
    in a row (2 here; 2000 by default), the counter then starting again."""
    exp = _float16(tiny_gin, _one_device(), "optimizer.initial_loss_scale = 4.0",
                   "optimizer.loss_scale_growth_steps = 2")
    assert exp.d_optimizer.dynamic_growth_steps == 2 == exp.g_optimizer.dynamic_growth_steps
    run = _trainer_steps(exp)
    seen = []
    for _ in range(4):
        run()
        seen.append([(float(o.loss_scale), int(o.dynamic_counter.numpy()))
                     for o in (exp.g_optimizer, exp.d_optimizer)])
    assert int(exp.health.skipped.numpy()) == 0
    assert seen == [[(4.0, 1)] * 2, [(8.0, 0)] * 2, [(8.0, 1)] * 2, [(16.0, 0)] * 2], seen


def test_float16_gradients_and_r1_match_float32_on_the_same_weights(tiny_gin, policy):
    """(d) On the same G and D: D's and G's gradients as the step takes them (scaled,
    unscaled) and R1 + R2 with their gradient with respect to D's weights (the second
    backward pass), under mixed_float16 at several loss scales, against float32."""
    def step_of(precision):
        gin.clear_config()
        tiny_gin(f"layout.precision = '{precision}'", "train.d_steps = 1",
                 "penalties.r1_gamma = 1.0", "penalties.r2_gamma = 1.0")
        exp = experiment.build(_one_device())
        return exp, step_lib.for_experiment(exp)
    exp32, step32 = step_of("float32")
    exp16, step16 = step_of("mixed_float16")
    rng = np.random.default_rng(0)
    images = tf.constant(rng.uniform(-1, 1, (16, 32, 32, 1)), tf.float32)
    labels = tf.constant(rng.integers(0, 10, 16), tf.int32)
    noise = (tf.constant(rng.normal(size=(8, 16)), tf.float32), labels[8:])

    def flat(grads):
        return np.concatenate([tf.reshape(g, [-1]).numpy() for g in grads])

    def penalty(exp, gan_step):  # as d_micro takes it: scaled, then unscaled
        variables = exp.discriminator.trainable_variables
        with tf.GradientTape() as tape:
            value = tf.reduce_mean(gan_step.objective.d_terms.gradient_penalties(images, labels))
            scaled = gan_step.d_precision.scale(value)
        grads = tape.gradient(scaled, variables,
                              unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return float(value), flat(gan_step.d_precision.unscale(grads))

    def losses(exp, gan_step):  # D's and G's updates' gradients (the penalties in D's)
        d_grads = exp.strategy.run(lambda: gan_step.d_gradients([(images[:8], labels[:8])],
                                                                [noise]))[1]
        return flat(d_grads), flat(exp.strategy.run(lambda: gan_step.g_gradients([noise]))[1])

    def close(name, scale, a16, a32):
        cosine = a16 @ a32 / np.linalg.norm(a16) / np.linalg.norm(a32)
        print(f"scale {scale:g}, {name}: cosine {cosine:.7f}, norm {np.linalg.norm(a16):.5g} "
              f"vs {np.linalg.norm(a32):.5g} in float32")
        assert cosine > 0.995, (name, scale)  # measured: 0.99901 for G, 0.99999 for D
        np.testing.assert_allclose(np.linalg.norm(a16), np.linalg.norm(a32), rtol=1e-2)

    def same_weights():  # the forward passes move the power iteration and BN statistics
        for network in ("generator", "discriminator"):
            for source, target in zip(getattr(exp32, network).variables,
                                      getattr(exp16, network).variables):
                target.assign(source)
    same_weights()
    value32, grads32 = penalty(exp32, step32)
    assert value32 > 0.1 and np.linalg.norm(grads32) > 1.0
    for scale in (1.0, 2.0 ** 8, 2.0 ** 15):
        _set_scale(exp16.d_optimizer, scale)
        value16, grads16 = penalty(exp16, step16)
        print(f"scale {scale:g}: R1 + R2 {value16:.6g} vs {value32:.6g} in float32")
        assert value16 == pytest.approx(value32, rel=1e-2), scale
        close("R1 + R2's gradient", scale, grads16, grads32)
    reference = losses(exp32, step32)
    for scale in (1.0, 2.0 ** 8):  # (2**15 overflows D's gradient here: a skipped update)
        same_weights()
        for optimizer in (exp16.g_optimizer, exp16.d_optimizer):
            _set_scale(optimizer, scale)
        for name, a16, a32 in zip(("D", "G"), losses(exp16, step16), reference):
            close(f"{name}'s gradient", scale, a16, a32)


def test_average_over_global_batch_makes_replica_sums_equal_the_global_mean():
    per_example = tf.constant([1.0, 2.0, 3.0, 6.0])
    strategy = mirrored_2()
    halves = strategy.experimental_distribute_values_from_function(
        lambda ctx: per_example[2 * ctx.replica_id_in_sync_group:
                                2 * ctx.replica_id_in_sync_group + 2])
    per_replica = strategy.run(lambda x: step_lib.average_over_global_batch(x, 4), args=(halves,))
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
    assert float(total) == pytest.approx(3.0)  # mean of all four
    # A local mean per replica, summed, double-counts: the bug this helper prevents.
    naive = strategy.reduce(tf.distribute.ReduceOp.SUM,
                            strategy.run(tf.reduce_mean, args=(halves,)), axis=None)
    assert float(naive) == pytest.approx(6.0)
