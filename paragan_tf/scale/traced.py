"""The two updates of a train step as graphs, traced (nothing runs) as train/step.py
computes them through the run's objective (its GAN family's: paragan_tf/families/): D's
(G makes the fakes; D judges them beside the reals; D's gradients) and G's (G, then D on
its images; G's gradients through D's input gradient), G's ops
labelled with one device and D's with another (as model_parallel.placement='split' would
place them; the labels only name the ops). The memory plan replays them (scale/memory.py);
the roofline costs their ops (scale/roofline.py).

They are traced at PROBE_BATCH examples: a tensor whose leading axis is that batch (or
twice it, D's reals and fakes together) is per-example, the rest fixed.
"""

from __future__ import annotations

from typing import Dict

import tensorflow as tf

PROBE_BATCH = 7  # odd and prime: no kernel, channel or class axis is mistaken for it
BATCH_AXES = {PROBE_BATCH, 2 * PROBE_BATCH}
# Ops whose output is their first input's buffer (a view: no allocation, no traffic).
ALIASES = {"Identity", "IdentityN", "StopGradient", "Reshape", "ExpandDims", "Squeeze",
           "Snapshot", "EnsureShape"}
# Device labels of G's and D's ops in the traced updates.
SIDE_DEVICES = {"G": "/device:CPU:0", "D": "/device:CPU:1"}


def _graph(fn, *specs) -> tf.Graph:
    # No autograph: the models have no tensor-dependent Python control flow, and
    # converting them triples the tracing time.
    return tf.function(fn, autograph=False).get_concrete_function(*specs).graph


def update_graphs(generator, discriminator, objective,
                  recompute: bool = False) -> Dict[str, tf.Graph]:
    """{'d_update': its graph, 'g_update': its graph}: each update's loss and gradients
    as `objective` computes them, with the models' blocks rematerialised or not (the
    graphs' outputs are what the update returns)."""
    real_spec, noise_spec = objective.batch_specs(
        generator, PROBE_BATCH, generator.resolution, generator.out_channels)

    def d_update(real, noise):
        with tf.device(SIDE_DEVICES["G"]):
            fakes = objective.generate(generator, real, noise)
        with tf.device(SIDE_DEVICES["D"]):
            fakes = tf.stop_gradient(fakes)
            with tf.GradientTape() as tape:
                real_logits, fake_logits, seen = objective.judge(discriminator, fakes, real,
                                                                 noise)
                loss = tf.reduce_mean(objective.d_loss(real_logits, fake_logits, seen, noise))
            return loss, tape.gradient(loss, discriminator.trainable_variables)

    def g_update(noise, real=None):
        with tf.device(SIDE_DEVICES["G"]), tf.GradientTape() as g_tape:
            fakes = objective.generate(generator, real, noise)
        with tf.device(SIDE_DEVICES["D"]):
            with tf.GradientTape(watch_accessed_variables=False) as d_tape:
                d_tape.watch(fakes)
                gen_logits, real_logits = objective.judge_fakes(discriminator, fakes, real,
                                                                noise)
                loss = tf.reduce_mean(objective.g_loss(gen_logits, real_logits, fakes, real))
            fake_grads = d_tape.gradient(loss, fakes)
        with tf.device(SIDE_DEVICES["G"]):
            return loss, g_tape.gradient(fakes, generator.trainable_variables,
                                         output_gradients=fake_grads)

    saved = generator.recompute, discriminator.recompute
    # Traced unstaged: pipeline stages would place blocks on devices other than the two
    # sides' labels. A stage's plan is its blocks' share of its side's (memory.Plan.share).
    placed = generator.block_devices, discriminator.block_devices
    generator.recompute = discriminator.recompute = recompute
    generator.block_devices = discriminator.block_devices = ()
    try:
        # G's update reads a real batch only where the objective pairs one with G's images.
        return {"d_update": _graph(d_update, real_spec, noise_spec),
                "g_update": _graph(g_update, noise_spec, *[real_spec][:objective.pairs_real])}
    finally:
        generator.recompute, discriminator.recompute = saved
        generator.block_devices, discriminator.block_devices = placed
