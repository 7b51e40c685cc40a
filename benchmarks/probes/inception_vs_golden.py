"""Our FID Inception against the reference's goldens: the numbers behind
tests/eval/test_inception.py.

    .venv/bin/python benchmarks/probes/inception_vs_golden.py          # features and FID
    .venv/bin/python benchmarks/probes/inception_vs_golden.py bgr      # a broken variant

Prints, for the 8 golden images, the largest error relative to each image's
largest feature and the relative L2 error of all features, then the FID of the
two golden sets of 200 images (ours, through our numpy Fréchet distance) beside
the reference's value, and how many significant digits agree. `bgr` feeds every image with
its colour channels reversed: a broken variant that tests/eval/test_inception.py must fail.
"""

import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks import eval_features  # noqa: E402  (the repository root, just above)
from paragan_tf.eval import metrics

inputs = eval_features.golden_inputs()
golden = dict(np.load(os.path.join(eval_features.GOLDEN, "inception_golden.npz")))
embed = eval_features.embedder(value_range=(0, 255))


BGR = sys.argv[1:] == ["bgr"]


def features(images):
    return eval_features.in_batches(embed, images[..., ::-1] if BGR else images)


ours, ref = features(inputs.feature_images()), golden["features"]
per_image = np.abs(ours - ref).max(axis=1) / np.abs(ref).max(axis=1)
print(f"features of 8 images: max error / the image's largest feature {per_image.max():.2e}, "
      f"relative L2 {np.linalg.norm(ours - ref) / np.linalg.norm(ref):.2e}")
start = time.perf_counter()
soft, shapes = inputs.fid_sets()
fid, ref_fid = metrics.frechet_distance(features(soft), features(shapes)), float(golden["fid"])
digits = -math.log10(abs(fid - ref_fid) / ref_fid)
print(f"FID of the golden sets: ours {fid:.6f}, reference {ref_fid:.6f}, difference "
      f"{abs(fid - ref_fid):.2e} ({digits:.1f} significant digits agree; "
      f"{time.perf_counter() - start:.0f} s for {len(soft) + len(shapes):,} images)")
