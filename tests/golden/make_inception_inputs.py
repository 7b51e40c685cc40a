"""The golden inputs of tests/eval/test_inception.py: seeded numpy images, the same everywhere.

Used by tests/eval/test_inception.py (ours, TensorFlow) and by make_inception_golden.py
(the reference, torch), so neither side stores the images; needs numpy only.

  feature_images()  8 images 299x299x3 uint8 for the feature check: smooth colour
                    fields at four scales, stripes, discs, noise and a grey image,
                    so every block of the network sees structure at its own scale.
  fid_sets()        two sets of 200 images 32x32x3 uint8 from visibly different
                    distributions: soft colour fields, and the same fields with one
                    hard-edged saturated disc or square each, so their FID is tens
                    (about 70) and the resize of those edges to 299 weighs in it.
"""

from __future__ import annotations

import numpy as np

SEED = 20261125
FID_SET_SIZE = 200  # 500 until 2026-11-28: 2.5x the test's time, the same check


def _upsample(grid: np.ndarray, size: int) -> np.ndarray:
    """[n, g, g, c] -> [n, size, size, c] by separable linear interpolation (numpy only)."""
    g = grid.shape[1]
    pos = np.linspace(0, g - 1, size)
    lo = np.minimum(np.floor(pos).astype(int), g - 2)
    frac = pos - lo
    m = np.zeros((size, g))
    m[np.arange(size), lo] = 1 - frac
    m[np.arange(size), lo + 1] = frac
    return np.einsum("ih,nhwc,jw->nijc", m, grid, m)


def _smooth(rng, n: int, size: int, grid: int) -> np.ndarray:
    return _upsample(rng.uniform(0, 255, (n, grid, grid, 3)), size)


def _shapes(rng, images: np.ndarray, count: int) -> np.ndarray:
    """Paints `count` saturated discs or squares on each image."""
    n, size = images.shape[:2]
    yy, xx = np.mgrid[:size, :size]
    out = images.copy()
    for i in range(n):
        for _ in range(count):
            cy, cx = rng.uniform(0, size, 2)
            r = rng.uniform(size / 10, size / 4)
            if rng.uniform() < 0.5:
                mask = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r
            else:
                mask = (np.abs(yy - cy) < r) & (np.abs(xx - cx) < r)
            out[i][mask] = rng.choice([0.0, 255.0], 3)
    return out


def _uint8(x: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def feature_images() -> np.ndarray:
    """[8, 299, 299, 3] uint8."""
    rng = np.random.default_rng(SEED)
    size = 299
    smooth = np.concatenate([_smooth(rng, 1, size, g) for g in (2, 4, 8, 16)])
    yy, xx = np.mgrid[:size, :size] / size
    stripes = 127.5 + 127.5 * np.sin(2 * np.pi * (7 * xx + 3 * yy))[None, :, :, None] \
        * rng.uniform(0.3, 1.0, (1, 1, 1, 3))
    discs = _shapes(rng, _smooth(rng, 1, size, 3), 12)
    noise = _smooth(rng, 1, size, 6) + rng.normal(0, 40, (1, size, size, 3))
    grey = np.repeat(_smooth(rng, 1, size, 5)[..., :1], 3, axis=-1)
    return _uint8(np.concatenate([smooth, stripes, discs, noise, grey]))


def fid_sets() -> tuple:
    """Two [200, 32, 32, 3] uint8 sets: (soft colour fields, the same with a shape each)."""
    rng = np.random.default_rng(SEED + 1)
    size = 32

    def noisy(x):
        return _uint8(x + rng.normal(0, 4, x.shape))
    soft = noisy(_smooth(rng, FID_SET_SIZE, size, 4))
    shapes = noisy(_shapes(rng, _smooth(rng, FID_SET_SIZE, size, 4), 1))
    return soft, shapes


if __name__ == "__main__":
    a, b = fid_sets()
    print(feature_images().shape, a.shape, b.shape,
          [round(float(x.mean()), 2) for x in (feature_images(), a, b)])
