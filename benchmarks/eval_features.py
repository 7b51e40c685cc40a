"""How fast are the evaluation's features, and may they run in bfloat16? (--suite=eval)

Times what an evaluation spends per image on features: the FID Inception-v3
(eval/inception.py: uint8 quantisation, NVIDIA's bilinear resize to 299, the
network, as eval/features.py calls it) on `images` random images at 32 and 128
px, in float32 and in the precision the 'auto' layout picks on this machine
(mixed_bfloat16 where the CPU has a bfloat16 unit), beside the classifier path
of FCD (eval/classifier.py's network at the same sizes; untrained weights: its
speed does not depend on them). One warm-up batch per arm (tracing) is not
timed. Each arm's convolution FLOPs are counted from its traced graph and its
FLOP/s checked against the machine's theoretical peak.

bfloat16's effect on FID: the FID between the two golden sets of
tests/golden/make_inception_inputs.py (2 x 200 images; 2 x 500 before 2026-11-28) in each precision,
against the reference's value stored in tests/golden/inception_golden.npz.
Evaluation stays float32 if bfloat16 moves it by more than `FID_TOLERANCE`.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, Dict, Sequence

import numpy as np
import tensorflow as tf

from benchmarks import machine
from benchmarks import step as step_bench
from paragan_tf.layout import rules as layout_lib
from paragan_tf.eval import classifier as classifier_lib
from paragan_tf.eval import inception
from paragan_tf.eval import metrics

FID_TOLERANCE = 0.1
GOLDEN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
                      "golden")


def golden_inputs():
    """The seeded numpy script that makes the golden inputs (shared with the tests and the
    reference's side, tests/golden/make_inception_golden.py)."""
    if GOLDEN not in sys.path:
        sys.path.append(GOLDEN)
    import make_inception_inputs  # pylint: disable=import-outside-toplevel,import-error
    return make_inception_inputs


def embedder(precision: str = "float32", weights=None,
             value_range=(-1.0, 1.0)) -> Callable[[tf.Tensor], tf.Tensor]:
    """Images in `value_range` -> Inception features, as the evaluator computes them."""
    model = inception.build(weights, precision)
    return tf.function(lambda x: model(inception.preprocess(x, value_range), training=False))


def in_batches(embed, images: np.ndarray, batch: int = 50) -> np.ndarray:
    """[n, ...] numpy images -> [n, 2048] features, `batch` at a time."""
    return np.concatenate([embed(tf.constant(images[i:i + batch])).numpy()
                           for i in range(0, len(images), batch)])


def _classifier(resolution: int) -> Callable[[tf.Tensor], tf.Tensor]:
    model = classifier_lib.build(10, 3, resolution)
    return tf.function(lambda x: model(x, training=False)[0])


def _time(fn, images: int, batch: int, resolution: int, ceiling_gflops) -> Dict[str, float]:
    """Seconds for `images` images in batches of `batch` (one untimed warm-up batch)."""
    data = tf.random.stateless_uniform([batch, resolution, resolution, 3], [1, resolution],
                                       -1.0, 1.0)
    fn(data).numpy()  # traces
    flops = step_bench.executed_conv_flops(
        fn.get_concrete_function(data).graph, fn.get_concrete_function(data).outputs) / batch
    full, rest = divmod(images, batch)
    start = time.perf_counter()
    for _ in range(full):
        fn(data).numpy()
    if rest:
        fn(data[:rest]).numpy()
    seconds = time.perf_counter() - start
    gflops = flops * images / seconds / 1e9
    if ceiling_gflops and gflops > ceiling_gflops:
        raise step_bench.BeyondPeak(f"{gflops:.1f} GFLOP/s measured, above the theoretical "
                                    f"{ceiling_gflops:.1f}")
    return dict(seconds=seconds, images_per_second=images / seconds,
                conv_gflop_per_image=flops / 1e9, achieved_gflops=gflops,
                mfu=gflops / ceiling_gflops if ceiling_gflops else None)


def _golden_fid(precision: str, weights, progress) -> float:
    soft, shapes = golden_inputs().fid_sets()
    embed = embedder(precision, weights, (0, 255))
    fid = metrics.frechet_distance(in_batches(embed, soft), in_batches(embed, shapes))
    progress(f"golden FID in {precision}: {fid:.5f}")
    return fid


def eval_features(images: int = 10000, batch: int = 250,
                  resolutions: Sequence[int] = (32, 128), progress=print) -> dict:
    """JSON: per arm (extractor, precision, resolution) the seconds for `images` images,
    images/s, FLOP/s and MFU; the golden FID per precision; the precision decision."""
    hardware = layout_lib.detect()
    auto = layout_lib.choose(hardware).precision
    precisions = ["float32"] + ([auto] if auto != "float32" else [])
    theory = machine.theoretical_peak()
    weights = inception.load_weights()
    arms = {}
    for resolution in resolutions:
        for precision in precisions:
            name = f"inception_{precision}_{resolution}px"
            progress(f"{name}: {images} images in batches of {batch}")
            ceiling = theory["bf16_gflops" if precision == "mixed_bfloat16" else "fp32_gflops"]
            arms[name] = dict(extractor="inception", precision=precision, resolution=resolution,
                              **_time(embedder(precision, weights), images, batch,
                                      resolution, ceiling))
            progress(f"{name}: {arms[name]['seconds']:.1f} s, "
                     f"{arms[name]['images_per_second']:.1f} images/s")
        name = f"classifier_float32_{resolution}px"
        arms[name] = dict(extractor="classifier", precision="float32", resolution=resolution,
                          **_time(_classifier(resolution), images, batch, resolution,
                                  theory["fp32_gflops"]))
        progress(f"{name}: {arms[name]['seconds']:.1f} s")
    reference = float(np.load(os.path.join(GOLDEN, "inception_golden.npz"))["fid"])
    golden = {p: _golden_fid(p, weights, progress) for p in precisions}
    changes = {p: abs(fid - reference) for p, fid in golden.items()}
    bf16_change = changes.get("mixed_bfloat16")
    return {
        "suite": "eval", "images": images, "batch": batch, "auto_precision": auto,
        "arms": arms, "golden_fid_reference": reference, "golden_fid": golden,
        "golden_fid_change": changes, "fid_tolerance": FID_TOLERANCE,
        "evaluation_precision": ("mixed_bfloat16" if bf16_change is not None and
                                 bf16_change <= FID_TOLERANCE else "float32"),
        "theoretical_peak": theory,
    }
