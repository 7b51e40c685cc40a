"""The metrics (eval/metrics.py) against numpy: FID, KID, classifier score, precision, recall,
density, coverage and the intra-class distance."""

from __future__ import annotations

import numpy as np
import pytest

from paragan_tf.eval import metrics


def _activations(n=300, d=16, shift=0.0, seed=0):
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(d, d)) / np.sqrt(d)
    return rng.normal(size=(n, d)) @ mix + shift


def _numpy_fid(a, b):
    mu_a, mu_b = a.mean(0), b.mean(0)
    s_a, s_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    # Tr((S_a S_b)^1/2) = sum of the square roots of the (real, >= 0) eigenvalues of S_a S_b.
    trace_sqrt = np.sum(np.sqrt(np.abs(np.linalg.eigvals(s_a @ s_b).real)))
    return np.sum((mu_a - mu_b) ** 2) + np.trace(s_a) + np.trace(s_b) - 2 * trace_sqrt


def _numpy_kid(a, b):
    d = a.shape[1]
    kernel = lambda x, y: (x @ y.T / d + 1.0) ** 3  # noqa: E731
    k_aa, k_bb, k_ab = kernel(a, a), kernel(b, b), kernel(a, b)
    m, n = len(a), len(b)
    return ((k_aa.sum() - np.trace(k_aa)) / (m * (m - 1))
            + (k_bb.sum() - np.trace(k_bb)) / (n * (n - 1)) - 2 * k_ab.mean())


def test_fid_of_a_set_against_itself_is_zero():
    a = _activations()
    assert abs(metrics.frechet_distance(a, a)) < 1e-6 * np.trace(np.cov(a, rowvar=False))


def test_fid_and_kid_match_a_float64_numpy_reference():
    a, b = _activations(seed=0), _activations(shift=0.3, seed=1)
    fid, reference = metrics.frechet_distance(a, b), _numpy_fid(a, b)
    assert reference > 0.1 and fid == pytest.approx(reference, rel=1e-3)
    kid, _ = metrics.kernel_distance(a, b)  # 300 samples: one block, the exact estimator
    assert kid == pytest.approx(_numpy_kid(a, b), rel=1e-3)


def test_classifier_score_of_uniform_logits_is_one_and_of_confident_distinct_is_k():
    assert metrics.classifier_score(np.zeros([50, 10])) == pytest.approx(1.0)
    confident = np.eye(10)[np.arange(100) % 10] * 50.0  # each class equally often, sure
    assert metrics.classifier_score(confident) == pytest.approx(10.0, rel=1e-3)
    assert metrics.conditional_accuracy([1, 2, 3, 3], [1, 2, 3, 4]) == 0.75


def test_precision_recall_density_coverage_match_their_definitions():
    """1-D features, k = 1: each real sample's ball reaches its nearest real neighbour (1)."""
    real = np.array([[0.0], [1.0], [2.0], [3.0]])
    generated = np.array([[0.5], [10.0], [11.0]])  # one inside the real balls, two far
    out = metrics.precision_recall_density_coverage(real, generated, nearest_k=1)
    # precision: 0.5 lies in the balls of 0 and 1, 10 and 11 in none -> 1/3.
    # recall: 0.5's ball reaches its nearest generated neighbour (10, radius 9.5): it holds
    # all 4 reals -> 1. density: (2 balls + 0 + 0) / (k * 3 samples) = 2/3.
    # coverage: the balls of reals 0 and 1 hold a generated sample -> 2/4.
    assert out == pytest.approx(dict(precision=1 / 3, recall=1.0, density=2 / 3, coverage=0.5))
    far = metrics.precision_recall_density_coverage(real, generated + 100.0, nearest_k=1)
    assert far["precision"] == 0 and far["density"] == 0 and far["coverage"] == 0


def test_intra_class_distance_averages_the_per_class_distances():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(200, 3)), rng.normal(size=(200, 3))
    labels = np.repeat([0, 1], 200)
    real = np.concatenate([a, b])
    generated = np.concatenate([a, b + 2.0])  # class 0 identical; class 1 shifted by 2
    out = metrics.intra_class_frechet(real, labels, generated, labels)
    # class 0: 0; class 1: ||shift||^2 = 3 * 4 = 12 (the covariances are equal).
    assert out == pytest.approx((0.0 + 12.0) / 2, abs=1e-6)
    # The pooled distance mixes the classes and is not their mean: a negative control.
    assert metrics.frechet_distance(real, generated) != pytest.approx(out, abs=0.5)
