"""FID / FCD, KID and Inception Score from activations: tensorflow-gan's eval math.

The math is tensorflow-gan's (through paragan_tf/tfgan_compat.py); these
functions only fix the dtype (float64, so the matrix square root of large
covariance matrices stays accurate) and return Python floats. Which features
go in decides the metric's name: Inception-v3 pool features give FID,
features of our own dataset classifier give the Fréchet Classifier Distance
(FCD), which is not comparable with published FIDs (eval/features.py).
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
import tensorflow as tf

from paragan_tf.tfgan_compat import classifier_metrics as _tfgan


def _float64(x) -> tf.Tensor:
    return tf.convert_to_tensor(np.asarray(x, np.float64))


def frechet_distance(real: np.ndarray, generated: np.ndarray) -> float:
    """||mu_r - mu_g||^2 + Tr(S_r + S_g - 2 (S_r S_g)^1/2) over [n, d] activations."""
    return float(_tfgan.frechet_classifier_distance_from_activations(
        _float64(real), _float64(generated)))


def kernel_distance(real: np.ndarray, generated: np.ndarray,
                    block_size: int = 1024) -> Tuple[float, float]:
    """KID: unbiased MMD^2 with the cubic polynomial kernel, averaged over blocks of at most
    `block_size` samples, and the standard error of that average."""
    kid, std = _tfgan.kernel_classifier_distance_and_std_from_activations(
        _float64(real), _float64(generated), max_block_size=block_size)
    return float(kid), float(std)


def classifier_score(logits: np.ndarray) -> float:
    """Inception Score: exp(E_x KL(p(y|x) || p(y))) from [n, classes] logits."""
    return float(_tfgan.classifier_score_from_logits(_float64(logits)))


def conditional_accuracy(predicted: np.ndarray, requested: np.ndarray) -> float:
    """The fraction of generated samples whose classifier label is the class they were asked for."""
    return float(np.mean(np.asarray(predicted) == np.asarray(requested)))
