"""One training run, assembled: the trainer its strategy needs, the controller's parts, the run.

`train(exp, model_dir)` is what bin/train.py (and the tests and benchmarks) call:
the synchronous trainer (train/sync_trainer.py) under any synchronous strategy, the
asynchronous one (train/async_trainer.py) under parameter servers. It makes what the
controller (train/controller.py) is handed: the checkpointer, restored from the
newest checkpoint in model_dir; TensorFlow's preemption handler on MultiWorkerMirrored
workers; the summary writer and stats.jsonl (only the chief writes to model_dir, the
other workers of a multi-worker run still join the collective work, writing to
scratch folders); the sample-grid and evaluation actions; the profiler. It writes
operative_config.gin first and train_result.json last, and logs the final weights
digest (replicas must hold identical weights: anyone can compare workers' logs).
"""

from __future__ import annotations

import json
import os
from typing import Dict, List

from absl import logging
import tensorflow as tf

from paragan_tf.data import class_list
from paragan_tf.errors import ParameterServerLost
from paragan_tf.scale import memory as memory_lib
from paragan_tf.train import async_trainer
from paragan_tf.train import checkpoints
from paragan_tf.train import controller as controller_lib
from paragan_tf.train import experiment as experiment_lib
from paragan_tf.train import model_dir as model_dir_lib
from paragan_tf.train import preemption
from paragan_tf.train import profiling
from paragan_tf.train import run_files
from paragan_tf.train import sync_trainer
from paragan_tf.train import trainer as trainer_lib


def train(exp: experiment_lib.Experiment, model_dir: str) -> Dict[str, float]:
    """Trains `exp` in `model_dir` until train.total_steps; resumes from its newest checkpoint.

    Returns the last logged metrics plus `step` and `wall_seconds`. Raises Interrupted
    after saving when SIGTERM or SIGINT arrives, Diverged when the NaN guard gives up,
    ParameterServerLost when an asynchronous run loses its cluster.
    """
    model_dir = model_dir_lib.resolve(model_dir)
    if isinstance(exp.strategy, tf.distribute.experimental.ParameterServerStrategy):
        async_trainer.check_settings(exp)
        trainer = async_trainer.AsyncTrainer(exp)
        try:
            return _run(exp, model_dir, trainer)
        except (tf.errors.UnavailableError, tf.errors.CancelledError,
                tf.errors.AbortedError) as e:
            latest = model_dir_lib.latest_checkpoint(model_dir)
            finished = trainer.inflight.finished if trainer.inflight else "?"
            raise ParameterServerLost(
                f"lost the cluster at round {finished} ({type(e).__name__}: "
                f"{str(e).strip().splitlines()[0][:200]}); a parameter server is down or "
                f"unreachable; relaunch every task to resume from "
                f"{latest or 'the start (no checkpoint yet)'}") from None
    return _run(exp, model_dir, sync_trainer.SyncTrainer(exp))


def _run(exp: experiment_lib.Experiment, model_dir: str,
         trainer: trainer_lib.Trainer) -> Dict[str, float]:
    try:
        return assemble(exp, model_dir, trainer).run()  # closes the trainer
    finally:
        trainer.close()  # again, for a way out before the controller ran


