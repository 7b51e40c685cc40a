"""The two updates of a train step as graphs, traced (nothing runs) as train/step.py
computes them: D's (G makes the fakes; D on fakes and reals in one call; D's gradients)
and G's (G, then D on its images; G's gradients through D's input gradient), G's ops
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


def update_graphs(generator, discriminator, recompute: bool = False) -> Dict[str, tf.Graph]:
    """{'d_update': its graph, 'g_update': its graph}: each update's loss and gradients,
    with the models' blocks rematerialised or not (the graphs' outputs are what the
    update returns)."""
    b = PROBE_BATCH
    size, channels = generator.resolution, generator.out_conv.filters
    z_spec = tf.TensorSpec([b, generator.dim_z], tf.float32)
    label_spec = tf.TensorSpec([b], tf.int32)
    image_spec = tf.TensorSpec([b, size, size, channels], tf.float32)

    def d_update(z, labels, images):
        with tf.device(SIDE_DEVICES["G"]):
            fakes = generator((z, labels), training=True)
        with tf.device(SIDE_DEVICES["D"]):
            fakes = tf.stop_gradient(fakes)
            with tf.GradientTape() as tape:
                logits = discriminator((tf.concat([tf.cast(fakes, images.dtype), images], 0),
                                        tf.concat([labels, labels], 0)), training=True)
                loss = tf.reduce_mean(tf.nn.relu(1.0 - logits))
            return loss, tape.gradient(loss, discriminator.trainable_variables)

    def g_update(z, labels):
        with tf.device(SIDE_DEVICES["G"]), tf.GradientTape() as g_tape:
            fakes = generator((z, labels), training=True)
        with tf.device(SIDE_DEVICES["D"]):
            with tf.GradientTape(watch_accessed_variables=False) as d_tape:
                d_tape.watch(fakes)
                loss = -tf.reduce_mean(discriminator((fakes, labels), training=True))
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
        return {"d_update": _graph(d_update, z_spec, label_spec, image_spec),
                "g_update": _graph(g_update, z_spec, label_spec)}
    finally:
        generator.recompute, discriminator.recompute = saved
        generator.block_devices, discriminator.block_devices = placed
