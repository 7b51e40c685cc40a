"""Does evaluation scale across replicas? (--suite=eval_scaling)

The evaluator splits every batch of generation and feature extraction across
the strategy's replicas (eval/evaluator.py). This suite runs the quality
experiment (gin/quality_fashion_mnist.gin) under MultiWorkerMirroredStrategy
with 1 and then 2 workers, each pinned to its own core with one thread, for 4
steps with an evaluation of `samples` generated images after steps 2 and 4,
and reads the chief's stats.jsonl record of the second evaluation (the first
one also embeds the real images and traces): seconds in generation and
embedding (what the replicas share), in the whole evaluation, and in its other
phases (standing BN statistics, real features, the host's metrics, D's logit gap).
speedup = 1-worker seconds / 2-worker seconds.
"""

from __future__ import annotations

import os
import shutil
from typing import Callable, Optional

from benchmarks import cluster
from benchmarks import quality_runs
from paragan_tf.train import run_files

CONFIG = "gin/quality_fashion_mnist.gin"


def seconds(model_dir: str, step: int = 4) -> dict:
    """The timings of the evaluation at `step`, from the chief's stats.jsonl."""
    found = [r for r in run_files.read(model_dir, "eval") if r["step"] == step]
    if not found:
        raise RuntimeError(f"{model_dir}: no evaluation at step {step} in {run_files.FILE}")
    phases = dict(found[-1]["phases"])
    return {"eval_seconds": found[-1]["seconds"], "generate_seconds": phases.pop("generation"),
            "samples": found[-1]["samples"], "replicas": found[-1]["replicas"],
            "other_seconds": phases}


def eval_scaling(samples: int = 10000, classifier_dir: Optional[str] = None,
                 work_dir: Optional[str] = None, config: str = CONFIG,
                 progress: Callable[[str], None] = print) -> dict:
    """1 vs 2 workers: JSON workers_<n>.{eval_seconds, generate_seconds, ...}, speedups."""
    work_dir = os.path.abspath(work_dir or os.path.join(quality_runs.REPO, "runs", "bench",
                                                        "eval_scaling"))
    classifier_dir = os.path.abspath(classifier_dir or os.path.join(work_dir, "classifier"))
    os.makedirs(work_dir, exist_ok=True)
    quality_runs.train_classifier(classifier_dir, config, 4, progress)
    result = {"suite": "eval_scaling", "config": config, "samples": samples}
    for workers in (1, 2):
        name = f"workers_{workers}"
        shutil.rmtree(os.path.join(work_dir, name), ignore_errors=True)  # else it resumes
        progress(f"{workers} worker(s): 4 steps, evaluations of {samples} samples at steps "
                 f"2 and 4")
        cluster.run(name, work_dir, progress, [
            cluster.MWMS, "train.total_steps=4", "train.log_every=2",
            "train.checkpoint_every=4", "train.sample_every=4", "eval.every_steps=2",
            f"eval.classifier_path='{classifier_dir}'", f"eval.num_samples={samples}",
            "eval.num_real=10000"], config=config, num_workers=workers, cores_per_task=1)
        result[name] = seconds(os.path.join(work_dir, name))
        progress(f"{workers} worker(s): {result[name]}")
    one, two = result["workers_1"], result["workers_2"]
    result["generate_speedup"] = one["generate_seconds"] / two["generate_seconds"]
    result["eval_speedup"] = one["eval_seconds"] / two["eval_seconds"]
    return result
