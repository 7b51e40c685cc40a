"""FID / FCD, KID and Inception Score from activations: tensorflow-gan's eval math.

The math is tensorflow-gan's (through paragan_tf/tfgan_compat.py), but for the
Fréchet distance (numpy: five times faster at Inception's 2,048 dimensions);
these functions fix the dtype (float64, so the matrix square root of large
covariance matrices stays accurate) and return Python floats. Which features
go in decides the metric's name: Inception-v3 pool features give FID,
features of our own dataset classifier give the Fréchet Classifier Distance
(FCD), which is not comparable with published FIDs (eval/features.py).
"""

from __future__ import annotations

import contextlib
import io
from typing import Dict, Tuple

import numpy as np
import tensorflow as tf

from paragan_tf import tfgan_compat


def _float64(x) -> tf.Tensor:
    return tf.convert_to_tensor(np.asarray(x, np.float64))


def frechet_distance(real: np.ndarray, generated: np.ndarray) -> float:
    """||mu_r - mu_g||^2 + Tr(S_r + S_g - 2 (S_r S_g)^1/2) over [n, d] activations.

    Written with numpy rather than tensorflow-gan's, which takes two SVD square roots and
    ran about 5x slower at d = 2,048 (10.7 s against 2.0 s on a 2-core machine whose
    model was not recorded, 2026-11-25: benchmarks/probes/frechet_vs_tfgan.py); a
    per-class FID takes one per class.
    Tr (S_r S_g)^1/2 is the sum of the square roots of the eigenvalues of the
    symmetric A S_g A, A = S_r^1/2; with fewer samples than dimensions (per class),
    it is the nuclear norm of the centred cross-Gram matrix X_r X_g^T / sqrt((n_r - 1)
    (n_g - 1)), whose squared singular values are the non-zero eigenvalues of S_r S_g.
    """
    x, y = (np.asarray(a, np.float64) for a in (real, generated))
    (n, d), m = x.shape, len(y)
    if min(n, m) >= d:
        return frechet_distance_from_statistics(*statistics(x), *statistics(y))
    mean_term = np.sum((x.mean(0) - y.mean(0)) ** 2)
    x, y = x - x.mean(0), y - y.mean(0)
    trace_term = np.sum(x * x) / (n - 1) + np.sum(y * y) / (m - 1)
    root = np.linalg.svd(x @ y.T, compute_uv=False).sum() / np.sqrt((n - 1) * (m - 1))
    return float(mean_term + trace_term - 2 * root)


def statistics(features: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(mu, sigma) of [n, d] features in float64: what FID reference files hold."""
    x = np.asarray(features, np.float64)
    return x.mean(0), np.cov(x, rowvar=False)


def frechet_distance_from_statistics(mu_x: np.ndarray, cov_x: np.ndarray, mu_y: np.ndarray,
                                     cov_y: np.ndarray) -> float:
    """The Fréchet distance of two Gaussians (see frechet_distance)."""
    w, v = np.linalg.eigh(cov_x)
    sqrt_x = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
    root = np.sqrt(np.clip(np.linalg.eigvalsh(sqrt_x @ cov_y @ sqrt_x), 0, None)).sum()
    return float(np.sum((mu_x - mu_y) ** 2) + np.trace(cov_x) + np.trace(cov_y) - 2 * root)


def kernel_distance(real: np.ndarray, generated: np.ndarray,
                    block_size: int = 1024) -> Tuple[float, float]:
    """KID: unbiased MMD^2 with the cubic polynomial kernel, averaged over blocks of at most
    `block_size` samples, and the standard error of that average."""
    kid, std = tfgan_compat.classifier_metrics.kernel_classifier_distance_and_std_from_activations(
        _float64(real), _float64(generated), max_block_size=block_size)
    return float(kid), float(std)


def classifier_score(logits: np.ndarray) -> float:
    """Inception Score: exp(E_x KL(p(y|x) || p(y))) from [n, classes] logits."""
    return float(tfgan_compat.classifier_metrics.classifier_score_from_logits(_float64(logits)))


def conditional_accuracy(predicted: np.ndarray, requested: np.ndarray) -> float:
    """The fraction of generated samples whose classifier label is the class they were asked for."""
    return float(np.mean(np.asarray(predicted) == np.asarray(requested)))


def precision_recall_density_coverage(real: np.ndarray, generated: np.ndarray,
                                      nearest_k: int = 5) -> Dict[str, float]:
    """Improved precision and recall (Kynkaanniemi et al. 2019), density and coverage
    (Naeem et al. 2020) from [n, d] features: each real sample's ball reaches its
    k-th nearest real neighbour; precision is the share of generated samples inside
    some real ball (fidelity), recall the share of real samples inside some generated
    ball (diversity), density counts the real balls around each generated sample / k,
    coverage is the share of real balls holding a generated sample.

    The computation is Naeem et al.'s reference package (prdc): the whole n x m
    distance matrix in memory, so callers bound n and m (eval.prdc_samples).
    """
    # Imported here: prdc imports scikit-learn, ~1 CPU s that every training process (which
    # imports this module through its evaluator) would pay for an evaluation it may not run.
    import prdc  # pylint: disable=import-outside-toplevel
    with contextlib.redirect_stdout(io.StringIO()):  # prdc prints the sample counts
        result = prdc.compute_prdc(np.asarray(real, np.float32),
                                   np.asarray(generated, np.float32), nearest_k)
    return {name: float(value) for name, value in result.items()}


def intra_class_frechet(real: np.ndarray, real_labels: np.ndarray, generated: np.ndarray,
                        generated_labels: np.ndarray) -> float:
    """The Fréchet distance within each class, averaged over the classes both sides hold."""
    classes = sorted(set(np.unique(real_labels)) & set(np.unique(generated_labels)))
    if not classes:
        raise ValueError("no class has both real and generated samples")
    return float(np.mean([frechet_distance(real[real_labels == c],
                                           generated[generated_labels == c])
                          for c in classes]))
