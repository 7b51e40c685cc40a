"""One of pix2pix's convolutions, forward and both gradients, channels-last (NHWC, ours)
against channels-first (NCHW), in TensorFlow on this CPU, float32 and bfloat16: whether
the network would gain from the other layout (docs/benchmarks.md, "Batch norm fused").

    .venv/bin/python benchmarks/probes/conv_data_format.py

The PatchGAN's stride-1 convolution at the paper's width (batch 16, 10 x 10 x 256 padded
input, a 4 x 4 x 256 x 256 kernel, VALID); the median of 20 calls after 2, in milliseconds.
"""

from __future__ import annotations

import tensorflow as tf

from conv_kernels_vs_torch import median_ms  # beside this file (a script's first path)


def conv_ms(dtype: tf.DType, data_format: str) -> float:
    shape = [16, 10, 10, 256] if data_format == "NHWC" else [16, 256, 10, 10]
    x = tf.cast(tf.random.normal(shape), dtype)
    k = tf.cast(tf.random.normal([4, 4, 256, 256]), dtype)

    @tf.function
    def run():
        with tf.GradientTape() as tape:
            tape.watch([x, k])
            y = tf.nn.conv2d(x, k, 1, "VALID", data_format=data_format)
            loss = tf.reduce_sum(tf.cast(y, tf.float32))
        gx, gk = tape.gradient(loss, [x, k])
        return loss + tf.reduce_sum(tf.cast(gx, tf.float32)) + tf.reduce_sum(
            tf.cast(gk, tf.float32))
    return median_ms(lambda: run().numpy())


def main() -> None:
    for dtype in (tf.float32, tf.bfloat16):
        print(f"{dtype.name}: " + ", ".join(f"{fmt} {conv_ms(dtype, fmt)} ms"
                                             for fmt in ("NHWC", "NCHW")), flush=True)


if __name__ == "__main__":
    main()
