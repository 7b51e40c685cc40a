"""Export of a generator as a plain SavedModel: (z, labels) -> images, no paragan_tf needed.

    loaded = tf.saved_model.load(path)
    images = loaded.signatures["serving_default"](z=z, labels=labels)["images"]

z: float32 [n, dim_z]; labels: int32 [n]; images: float32 [n, r, r, c] in [-1, 1].
The traced graph holds everything (including mixed-precision casts), so the
loading process needs TensorFlow only. `generator.json` beside it records the
shapes and where the weights came from.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf
import tf_keras as keras

INFO_FILE = "generator.json"
SIGNATURE = "serving_default(z, labels) -> {images}"


def export_generator(generator: keras.Model, path: str, info: dict) -> str:
    """Writes `generator` (inference mode) to `path`; returns the path."""
    spec = (tf.TensorSpec([None, generator.dim_z], tf.float32, name="z"),
            tf.TensorSpec([None], tf.int32, name="labels"))

    @tf.function(input_signature=spec)
    def serve(z, labels):
        return {"images": generator((z, labels), training=False)}

    module = tf.Module()
    module.generator = generator  # tracks the variables the graph reads
    module.serve = serve
    tf.saved_model.save(module, path, signatures={"serving_default": serve})
    size = generator.resolution
    facts = dict(info, dim_z=generator.dim_z, num_classes=generator.num_classes,
                 resolution=size, signature=SIGNATURE)
    with open(os.path.join(path, INFO_FILE), "w") as f:
        json.dump(facts, f, indent=1, sort_keys=True)
    return path
