"""Training FLOPs of one train step, counted from the models' traced graphs (nothing runs).

TensorFlow's profiler counts the forward FLOPs of G and D (a multiply-add is 2)
on their traced graphs; backward passes are counted by the usual rule (a
weight+input backward is 2x its forward), except where the step computes
less: D's backward inside the G update needs input gradients only (1x). Per
update with k micro-batches of B examples per replica:

  D update  k * (G_fwd(B) + 3 * D_fwd(2B))       (fakes and reals: one D call, BigGAN's;
                                                 pix2pix's two on B each cost the same)
  G update  k * (3 * G_fwd(B) + 2 * D_fwd(B))     (2 * G_fwd(B) where the objective
                                                 reuses the last D update's images:
                                                 pix2pix's G runs once, its backward
                                                 left)

and a train step is `d_steps` D updates and one G update. Each network says what a call of
it takes (`call_inputs`), so every family counts alike. The step benchmark
(bin/bench.py --suite=step) divides this by the measured step time; the scale
plan (scale/plan.py) by a device's peak.

Every count is affine in the batch (per-example work plus a fixed part such as
spectral norm's power iteration), so `per_example()` traces batches of 1 and 2
and extrapolates exactly: the plan of a 2,048-example step does not trace it.
"""

from __future__ import annotations

import dataclasses
from typing import List, Tuple

import tensorflow as tf


def _conv_size(shapes) -> int:
    """Multiply-adds of a stride-1 SAME Conv2D from its (input, kernel) shapes."""
    (batch, height, width, _), kernel = shapes
    return batch * height * width * kernel[0] * kernel[1] * kernel[2] * kernel[3]


def _profile(fn, *specs) -> Tuple[int, Tuple[list, list]]:
    """(forward FLOPs of fn's graph, (input shape, kernel shape) of its largest Conv2D)."""
    graph = tf.function(fn, autograph=False).get_concrete_function(*specs).graph
    options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    level = tf.get_logger().level
    tf.get_logger().setLevel("ERROR")  # the v1 profiler's deprecation notices, every call
    try:
        total = tf.compat.v1.profiler.profile(graph=graph, options=options).total_float_ops
    finally:
        tf.get_logger().setLevel(level)
    convs = [tuple(t.shape.as_list() for t in op.inputs[:2])
             for op in graph.get_operations() if op.type == "Conv2D"]
    return total, max(convs, key=_conv_size)


@dataclasses.dataclass
class Forward:
    """Forward FLOPs at one per-replica batch B: G(B), D(B), D(2B), the largest conv."""

    batch: int
    g: int
    d: int
    d_both: int  # D on fakes and reals together (its update's call)
    dominant_conv: Tuple[List[int], List[int]]

    def train_step(self, d_steps: int, accumulation: int, reuses_fakes: bool = False) -> int:
        """One replica's FLOPs per train step (see the module doc)."""
        k, g_update = accumulation, (2 if reuses_fakes else 3) * self.g
        return d_steps * k * (self.g + 3 * self.d_both) + k * (g_update + 2 * self.d)


def forward(generator, discriminator, batch: int) -> Forward:
    """Forward FLOPs of the built models at `batch` examples per replica."""
    size, channels = generator.resolution, generator.out_channels
    g, g_conv = _profile(lambda x: generator(x, training=True), generator.call_inputs(batch))

    def d_at(n):
        return _profile(lambda x: discriminator(x, training=True),
                        discriminator.call_inputs(n, size, channels))
    (d, _), (d_both, d_conv) = d_at(batch), d_at(2 * batch)
    return Forward(batch, g, d, d_both, max(g_conv, d_conv, key=_conv_size))


def train_step_flops(exp) -> int:
    """One train step's FLOPs over all the replicas of a built experiment."""
    cfg, replicas = exp.settings.train, exp.strategy.num_replicas_in_sync
    count = forward(exp.generator, exp.discriminator, cfg.batch_size // replicas)
    return count.train_step(cfg.d_steps, cfg.accumulation,
                            exp.objective.reuses_fakes) * replicas


@dataclasses.dataclass
class PerExample:
    """Forward counts as fixed + per_example x batch (from batches 1 and 2)."""

    one: Forward
    two: Forward

    def at(self, batch: int) -> Forward:
        def affine(a, b):
            return a + (b - a) * (batch - 1)
        (n, h, w, c), kernel = self.one.dominant_conv
        return Forward(batch, affine(self.one.g, self.two.g), affine(self.one.d, self.two.d),
                       affine(self.one.d_both, self.two.d_both),
                       ([n * batch, h, w, c], kernel))


def per_example(generator, discriminator) -> PerExample:
    return PerExample(forward(generator, discriminator, 1),
                      forward(generator, discriminator, 2))
