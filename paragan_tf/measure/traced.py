"""The two updates of a train step as graphs, traced from the step itself (nothing runs):
train/step.py's GANStep computes one micro-batch of D's update (G makes the fakes; D judges
them beside the reals, through the run's augmentation, with D's penalties; D's gradients)
and one of G's (G, then D on its images; G's gradients through D's input gradient), and
these are its own `d_micro` and `g_micro`, not a copy. G's ops carry one device label and
D's another (scale/graphs.py: the step's mode gives the scopes, here labels that only name
the ops). The memory plan replays the graphs (scale/memory.py); the roofline costs their
ops (scale/roofline.py).

R1 and R2 spaced out by `penalties.lazy_interval` run in a tf.cond that the replay and the
roofline would see as one op: the graphs are traced with the penalty due, the step that
holds the most (the roofline then counts it in every update: an upper bound at intervals
above 1).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Optional

import tensorflow as tf

from paragan_tf.distribute import mode as mode_lib
from paragan_tf.scale import graphs as graphs_lib
from paragan_tf.scale import memory as memory_lib
from paragan_tf.train import step as step_lib


class _Labels(mode_lib.Mode):
    """The default mode, its G and D scopes labelled with scale/graphs.py's devices."""

    def on_g(self):
        return tf.device(graphs_lib.SIDE_DEVICES["G"])

    def on_d(self):
        return tf.device(graphs_lib.SIDE_DEVICES["D"])


def _graph(fn, *specs) -> tf.Graph:
    # No autograph: the models have no tensor-dependent Python control flow, and
    # converting them triples the tracing time.
    return tf.function(fn, autograph=False).get_concrete_function(*specs).graph


def update_graphs(step: step_lib.GANStep, recompute: bool = False) -> graphs_lib.UpdateGraphs:
    """{'d_update': its graph, 'g_update': its graph}: one micro-batch of each of `step`'s
    updates at graphs_lib.PROBE_BATCH examples, their loss and gradients the graphs'
    outputs, with the models' blocks rematerialised or not."""
    generator, discriminator, objective = step.generator, step.discriminator, step.objective
    real_spec, noise_spec = objective.batch_specs(
        generator, graphs_lib.PROBE_BATCH, generator.resolution, generator.out_channels)
    labelled = copy.copy(step)
    labelled.mode = _Labels()

    def d_update(real, noise):
        loss, grads, _, _ = labelled.d_micro(real, noise)
        return loss, grads

    def g_update(noise, real=None):
        loss, grads, _ = labelled.g_micro(noise, real)
        return loss, grads

    saved = generator.recompute, discriminator.recompute
    # Traced unstaged: pipeline stages would place blocks on devices other than the two
    # sides' labels. A stage's plan is its blocks' share of its side's (memory.Plan.share).
    placed = generator.block_devices, discriminator.block_devices
    generator.recompute = discriminator.recompute = recompute
    generator.block_devices = discriminator.block_devices = ()
    terms = getattr(objective, "d_terms", None)  # BigGAN's penalties (objective/d_terms.py)
    spaced = terms.penalties if terms is not None else None
    try:
        if spaced is not None:
            terms.penalties = dataclasses.replace(spaced, lazy_interval=1)
        # G's update reads a real batch only where the objective pairs one with G's images.
        return {"d_update": _graph(d_update, real_spec, noise_spec),
                "g_update": _graph(g_update, noise_spec, *[real_spec][:objective.pairs_real])}
    finally:
        generator.recompute, discriminator.recompute = saved
        generator.block_devices, discriminator.block_devices = placed
        if spaced is not None:
            terms.penalties = spaced


def memory_plan(step: step_lib.GANStep, generator_ema, side_of, accumulation: int = 1,
                graphs: Optional[graphs_lib.UpdateGraphs] = None) -> memory_lib.Plan:
    """The per-replica memory plan (scale/memory.py) of `step`'s models and optimizers
    with `generator_ema`, its updates traced with the blocks kept (`graphs`, where already
    traced) and rematerialised; `side_of`: the parallel mode's (distribute/mode.py)."""
    return memory_lib.plan(step.generator, step.discriminator, generator_ema,
                           step.g_optimizer, step.d_optimizer, side_of=side_of,
                           graphs=graphs or update_graphs(step),
                           graphs_recompute=update_graphs(step, recompute=True),
                           accumulation=accumulation)
