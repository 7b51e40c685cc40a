"""What the plans say of a built experiment: its two updates traced from its own train step
(measure/traced.py), its memory plan per replica and per device (scale/memory.py), the
scale plan's Model of it (scale/plan.py), the dry run's plan line, and its step timed on
this machine's devices (`measure_step`, which bin/plan.py --calibrate records:
scale/measured.py). It builds experiments, so it sits in the measuring package above
train/ (docs/architecture.md); scale/ below holds the arithmetic.

The dry run (bin/train.py --dry_run) and bin/plan.py read these; the experiment itself is
built by train/experiment.py.
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
from typing import Callable, Dict, Optional, Sequence, Tuple

import tensorflow as tf

from paragan_tf.distribute import mode as mode_lib
from paragan_tf.errors import ConfigError
from paragan_tf.measure import step_timer
from paragan_tf.measure import traced
from paragan_tf.measure import tuning as layout_tuning
from paragan_tf import models
from paragan_tf.scale import flops as flops_lib
from paragan_tf.scale import graphs as graphs_lib
from paragan_tf.scale import memory as memory_lib
from paragan_tf.scale import measured
from paragan_tf.scale import plan as plan_lib
from paragan_tf.scale import roofline
from paragan_tf.train import experiment as experiment_lib
from paragan_tf.train import step as step_lib
from paragan_tf.train import sync_trainer

# Strategies whose devices all belong to this one process: what one timing can measure.
MEASURABLE_KINDS = ("one_device", "mirrored", "tpu")


def update_graphs(exp: experiment_lib.Experiment,
                  recompute: bool = False) -> graphs_lib.UpdateGraphs:
    """The built run's two updates, traced from its own train step (measure/traced.py)."""
    return traced.update_graphs(step_lib.for_experiment(exp), recompute)


def memory_of(exp: experiment_lib.Experiment,
              graphs: Optional[graphs_lib.UpdateGraphs] = None) -> memory_lib.Plan:
    """The per-replica memory plan of the built run (scale/memory.py; traces, runs nothing;
    `graphs`: its updates already traced without recompute, update_graphs)."""
    return traced.memory_plan(step_lib.for_experiment(exp), exp.generator_ema,
                              exp.mode.side_of, exp.settings.train.accumulation, graphs)


