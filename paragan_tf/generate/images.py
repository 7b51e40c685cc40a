"""Image grids: generated batches laid out as PNGs and TensorBoard images."""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def to_uint8(images) -> np.ndarray:
    """[-1, 1] floats -> uint8, any leading shape."""
    images = np.asarray(images, np.float32)
    return np.clip(np.rint((images + 1.0) * 127.5), 0, 255).astype(np.uint8)


def grid(images, rows: int, pad: int = 2) -> np.ndarray:
    """[rows*cols, h, w, c] images in [-1, 1] -> one uint8 [H, W, c] grid, row-major."""
    images = to_uint8(images)
    n, h, w, c = images.shape
    cols = n // rows
    if rows * cols != n:
        raise ValueError(f"{n} images do not fill {rows} rows")
    out = np.full((rows * (h + pad) + pad, cols * (w + pad) + pad, c), 255, np.uint8)
    for i in range(n):
        r, k = divmod(i, cols)
        out[pad + r * (h + pad):pad + r * (h + pad) + h,
            pad + k * (w + pad):pad + k * (w + pad) + w] = images[i]
    return out


def write_png(path: str, image: np.ndarray) -> None:
    """Writes a uint8 [H, W, 1|3] array as PNG (any filesystem tf.io.gfile knows)."""
    # rsplit, not os.path: the path may be a URL (gs://...) as well as a local path, and
    # its leading "/" must survive (a join of the split parts made /tmp/x relative).
    folder = path.rsplit("/", 1)[0] if "/" in path else "."
    tf.io.gfile.makedirs(folder or "/")
    tf.io.write_file(path, tf.io.encode_png(image))
