"""Small data: does augmentation keep D from memorising 1,000 images? (--suite=small_data)

Every arm trains the default model (gin/quality_fashion_mnist.gin: the 32 px
BigGAN of `make train`, on Fashion-MNIST) on the first 100 training images of
each class (dataset.per_class_limit=100: 1,000 images) for the same number of
steps, one process on this machine, then evaluates the final EMA generator
with the Fashion-MNIST classifier (trained on all 60,000 images) against the
full test set (10,000 images):

  none               no augmentation
  diffaugment        DiffAugment color,translation,cutout (Zhao et al. 2020)
  ada                ADA, target r_t 0.6 (Karras et al. 2020)
  diffaugment_lecam  DiffAugment + LeCam, weight 0.3 (Tseng et al. 2021: their
                     10 %-CIFAR-10 BigGAN + DiffAugment script)

For each: FCD, intra-class FCD, precision, recall, conditional accuracy and
D's logit gap (its mean logit on the 1,000 training images minus on 1,000
held-out test images: the overfitting signal), steps, training seconds (the
run's own wall clock, start-up included) and the final sample grid's path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Callable, Dict, Optional, Sequence

from benchmarks import quality_runs
from paragan_tf.errors import ConfigError

CONFIG = "gin/quality_fashion_mnist.gin"
DATASET = "dataset.name='fashion_mnist'"  # also when `config` names another (the tests')
DIFFAUGMENT = "augment.policy='color,translation,cutout'"
ARMS = {"none": [],
        "diffaugment": [DIFFAUGMENT],
        "ada": ["augment.ada_target=0.6"],
        "diffaugment_lecam": [DIFFAUGMENT, "penalties.lecam_weight=0.3"]}
METRICS = {"fcd": "fcd", "intra_class_fcd": "intra_class_fcd", "precision": "precision",
           "recall": "recall", "conditional_accuracy": "conditional_accuracy",
           "logit_gap": "d_logit_gap"}


def _train(model_dir: str, config: str, bindings: Sequence[str]) -> dict:
    """bin/train.py to the end; its train_result.json (the log is next to model_dir)."""
    shutil.rmtree(model_dir, ignore_errors=True)
    argv = [sys.executable, quality_runs.binary("train.py"), f"--model_dir={model_dir}",
            f"--gin_file={config}"] + [f"--gin_bindings={b}" for b in bindings]
    with open(model_dir + ".log", "w") as log:
        code = subprocess.run(argv, cwd=quality_runs.REPO, stdout=log,
                              stderr=subprocess.STDOUT).returncode
    if code:
        raise RuntimeError(f"{os.path.basename(model_dir)} failed with exit code {code}; "
                           f"see {model_dir}.log")
    with open(os.path.join(model_dir, "train_result.json")) as f:
        return json.load(f)


def small_data(steps: int = 800, per_class: int = 100, arms: Sequence[str] = tuple(ARMS),
               eval_samples: int = 10000, eval_real: int = 10000,
               work_dir: Optional[str] = None, classifier_dir: Optional[str] = None,
               config: str = CONFIG, log_every: int = 50, classifier_epochs: int = 4,
               progress: Callable[[str], None] = print) -> dict:
    """Every arm for `steps` steps on `per_class` images of each class; JSON arms.<arm>.

    config, log_every, eval_*, classifier_epochs: the experiment, its evaluation and
    its classifier (the tests run gin/tiny.gin for a few steps).
    """
    unknown = set(arms) - set(ARMS)
    if unknown:
        raise ConfigError(f"unknown arms {sorted(unknown)}: choose from {list(ARMS)}")
    work_dir = os.path.abspath(work_dir or os.path.join(quality_runs.REPO, "runs", "bench",
                                                        "small_data"))
    classifier_dir = os.path.abspath(classifier_dir or os.path.join(work_dir, "classifier"))
    os.makedirs(work_dir, exist_ok=True)
    quality_runs.train_classifier(classifier_dir, config, classifier_epochs, progress,
                                  [DATASET])
    started = time.time()
    results: Dict[str, dict] = {}
    for arm in arms:
        model_dir = os.path.join(work_dir, arm)
        progress(f"{arm}: training {steps} steps (log: {model_dir}.log)")
        trained = _train(model_dir, config, ARMS[arm] + [
            DATASET, f"dataset.per_class_limit={per_class}",
            f"train.total_steps={steps}", f"train.log_every={log_every}",
            f"train.checkpoint_every={steps}", f"train.sample_every={steps}",
            "eval.every_steps=0"])
        final = quality_runs.evaluate(model_dir, classifier_dir, eval_samples, eval_real)
        result = {key: final[name] for key, name in METRICS.items()}
        result.update(steps=final["step"], seconds=trained["wall_seconds"],
                      protocol=final["protocol"],
                      grid=os.path.join(model_dir, "samples", f"step_{steps:07d}.png"))
        result.update({k: trained[k] for k in ("augment/p", "augment/rt") if k in trained})
        results[arm] = result
        progress(f"{arm}: {final['step']} steps in {trained['wall_seconds']:.0f} s, "
                 + ", ".join(f"{k} {result[k]:.3f}" for k in METRICS))
    return {"suite": "small_data", "config": config, "per_class": per_class, "steps": steps,
            "eval_samples": eval_samples, "eval_real": eval_real, "work_dir": work_dir,
            "seconds": time.time() - started, "arms": results}
