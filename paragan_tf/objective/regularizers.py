"""Regularisers of network weights."""

from __future__ import annotations

from typing import List, Tuple

import tensorflow as tf
import tf_keras as keras

from paragan_tf.models import layers


def orthogonal_weights(model: keras.Model) -> List[Tuple[tf.Variable, bool]]:
    """The weights BigGAN-PyTorch's `utils.ortho` regularises, each with `rows_last`.

    Every trainable weight with two or more axes except G's shared class
    embedding (the reference's blacklist): conv and linear kernels (their rows,
    the output filters, are the last axis here, the first in PyTorch) and the
    per-class BN gain/bias tables (rows = classes, the first axis, as there).
    """
    weights = []
    for layer in model.submodules:
        if isinstance(layer, (layers.SNConv2D, layers.SNDense)):
            weights.append((layer.kernel, True))
        elif isinstance(layer, layers.SNEmbedding):
            weights.append((layer.embeddings, False))
        elif isinstance(layer, layers.ConditionalBatchNorm) and layer.conditioning == "class":
            weights += [(layer.gain_embed, False), (layer.bias_embed, False)]
    return weights


def orthogonal(model: keras.Model) -> tf.Tensor:
    """BigGAN's orthogonal regulariser: sum over weights of 1/2 ||W W^T * (1 - I)||_F^2.

    W is a weight as a [rows, fan_in] matrix. Only off-diagonal terms are
    penalised (Brock et al. 2019, eq. 3): rows are pushed apart without
    constraining their norms. The factor 1/2 makes the gradient the reference's
    closed form 2 (W W^T * (1 - I)) W, so `train.ortho_reg` is BigGAN-PyTorch's
    `--G_ortho` strength (1e-4 in the paper). Computed in float32.
    """
    total = tf.constant(0.0)
    for weight, rows_last in orthogonal_weights(model):
        w = tf.cast(weight, tf.float32)
        w = tf.reshape(w, [-1, w.shape[-1]]) if rows_last else tf.reshape(w, [w.shape[0], -1])
        gram = tf.matmul(w, w, transpose_a=rows_last, transpose_b=not rows_last)
        off_diagonal = gram * (1.0 - tf.eye(gram.shape[0]))
        total += 0.5 * tf.reduce_sum(tf.square(off_diagonal))
    return total
