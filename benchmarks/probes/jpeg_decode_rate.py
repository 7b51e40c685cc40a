"""Images/s one CPU core decodes and resizes to 128 px: the scale plan's input rate.

    .venv/bin/python benchmarks/probes/jpeg_decode_rate.py

Decodes scikit-learn's two sample photographs (china.jpg and flower.jpg, 427 x
640, shipped with the package: real JPEGs near ImageNet's mean size), resizes
each to 128 x 128 and casts to float, one thread, in a tf.data pipeline as our
input does; prints images/s per core. paragan_tf/scale/devices.py multiplies it by
a host's cores (INPUT_CORES_PER_HOST) for INPUT_PER_HOST.

Measured 2026-11-26 on the 2-core AMD EPYC (Zen 4) with TensorFlow 2.21: see
the value quoted in paragan_tf/scale/devices.py.
"""

import os
import time

import sklearn.datasets
import tensorflow as tf

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
folder = os.path.join(os.path.dirname(sklearn.datasets.__file__), "images")
photos = [tf.io.read_file(os.path.join(folder, name)) for name in ("china.jpg", "flower.jpg")]
count = 400
data = (tf.data.Dataset.from_tensor_slices(tf.stack(photos)).repeat(count // 2)
        .map(lambda jpeg: tf.image.resize(tf.io.decode_jpeg(jpeg, 3), [128, 128]))
        .batch(50))
options = tf.data.Options()
options.threading.private_threadpool_size = 1
data = data.with_options(options)
for _ in data.take(1):  # warm-up
    pass
best = 0.0
for _ in range(3):
    start = time.perf_counter()
    for _ in data:
        pass
    best = max(best, count / (time.perf_counter() - start))
print(f"{best:.0f} images/s per core (decode 427x640 JPEG + resize to 128, best of 3)")
