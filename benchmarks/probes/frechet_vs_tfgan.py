"""Probe: paragan_tf's numpy Fréchet distance against tensorflow-gan's, value and seconds.

    .venv/bin/python benchmarks/probes/frechet_vs_tfgan.py

Random Gaussian features: 2000 x 2048 each (the statistics path), 300 vs 200 x 2048
(fewer samples than dimensions: the cross-Gram path), 500 x 64.
"""

import time

import numpy as np
import paragan_tf  # noqa: F401  (tf-keras first)
import tensorflow as tf

from paragan_tf.eval import metrics
from paragan_tf.tfgan_compat import classifier_metrics as tfgan

rng = np.random.default_rng(0)
for n, m, d in ((2000, 2000, 2048), (300, 200, 2048), (500, 500, 64)):
    a, b = rng.normal(size=(n, d)), rng.normal(size=(m, d)) * 1.2 + 0.1
    start = time.perf_counter()
    ours = metrics.frechet_distance(a, b)
    ours_s = time.perf_counter() - start
    start = time.perf_counter()
    ref = float(tfgan.frechet_classifier_distance_from_activations(tf.constant(a),
                                                                    tf.constant(b)))
    ref_s = time.perf_counter() - start
    print(f"{n}x{d} vs {m}x{d}: ours {ours:.10g} ({ours_s:.2f} s), tensorflow-gan {ref:.10g} "
          f"({ref_s:.2f} s), relative difference {abs(ours - ref) / ref:.1e}")
