"""TensorFlow's Conv2D on an empty batch, with oneDNN on and off: the output shape.

    TF_ENABLE_ONEDNN_OPTS=1 .venv/bin/python benchmarks/probes/empty_batch_conv.py
    TF_ENABLE_ONEDNN_OPTS=0 .venv/bin/python benchmarks/probes/empty_batch_conv.py

Measured 2026-11-25 with TensorFlow 2.21.0 on x86-64: with oneDNN on (the default
on this CPU) a 3x3 stride-2 conv of 32 filters maps [0, 299, 299, 3] to
[0, 299, 299, 3], its input unchanged, eagerly and in a tf.function; with oneDNN
off it gives [0, 149, 149, 32]. A replica whose share of a partial evaluation
batch is empty hits it (eval/evaluator.py pads every pass to a multiple of the
replicas for this reason).
"""

import os

import tensorflow as tf

kernel = tf.random.normal([3, 3, 3, 32])
empty = tf.zeros([0, 299, 299, 3])
conv = tf.function(lambda x: tf.nn.conv2d(x, kernel, 2, "VALID"))
print(f"TF {tf.__version__}, TF_ENABLE_ONEDNN_OPTS={os.environ.get('TF_ENABLE_ONEDNN_OPTS')}: "
      f"eager {tf.nn.conv2d(empty, kernel, 2, 'VALID').shape}, tf.function "
      f"{conv(empty).shape}, expected (0, 149, 149, 32)")
