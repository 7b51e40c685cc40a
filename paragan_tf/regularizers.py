"""Regularisers of network weights."""

from __future__ import annotations

import tensorflow as tf
import tf_keras as keras

from paragan_tf.models import layers


def orthogonal(model: keras.Model) -> tf.Tensor:
    """BigGAN's orthogonal regulariser: sum over SN kernels of ||W^T W * (1 - I)||_F^2.

    Only off-diagonal terms are penalised (Brock et al. 2019, eq. 3): filters
    are pushed apart without constraining their norms. Applied to the conv and
    linear kernels (W reshaped to [fan_in, fan_out]); class embeddings are left
    out as the reference leaves out G's shared embedding.
    """
    total = tf.constant(0.0)
    for layer in model.submodules:
        if isinstance(layer, (layers.SNConv2D, layers.SNDense)):
            w = tf.reshape(layer.kernel, [-1, layer.kernel.shape[-1]])
            gram = tf.matmul(w, w, transpose_a=True)
            off_diagonal = gram * (1.0 - tf.eye(gram.shape[0]))
            total += tf.reduce_sum(tf.square(off_diagonal))
    return total
