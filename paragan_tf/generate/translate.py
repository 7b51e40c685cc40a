"""A user's own images through a trained translator (bin/translate.py): read, fitted to
what the model takes, translated in batches, written as PNGs.

The input is one image file or a folder of them (its own files, PNG, JPEG, BMP or GIF;
sub-folders and other files are skipped and counted in the log). Each image is decoded
with the model's input channels (colour is averaged to grey, grey repeated to colour) and
sized by `size`:

  model   fitted to the training resolution as the training data was (dataset.fit: padded
          or centre-cropped and resized); the output is that size
  native  translated at its own size, which must be a multiple of the model's
          (`multiple` per side: a U-Net halves an image that many times); an image that
          is not is refused by name before anything is translated

Outputs go to `output_dir` as <name>.png, one per input; two inputs that would write the
same name are refused before any work. A file TensorFlow cannot decode is refused by name.
"""

from __future__ import annotations

import os
from typing import Callable, List, Sequence

from absl import logging
import numpy as np
import tensorflow as tf

from paragan_tf.data import image_files
from paragan_tf.data import pipeline
from paragan_tf.errors import ConfigError
from paragan_tf.generate import images as images_lib

SIZES = ("model", "native")


def inputs_of(path: str) -> List[str]:
    """The image files `path` names: itself, or its folder's image files, sorted."""
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise ConfigError(f"--input={path!r} is neither an image file nor a folder")
    names = sorted(os.listdir(path))
    found = [os.path.join(path, n) for n in names
             if n.lower().endswith(image_files.TF_EXTENSIONS)
             and os.path.isfile(os.path.join(path, n))]
    if not found:
        raise ConfigError(f"--input={path!r} holds no image files "
                          f"({', '.join(image_files.TF_EXTENSIONS)})")
    if len(found) < len(names):
        logging.info("%s: %d image file(s); %d other entries skipped", path, len(found),
                     len(names) - len(found))
    return found


def _outputs(files: Sequence[str], output_dir: str) -> List[str]:
    outputs = [os.path.join(output_dir, os.path.splitext(os.path.basename(f))[0] + ".png")
               for f in files]
    seen = {}
    for source, output in zip(files, outputs):
        if output in seen:
            raise ConfigError(f"{seen[output]} and {source} would both be written to "
                              f"{output}; rename one")
        seen[output] = source
    return outputs


def _decoded(path: str, channels: int) -> tf.Tensor:
    try:
        return tf.io.decode_image(tf.io.read_file(path), channels=channels,
                                  expand_animations=False)
    except tf.errors.InvalidArgumentError as e:
        raise ConfigError(f"{path} is not an image TensorFlow can decode "
                          f"({e.message.splitlines()[0]})") from None


def _sized(path: str, image: tf.Tensor, size: str, resolution: int, fit: str,
           multiple: int) -> tf.Tensor:
    """float32 [h, w, c] in [-1, 1] as `size` has it (see the module doc)."""
    if size == "model":
        return pipeline.fit_image(image, resolution, fit)
    height, width = int(image.shape[0]), int(image.shape[1])
    if height % multiple or width % multiple:
        raise ConfigError(f"{path} is {width} x {height}: --size=native takes sides that are "
                          f"multiples of {multiple}; --size=model fits it to {resolution} px")
    return tf.cast(image, tf.float32) / 127.5 - 1.0


def translate_files(files: Sequence[str], output_dir: str,
                    translate: Callable[[tf.Tensor], tf.Tensor], channels: int,
                    resolution: int, fit: str, multiple: int, size: str = "model",
                    batch_size: int = 16) -> List[str]:
    """Translates `files` with `translate` (float32 [n, h, w, c] in [-1, 1] -> outputs
    alike) into `output_dir`; returns the written paths. Every image is read and checked
    before the first is translated."""
    if size not in SIZES:
        raise ConfigError(f"--size={size!r} must be one of {SIZES}")
    if batch_size < 1:
        raise ConfigError(f"--batch_size={batch_size} must be at least 1")
    outputs = _outputs(files, output_dir)
    sized = [_sized(f, _decoded(f, channels), size, resolution, fit, multiple) for f in files]
    tf.io.gfile.makedirs(output_dir)
    done = 0
    while done < len(files):
        # A batch of one size: every image at the model's size, or one run of equal sizes.
        end = done + 1
        while (end < len(files) and end - done < batch_size
               and sized[end].shape == sized[done].shape):
            end += 1
        translated = translate(tf.stack(sized[done:end])).numpy()
        for output, image in zip(outputs[done:end], translated):
            images_lib.write_png(output, images_lib.to_uint8(np.asarray(image)))
        done = end
        logging.info("translated %d/%d images into %s", done, len(files), output_dir)
    return outputs