def memory_plan(exp: experiment_lib.Experiment, memory_gib: Optional[float] = None,
                plan: Optional[memory_lib.Plan] = None) -> dict:
    """Per-replica memory of this run (`plan`, or memory_of(exp)); the largest batch
    fitting `memory_gib` GiB, or the detected device's memory when None."""
    plan = plan or memory_of(exp)
    budget = (int(memory_gib * memory_lib.GIB) if memory_gib
              else memory_lib.device_memory_bytes(exp.layout.hardware.accelerator))
    cfg = exp.settings.train
    report = plan.report(cfg.batch_size // exp.strategy.num_replicas_in_sync, budget)
    report["recompute"] = cfg.recompute
    if exp.mode.spread:
        batch = cfg.batch_size // exp.strategy.num_replicas_in_sync
        report["devices"] = {
            where: part.report(batch, budget) for where, part in exp.mode.device_plans(
                exp.generator, exp.discriminator, plan, batch).items()}
    report["memory_source"] = ("--memory_gib" if memory_gib else
                               f"detected {exp.layout.hardware.accelerator}" if budget else
                               "unknown: pass --memory_gib")
    return report


def _planned_settings() -> experiment_lib.Settings:
    """The parsed gin config's settings with the cheapest initialiser: a plan reads the
    models' shapes, never their weights' values."""
    settings = experiment_lib.Settings.read()
    return dataclasses.replace(settings, model=dataclasses.replace(settings.model, init="N02"))


def _built_here(settings: experiment_lib.Settings) -> experiment_lib.Experiment:
    return experiment_lib.build(strategy=tf.distribute.OneDeviceStrategy("/cpu:0"),
                                check_data=False, settings=settings)


def step_cost() -> roofline.StepCost:
    """The roofline of the parsed (unfinalised) gin config's train step (scale/roofline.py):
    its models built on this host, both updates traced, nothing run."""
    return roofline.cost_of(update_graphs(_built_here(_planned_settings())))


def step_cost_and_memory() -> Tuple[roofline.StepCost, memory_lib.Plan]:
    """step_cost() and the per-replica memory plan of the same build, its updates traced
    once for both: what a measured step's seconds and peak memory are set against."""
    exp = _built_here(_planned_settings())
    graphs = update_graphs(exp)
    return roofline.cost_of(graphs), memory_of(exp, graphs)


def plan_model(precisions: Sequence[str],
               progress: Callable[[str], None] = print) -> plan_lib.Model:
    """What the scale plan needs of the parsed (unfinalised) gin config: its models built
    once per precision in `precisions` on this host (nothing trains), their memory
    plans, the costs of their step's ops and FLOP counts (scale/plan.py)."""
    settings = _planned_settings()
    memory, costs, exp = {}, {}, None
    for precision in precisions:
        progress(f"building the models at {precision}")
        # One build at a time: BigGAN-128's weights and Adam slots are ~2.5 GB a build, and
        # Keras models hold reference cycles that only the collector frees.
        exp = None
        gc.collect()
        exp = _built_here(dataclasses.replace(settings, layout=dataclasses.replace(
            settings.layout, precision=precision)))
        progress(f"tracing the memory plan at {precision}")
        # Traced once for both: the memory plan replays the updates, the roofline costs them.
        graphs = update_graphs(exp)
        memory[precision] = memory_of(exp, graphs)
        progress(f"costing the step's ops at {precision}")
        costs[precision] = roofline.cost_of(graphs)
    progress("counting the train step's FLOPs")
    return dataclasses.replace(model_of(exp, memory, settings.layout.precision),
                               roofline=costs)


def configured_precision() -> str:
    """layout.precision as the parsed gin config sets it ('auto' when it does not)."""
    return experiment_lib.Settings.configured_precision()


def model_of(exp: experiment_lib.Experiment, memory: Dict[str, memory_lib.Plan],
             precision: str) -> plan_lib.Model:
    """A built experiment and its memory plans per precision, as the scale plan's Model."""
    cfg = exp.settings.train
    return plan_lib.Model(
        precision=precision, memory=memory,
        flops=flops_lib.per_example(exp.generator, exp.discriminator),
        g_params=models.count_trainable(exp.generator),
        d_params=models.count_trainable(exp.discriminator),
        effective_batch=cfg.batch_size * cfg.accumulation, d_steps=cfg.d_steps,
        total_steps=cfg.total_steps,
        image_bytes=4 * exp.settings.data.resolution ** 2 * exp.source.channels,
        reuses_fakes=exp.objective.reuses_fakes,
        g_blocks=tuple(exp.generator.block_shapes),
        d_blocks=tuple(exp.discriminator.block_shapes),
        g_block_costs=tuple(exp.generator.block_costs(mode_lib.PLAN_BATCH)),
        d_block_costs=tuple(exp.discriminator.block_costs(mode_lib.PLAN_BATCH)),
        network=measured.network(layout_tuning.step_shape(exp.settings, precision)))


def plan_line(exp: experiment_lib.Experiment, memory: memory_lib.Plan) -> str:
    """--dry_run's one line: the plan of this run on the hardware it was built on."""
    precision = exp.layout.precision
    return plan_lib.detected_line(model_of(exp, {precision: memory}, precision),
                                  exp.layout.hardware.accelerator,
                                  exp.strategy.num_replicas_in_sync)


def measure_step(gin_files: Sequence[str], bindings: Sequence[str], steps: int,
                 progress: Callable[[str], None] = print) -> dict:
    """The median seconds of `steps` train steps (after 2 warm-up steps: tracing, XLA) of
    the gin config built as bin/train.py builds it here (its strategy; stand-in pixels of
    the same shape when its data is not on this machine), with the FLOPs (scale/flops.py)
    and the bytes moved (scale/roofline.py) of the step over all its replicas: what
    scale/measured.py records. The layout is the rules' (layout/rules.py: on a GPU or TPU,
    XLA and the auto precision): a process that has loaded TensorFlow cannot take a tuned
    layout's oneDNN and thread settings."""
    if steps < 1:
        raise ConfigError(f"--calibrate_steps={steps}: time at least 1 step")
    experiment_lib.parse(gin_files, bindings)
    kind = experiment_lib.Settings.read().strategy.kind
    if kind not in MEASURABLE_KINDS:
        raise ConfigError(f"--calibrate times the devices of one process: strategy.kind "
                          f"{kind!r} spans processes; calibrate one host with one of "
                          f"{list(MEASURABLE_KINDS)}")
    exp, data = experiment_lib.build_or_stand_in(gin_files, bindings)
    trainer = sync_trainer.SyncTrainer(exp)
    times = step_timer.time_steps(trainer, steps, warmup=2, progress=progress,
                                  label="calibrating").seconds
    trainer.close()
    precision, cfg = exp.layout.precision, exp.settings.train
    replicas = exp.strategy.num_replicas_in_sync
    moved = roofline.cost_of(update_graphs(exp)).totals(
        cfg.batch_size // replicas, cfg.d_steps, cfg.accumulation)["bytes"]
    return dict(hardware=exp.layout.hardware, precision=precision, data=data,
                step=layout_tuning.step_shape(exp.settings, precision),
                train_step_flops=flops_lib.train_step_flops(exp),
                train_step_bytes=moved * replicas, replicas=replicas,
                seconds_per_step=statistics.median(times), step_seconds=times)
