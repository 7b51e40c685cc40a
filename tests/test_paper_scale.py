"""Paper-scale BigGAN: reference counts, every resolution under bf16, recompute, reference numerics.

The parameter counts are BigGAN-PyTorch's (commit 98459431), counted by
instantiating its BigGAN.py with torch 2.13 on CPU: G_ch = D_ch = 96,
dim_z = 120 (the reference truncates to a multiple of the chunk count: 119 at
256 px), shared_dim = 128, hierarchical z, attention at 64, 1000 classes. The
reference has no 512 or 1024 px discriminator and no 1024 px generator; those
counts are our own tables' (biggan.py says how they are derived).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from paragan_tf.objective import losses
from paragan_tf.scale import memory
from paragan_tf.objective import regularizers
from paragan_tf.errors import ConfigError
from paragan_tf.models import biggan
from paragan_tf.models import layers
from paragan_tf.train import step as step_lib

# resolution -> (dim_z, G params, D params); None: no reference table.
REFERENCE_COUNTS = {
    32: (120, 9_466_115, 9_836_929),
    64: (120, 70_239_108, 45_500_449),
    128: (120, 70_433_988, 87_982_370),  # the paper: 70.4M / 88.0M
    256: (119, 82_108_548, 99_225_890),
    512: (120, 82_253_988, None),
}
OUR_COUNTS = {512: (120, 82_253_988, 99_401_282), 1024: (117, 82_397_892, 99_576_674)}


@pytest.fixture
def policy():
    """Sets a global Keras precision policy for one test and restores float32 after it."""
    yield keras.mixed_precision.set_global_policy
    keras.mixed_precision.set_global_policy("float32")


def _paper_models(resolution: int, ch_g: int = 96, ch_d: int = 96, classes: int = 1000,
                  dim_z: int = 120, **kwargs):
    g = biggan.Generator(resolution=resolution, num_classes=classes, ch=ch_g, dim_z=dim_z,
                         shared_dim=128 if ch_g == 96 else 8, hierarchical_z=True,
                         attention_resolutions=(64,), **kwargs)
    d = biggan.Discriminator(resolution=resolution, num_classes=classes, ch=ch_d,
                             attention_resolutions=(64,), init=kwargs.get("init", "ortho"),
                             recompute=kwargs.get("recompute", False))
    biggan.build(g, d, 3)
    return g, d


@pytest.mark.parametrize("resolution", [32, 64, 128, 256, 512, 1024])
def test_parameter_counts_match_the_reference(resolution):
    dim_z, g_count, d_count = OUR_COUNTS.get(resolution, REFERENCE_COUNTS.get(resolution))
    # N02 initialises much faster than orthogonal (QR of 13824 x 1536 kernels); counts
    # do not depend on the initialiser.
    g, d = _paper_models(resolution, dim_z=dim_z, init="N02")
    assert biggan.count_trainable(g) == g_count
    assert biggan.count_trainable(d) == d_count


def _tiny_step(resolution: int, accumulation: int = 1, ortho_reg: float = 1e-4,
               recompute: bool = False):
    slots = len(biggan.G_ARCH[resolution][0]) + 1
    keras.utils.set_random_seed(0)
    g, d = _paper_models(resolution, ch_g=4, ch_d=8, classes=5, dim_z=4 * slots,
                         recompute=recompute)
    g_opt, d_opt = keras.optimizers.Adam(1e-4), keras.optimizers.Adam(1e-4)
    g_opt.build(g.trainable_variables)  # as the trainer does: no retrace to create slots
    d_opt.build(d.trainable_variables)
    step = step_lib.GANStep(g, d, g_opt, d_opt, losses.hinge,
                            step_lib.StepConfig(2, 1, accumulation, ortho_reg=ortho_reg))
    return g, d, step


@pytest.mark.parametrize("resolution", [32, 64, 128, 256, 512, 1024])
def test_bfloat16_step_at_every_resolution(policy, resolution):
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


def test_class_interpolation_under_bfloat16(policy):
    policy("mixed_bfloat16")
    g, _ = _paper_models(64, ch_g=4, ch_d=8, classes=5, dim_z=20)
    z = tf.random.normal([1, 20])
    mix = tf.constant([[0.25, 0.0, 0.75, 0.0, 0.0]])
    mixed = g((z, mix)).numpy()
    pure = [g((z, tf.constant([c]))).numpy() for c in (0, 2)]
    one_hot = g((z, tf.one_hot([2], 5))).numpy()
    assert np.all(np.isfinite(mixed)) and mixed.dtype == np.float32
    np.testing.assert_allclose(one_hot, pure[1], atol=2e-2)  # bf16 matmuls: loose
    assert not np.allclose(mixed, pure[0], atol=1e-3) and not np.allclose(mixed, pure[1],
                                                                         atol=1e-3)


def _gradients_and_state(recompute: bool):
    keras.utils.set_random_seed(1)
    g, d = _paper_models(64, ch_g=4, ch_d=8, classes=5, dim_z=20, recompute=recompute)
    z = tf.random.stateless_normal([3, 20], [3, 4])
    labels = tf.constant([0, 2, 4])

    @tf.function
    def grads():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(d((g((z, labels), training=True), labels), training=True) ** 2)
        return loss, tape.gradient(loss, g.trainable_variables + d.trainable_variables)
    loss, gradients = grads()
    state = [v.numpy() for v in g.non_trainable_variables + d.non_trainable_variables]
    return float(loss), [tf.convert_to_tensor(x).numpy() for x in gradients], state


def test_recompute_gives_the_same_gradients_and_state():
    loss, grads, state = _gradients_and_state(False)
    loss_rc, grads_rc, state_rc = _gradients_and_state(True)
    assert loss_rc == pytest.approx(loss, rel=1e-5)
    scale = max(float(np.abs(x).max()) for x in grads)
    # Round-off, amplified by batch-3 BN in G: 3.5e-7 of the largest gradient with
    # TF_ENABLE_ONEDNN_OPTS=0, 1.7e-3 with oneDNN's kernels on an Intel Xeon (AMX,
    # 2026-11-25; its recomputation runs other conv kernels). A recomputation that does
    # not restore the state first leaves the gradients alike: the state check below
    # catches that (0.17 off).
    for plain, recomputed in zip(grads, grads_rc):
        np.testing.assert_allclose(recomputed, plain, atol=1e-2 * scale)
    # SN vectors and BN statistics advance once, as without recompute (a recomputation
    # that did not restore them advanced the BN statistics twice: 0.15 off).
    for plain, recomputed in zip(state, state_rc):
        np.testing.assert_allclose(recomputed, plain, atol=1e-5)


def test_recompute_keeps_only_block_inputs_for_the_backward_pass():
    """The point of recompute: the backward pass reads far fewer forward tensors."""
    def saved_bytes(recompute):
        # Attention at 32 px: at 64 its 4096 x 1024 map per example dominates both plans.
        g = biggan.Generator(resolution=128, num_classes=5, ch=4, dim_z=24, shared_dim=8,
                             hierarchical_z=True, attention_resolutions=(32,),
                             recompute=recompute)
        d = biggan.Discriminator(resolution=128, num_classes=5, ch=8,
                                 attention_resolutions=(32,), recompute=recompute)
        biggan.build(g, d, 3)
        return memory.activation_bytes(g, d, batch=2)
    plain, recomputed = saved_bytes(False), saved_bytes(True)
    # Measured: G's update 24.6 -> 10.6 MB; D's 23.0 -> 16.1 MB (its update also runs G's
    # forward pass for the fakes, which keeps nothing and so gains nothing).
    assert recomputed["g_update"] < 0.5 * plain["g_update"]
    assert recomputed["d_update"] < 0.8 * plain["d_update"]


def _closed_form_ortho_gradient(weight: np.ndarray, rows_last: bool) -> np.ndarray:
    """BigGAN-PyTorch utils.ortho: 2 (W W^T * (1 - I)) W, W = param.view(rows, -1)."""
    w = np.moveaxis(weight, -1, 0) if rows_last else weight
    shape = w.shape
    w = w.reshape(shape[0], -1).astype(np.float64)
    grad = 2.0 * ((w @ w.T) * (1.0 - np.eye(w.shape[0]))) @ w
    grad = grad.reshape(shape)
    return np.moveaxis(grad, 0, -1) if rows_last else grad


@pytest.mark.parametrize("shared", [True, False])
def test_orthogonal_regulariser_gradient_is_the_references_closed_form(shared):
    kwargs = (dict(dim_z=20, shared_dim=8, hierarchical_z=True) if shared else dict(dim_z=16))
    g = biggan.Generator(resolution=64 if shared else 32, num_classes=5, ch=4, **kwargs)
    d = biggan.Discriminator(resolution=64 if shared else 32, num_classes=5, ch=4)
    biggan.build(g, d, 3)
    with tf.GradientTape() as tape:
        reg = regularizers.orthogonal(g)
    variables = g.trainable_variables
    grads = tape.gradient(reg, variables)
    covered = regularizers.orthogonal_weights(g)
    # Every weight with two or more axes, except the shared embedding (the reference's
    # blacklist): class-BN tables included.
    expected = {v.ref() for v in variables if len(v.shape) >= 2}
    if shared:
        expected.discard(g.shared.embeddings.ref())
    else:
        assert any("gain_embeddings" in w.name for w, _ in covered)
    assert {w.ref() for w, _ in covered} == expected
    by_ref = {v.ref(): grad for v, grad in zip(variables, grads)}
    for weight, rows_last in covered:
        np.testing.assert_allclose(
            tf.convert_to_tensor(by_ref[weight.ref()]).numpy(),
            _closed_form_ortho_gradient(weight.numpy(), rows_last), rtol=1e-4, atol=1e-6)


def test_orthogonal_regulariser_is_added_once_per_update_at_full_strength():
    """With 2 accumulated micro-batches the regulariser's share of G's gradient is
    ortho_reg x the closed form, not twice that."""
    _, _, with_reg = _tiny_step(32, accumulation=2, ortho_reg=0.5)
    g, _, without = _tiny_step(32, accumulation=2, ortho_reg=0.0)
    noise = [(tf.random.stateless_normal([2, g.dim_z], [i, 0]), tf.constant([1, 2]))
             for i in range(2)]
    strategy = tf.distribute.get_strategy()

    def grads(step):
        return strategy.run(lambda: step.g_gradients(noise)[1])
    # Same initial weights (same seed) and noise: the difference is the regulariser.
    delta = [tf.convert_to_tensor(a).numpy() - tf.convert_to_tensor(b).numpy()
             for a, b in zip(grads(with_reg), grads(without))]
    by_ref = {v.ref(): x for v, x in zip(g.trainable_variables, delta)}
    for weight, rows_last in regularizers.orthogonal_weights(g):
        np.testing.assert_allclose(by_ref[weight.ref()],
                                   0.5 * _closed_form_ortho_gradient(weight.numpy(), rows_last),
                                   rtol=1e-3, atol=1e-5)


def _glorot_limit(kernel: np.ndarray) -> float:
    receptive = int(np.prod(kernel.shape[:-2]))
    return float(np.sqrt(6.0 / (receptive * (kernel.shape[-2] + kernel.shape[-1]))))


@pytest.mark.parametrize("init,check", [
    ("N02", lambda k: abs(k.std() - 0.02) < 0.002 and abs(k.mean()) < 0.002),
    ("glorot", lambda k: (np.abs(k).max() <= _glorot_limit(k) + 1e-6
                          and np.abs(k).max() > 0.9 * _glorot_limit(k))),
    ("ortho", lambda k: np.allclose(k.reshape(-1, k.shape[-1]).T @ k.reshape(-1, k.shape[-1]),
                                    np.eye(k.shape[-1]), atol=1e-4)),
])
def test_init_choices_follow_the_reference(init, check):
    g = biggan.Generator(resolution=32, num_classes=10, ch=16, dim_z=32, init=init)
    d = biggan.Discriminator(resolution=32, num_classes=10, ch=16, init=init)
    biggan.build(g, d, 3)
    assert check(g.blocks[1].conv1.kernel.numpy())
    assert check(d.blocks[1].conv1.kernel.numpy())
    # Per-class BN tables are initialised like the weights (reference: nn.Embedding).
    bn = g.blocks[0].bn1
    assert np.abs(bn.gain_embed.numpy()).max() > 0
    # Drawn independently (one unseeded initialiser for both once gave them equal values).
    assert not np.allclose(bn.gain_embed.numpy(), bn.bias_embed.numpy())
    assert np.all(g.blocks[0].conv1.bias.numpy() == 0)


def test_embedding_zeros_bn_and_sn_epsilons_are_used():
    g = biggan.Generator(resolution=32, num_classes=10, ch=4, dim_z=16, embedding_init="zeros",
                         bn_epsilon=1e-3, sn_epsilon=1e-6)
    d = biggan.Discriminator(resolution=32, num_classes=10, ch=4)
    biggan.build(g, d, 3)
    assert np.all(g.blocks[0].bn1.gain_embed.numpy() == 0)
    assert g.blocks[0].bn1.epsilon == 1e-3 and g.out_bn.epsilon == 1e-3
    assert g.blocks[0].conv1.numerics.sn_epsilon == 1e-6
    # SN epsilon floors the norm of the power iteration's vectors (F.normalize's eps).
    tiny = tf.constant([[1e-9, 0.0]])
    np.testing.assert_allclose(layers._l2_normalize(tiny, 1e-6).numpy(), [[1e-3, 0.0]], rtol=1e-5)
    with pytest.raises(ConfigError, match="Generator.init='he'"):
        biggan.Generator(resolution=32, num_classes=10, init="he")