def assemble(exp: experiment_lib.Experiment, model_dir: str,
             trainer: trainer_lib.Trainer) -> controller_lib.Controller:
    """The controller of `trainer` on `exp` in `model_dir`, its parts made (the newest
    checkpoint restored); running it trains."""
    cfg = exp.settings.train
    multi_worker = isinstance(exp.strategy, tf.distribute.MultiWorkerMirroredStrategy)
    is_chief = trainer.is_chief
    tf.io.gfile.makedirs(model_dir)
    logging.info("%s", class_list.describe(exp.source.class_names))
    class_list.keep_or_check(model_dir, exp.source.class_names, exp.settings.data.name,
                             write=is_chief)
    ckpt = checkpoints.Checkpointer(model_dir, cfg.max_to_keep, is_chief, trainer.task_id,
                                    **exp.trackables())
    # Multi-worker mirrored: SIGTERM is TensorFlow's handler's business, so that every
    # worker saves at the same step; this process then only handles SIGINT.
    handler = (preemption.MultiWorkerPreemption(exp.strategy, ckpt, cfg.max_to_keep,
                                                lambda: int(exp.step.numpy()))
               if multi_worker else None)
    restored = ckpt.restore_latest()
    writer = tf.summary.create_file_writer(
        model_dir if is_chief else os.path.join(model_dir, ".workers", str(trainer.task_id)))
    stats = run_files.Stats(model_dir, write=is_chief)
    if is_chief:
        run_files.write_config(model_dir, exp.operative_config, writer)
    if exp.mode.model_parallel:
        # Where the placement put G, EMA G, D and both optimizers' variables: measured.
        placed = memory_lib.bytes_by_device(
            list(exp.generator.variables) + list(exp.generator_ema.variables) +
            list(exp.discriminator.variables) + list(exp.g_optimizer.variables()) +
            list(exp.d_optimizer.variables()))
        logging.info("variables per device: %s", json.dumps(placed))
        stats.append("devices", int(exp.step.numpy()), {"variable_bytes": placed})
    if restored:
        logging.info("resumed from %s at %s %d, weights digest %s", restored, trainer.unit,
                     int(exp.step.numpy()), experiment_lib.weights_digest(exp))
    # Every worker evaluates and refreshes the grid's statistics (generation runs
    # collectives); the chief writes.
    evaluator = (exp.family.evaluator(experiment_lib.eval_subject(exp), model_dir,
                                      write=is_chief)
                 if exp.settings.eval.every_steps else None)
    return controller_lib.Controller(
        trainer, ckpt,
        controller_lib.Schedule(cfg.total_steps, cfg.real_images_per_step, cfg.log_every,
                                cfg.checkpoint_every, cfg.max_minutes,
                                cfg.max_consecutive_skips),
        writer=writer, stats=stats, actions=_actions(exp, model_dir, writer, stats, evaluator,
                                                     is_chief),
        preemption_handler=handler,
        profiler=profiling.StepProfiler(cfg.profile_steps if is_chief else 0, model_dir),
        on_end=lambda result: _finish(exp, model_dir, result, evaluator, is_chief))


def _finish(exp: experiment_lib.Experiment, model_dir: str, result: Dict[str, float],
            evaluator, is_chief: bool) -> None:
    logging.info("final weights digest %s", experiment_lib.weights_digest(exp))
    if is_chief:
        run_files.write_result(model_dir, result, evaluator.describe() if evaluator else None)


def _actions(exp: experiment_lib.Experiment, model_dir: str, writer, stats: run_files.Stats,
             evaluator, is_chief: bool) -> List[controller_lib.Action]:
    """The sample grids (before the checkpoint) and evaluations (of a checkpoint)."""
    cfg = exp.settings.train
    subject = experiment_lib.eval_subject(exp)

    def samples(step: int) -> None:
        path = os.path.join(model_dir, "samples", f"step_{step:07d}.png")
        exp.family.grid(subject, path, writer, step, write=is_chief)
        if is_chief:
            logging.info("samples: %s", path)

    def evaluate(step: int, checkpoint: str) -> Dict[str, float]:
        result = evaluator.evaluate(step, checkpoint, writer)
        stats.append("eval", step, dict(protocol=evaluator.protocol["name"], **result,
                                        **evaluator.timings))
        return result

    actions = [controller_lib.Action("samples", cfg.sample_every, samples)]
    if evaluator is not None:
        actions.append(controller_lib.Action("evaluation", exp.settings.eval.every_steps,
                                             evaluate, on_checkpoint=True))
    return actions
