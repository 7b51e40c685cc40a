"""Export of a pix2pix generator as a plain SavedModel: images -> their translation.

    loaded = tf.saved_model.load(path)
    outputs = loaded.signatures["serving_default"](images=images)["images"]

images: float32 [n, h, w, c] in [-1, 1], h and w multiples of `multiple` in
`translator.json` (the training resolution: the U-Net halves an image that many times);
outputs alike. G runs in the run's test mode (families/pix2pix/test_time.py): in the
paper's mode the served model uses each batch's statistics and dropout, as in training,
and moves its own copy of the moving statistics, which nothing it serves reads. The graph
holds everything (mixed-precision casts too): the loading process needs TensorFlow only.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf
import tf_keras as keras

from paragan_tf.families.pix2pix import test_time

INFO_FILE = "translator.json"
SIGNATURE = "serving_default(images) -> {images}"


def export_translator(generator: keras.Model, path: str, options: test_time.Pix2PixOptions,
                      info: dict) -> str:
    """Writes `generator` to `path` with `info` beside it; returns the signature."""
    spec = tf.TensorSpec([None, None, None, generator.in_channels], tf.float32,
                         name="images")

    @tf.function(input_signature=[spec])
    def serve(images):
        return {"images": test_time.translate(generator, images, options)}

    module = tf.Module()
    module.generator = generator  # tracks the variables the graph reads
    module.serve = serve
    tf.saved_model.save(module, path, signatures={"serving_default": serve})
    facts = dict(info, in_channels=generator.in_channels, out_channels=generator.out_channels,
                 resolution=generator.resolution, test_mode=options.test_mode,
                 signature=SIGNATURE)
    with open(os.path.join(path, INFO_FILE), "w") as f:
        json.dump(facts, f, indent=1, sort_keys=True)
    return SIGNATURE
