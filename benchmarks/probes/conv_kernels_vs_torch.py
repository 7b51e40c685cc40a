"""Two of pix2pix's convolutions at the README recipe's shapes (batch 16 at 64 px), forward
and both gradients, timed alone in TensorFlow and in PyTorch on this CPU, float32 and
bfloat16: whether a gap in the whole step is in the convolution kernels themselves.

    .venv/bin/python benchmarks/probes/conv_kernels_vs_torch.py --framework=tensorflow
    /tmp/torchvenv/bin/python benchmarks/probes/conv_kernels_vs_torch.py --framework=torch

`up3`: the U-Net's transposed convolution from 4 x 4 x 512 to 8 x 8 x 128 (4 x 4 kernel,
stride 2); `d_conv3`: the PatchGAN's stride-1 convolution, 8 x 8 x 256 padded by one to
7 x 7 x 256. bfloat16: the tensors cast (TensorFlow), autocast (PyTorch). The median of 20
calls after 2, in milliseconds, with the machine's cores as threads. Each framework runs in
its own environment (torch is never a dependency of ours).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def median_ms(fn, calls: int = 20) -> float:
    fn()
    fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(1e3 * statistics.median(times), 2)


def tensorflow_times() -> dict:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    out = {}
    for name, dtype in (("float32", tf.float32), ("bfloat16", tf.bfloat16)):
        def probe(x, k, conv):
            x, k = tf.cast(x, dtype), tf.cast(k, dtype)

            @tf.function
            def run():
                with tf.GradientTape() as tape:
                    tape.watch([x, k])
                    loss = tf.reduce_sum(tf.cast(conv(x, k), tf.float32))
                gx, gk = tape.gradient(loss, [x, k])
                return loss + tf.reduce_sum(tf.cast(gx, tf.float32)) + tf.reduce_sum(
                    tf.cast(gk, tf.float32))
            return median_ms(lambda: run().numpy())
        out[name] = dict(
            up3=probe(tf.random.normal([16, 4, 4, 512]), tf.random.normal([4, 4, 128, 512]),
                      lambda x, k: tf.nn.conv2d_transpose(x, k, [16, 8, 8, 128], 2, "SAME")),
            d_conv3=probe(tf.random.normal([16, 10, 10, 256]),
                          tf.random.normal([4, 4, 256, 256]),
                          lambda x, k: tf.nn.conv2d(x, k, 1, "VALID")))
    return out


def torch_times() -> dict:
    import torch  # pylint: disable=import-outside-toplevel
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    out = {}
    for name in ("float32", "bfloat16"):
        def probe(module, x):
            def run():
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=name == "bfloat16"):
                    y = module(x)
                y.float().sum().backward()
            return median_ms(run)
        out[name] = dict(
            up3=probe(torch.nn.ConvTranspose2d(512, 128, 4, 2, 1, bias=False),
                      torch.randn(16, 512, 4, 4, requires_grad=True)),
            d_conv3=probe(torch.nn.Conv2d(256, 256, 4, 1, 1, bias=False),
                          torch.randn(16, 256, 8, 8, requires_grad=True)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", choices=("tensorflow", "torch"), required=True)
    args = parser.parse_args()
    times = tensorflow_times() if args.framework == "tensorflow" else torch_times()
    for precision, row in times.items():
        print(f"{args.framework} {precision}: " + ", ".join(f"{k} {v} ms" for k, v in row.items()),
              flush=True)


if __name__ == "__main__":
    main()
