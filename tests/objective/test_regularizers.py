"""The orthogonal regulariser (objective/regularizers.py): zero for orthogonal columns only, and
against BigGAN-PyTorch's closed form."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.families.biggan import networks as biggan
from paragan_tf.models import layers
from paragan_tf.objective import regularizers
from tests.helpers.paper_biggan import _tiny_step


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


def test_orthogonal_regularizer_is_zero_for_orthogonal_columns_only():
    class Holder(tf.Module):
        def __init__(self):
            self.dense = layers.SNDense(3)
            self.dense(tf.zeros([1, 4]))
    holder = Holder()
    holder.dense.kernel.assign(np.eye(4, 3, dtype=np.float32) * 5.0)  # norms do not matter
    assert float(regularizers.orthogonal(holder)) == pytest.approx(0.0)
    holder.dense.kernel.assign(np.ones([4, 3], np.float32))
    # The reference's 0.5 * sum of squared off-diagonal Gram entries: 6 entries of 4^2.
    assert float(regularizers.orthogonal(holder)) == pytest.approx(0.5 * 6 * 16.0)
