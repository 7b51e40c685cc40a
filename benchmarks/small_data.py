"""Small data: does augmentation keep D from memorising a few hundred images? (--suite=small_data)

Every arm trains the default model and recipe (gin/mnist_default.gin, `make
train`'s) on Fashion-MNIST, on the first `per_class` training images of each
class (dataset.per_class_limit; default 50: 500 images), for the same number of
steps, one process on this machine, with a checkpoint every `mark_steps`:

  none               no augmentation
  diffaugment        DiffAugment color,translation,cutout (Zhao et al. 2020)
  ada                ADA, target r_t 0.6 (Karras et al. 2020), p from 0 to 1 in
                     10,000 real images (the run sees ~100,000)
  diffaugment_lecam  DiffAugment + LeCam, weight 0.3 (Tseng et al. 2021: their
                     10 %-CIFAR-10 BigGAN + DiffAugment script)

After each run every checkpoint's EMA generator is scored (bin/eval.py --watch,
off the training clock) with the Fashion-MNIST classifier (trained on all 60,000
images) against the test set: FCD, intra-class FCD, precision, recall,
conditional accuracy and D's logit gap (its mean logit on the training images
minus on as many held-out test images: the overfitting signal, which grows as D
memorises). The curve per arm: step, training seconds, real images seen, those
metrics, and ADA's p and r_t where the arm has them (stats.jsonl at that step).
The last checkpoint also gets FID on the standard Inception network
(`fid_samples` generated vs as many test images; 0: no FID).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

from benchmarks import quality_runs
from benchmarks import time_to_quality
from paragan_tf.errors import ConfigError
from paragan_tf.train import run_files

CONFIG = "gin/mnist_default.gin"
DATASET = "dataset.name='fashion_mnist'"  # also when `config` names another (the tests')
DIFFAUGMENT = "augment.policy='color,translation,cutout'"
ARMS = {"none": [],
        "diffaugment": [DIFFAUGMENT],
        # The reference's 500 kimg (p from 0 to 1) suits its 25,000-kimg runs; over this
        # suite's ~100 kimg it let p reach 0.001 while r_t crossed 0.6 (2026-11-26).
        "ada": ["augment.ada_target=0.6", "augment.ada_speed_kimg=10"],
        "diffaugment_lecam": [DIFFAUGMENT, "penalties.lecam_weight=0.3"]}
METRICS = {"fcd": "fcd", "intra_class_fcd": "intra_class_fcd", "precision": "precision",
           "recall": "recall", "conditional_accuracy": "conditional_accuracy",
           "logit_gap": "d_logit_gap"}
ADA = ("augment/p", "augment/rt")


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


def _curve(model_dir: str) -> List[dict]:
    """time_to_quality's curve with every METRICS entry, plus ADA's state at each mark."""
    ada = {r["step"]: {k: r[k] for k in ADA if k in r} for r in run_files.read(model_dir, "log")}
    points = time_to_quality.curve(model_dir, tuple(METRICS.values()))
    for point in points:
        point["logit_gap"] = point.pop("d_logit_gap")
        point.update(ada.get(point["step"], {}))
    return points


def small_data(steps: int = 1600, per_class: int = 50, arms: Sequence[str] = tuple(ARMS),
               mark_steps: int = 400, eval_samples: int = 5000, eval_real: int = 10000,
               fid_samples: int = 1000, work_dir: Optional[str] = None,
               classifier_dir: Optional[str] = None, config: str = CONFIG,
               log_every: int = 50, classifier_epochs: int = 4,
               progress: Callable[[str], None] = print) -> dict:
    """Every arm for `steps` steps on `per_class` images of each class; JSON arms.<arm>.

    config, log_every, eval_*, classifier_epochs: the experiment, its evaluation and
    its classifier (the tests run gin/tiny.gin for a few steps).
    """
    unknown = set(arms) - set(ARMS)
    if unknown:
        raise ConfigError(f"unknown arms {sorted(unknown)}: choose from {list(ARMS)}")
    if not 0 < mark_steps <= steps or steps % log_every or mark_steps % log_every:
        raise ConfigError(f"small_data: mark_steps ({mark_steps}) must be in (0, steps "
                          f"({steps})], and both multiples of log_every ({log_every})")
    work_dir = os.path.abspath(work_dir or os.path.join(quality_runs.REPO, "runs", "bench",
                                                        "small_data"))
    classifier_dir = os.path.abspath(classifier_dir or os.path.join(work_dir, "classifier"))
    os.makedirs(work_dir, exist_ok=True)
    quality_runs.train_classifier(classifier_dir, config, classifier_epochs, progress,
                                  [DATASET])
    reference = None
    if fid_samples:
        reference = os.path.join(work_dir, f"inception_reference_{fid_samples}.npz")
        time_to_quality.reference_stats(reference, config, [DATASET], fid_samples, progress)
    started = time.time()
    results: Dict[str, dict] = {}
    for arm in arms:
        model_dir = os.path.join(work_dir, arm)
        progress(f"{arm}: training {steps} steps (log: {model_dir}.log)")
        trained = _train(model_dir, config, ARMS[arm] + [
            DATASET, f"dataset.per_class_limit={per_class}",
            f"train.total_steps={steps}", f"train.log_every={log_every}",
            f"train.checkpoint_every={mark_steps}", "train.max_to_keep=1000",
            f"train.sample_every={mark_steps}", "eval.every_steps=0"])
        progress(f"{arm}: scoring every checkpoint of {model_dir}")
        time_to_quality.score(model_dir, classifier_dir, eval_samples, eval_real)
        curve = _curve(model_dir)
        final = curve[-1]
        result = {key: final[key] for key in METRICS}
        result.update(steps=final["step"], seconds=trained["wall_seconds"],
                      protocol=final["protocol"], curve=curve,
                      grid=os.path.join(model_dir, "samples", f"step_{steps:07d}.png"))
        result.update({k: trained[k] for k in ADA if k in trained})
        if reference:
            result["fid"] = time_to_quality.fid(model_dir, reference, fid_samples,
                                                fid_samples)
        results[arm] = result
        progress(f"{arm}: {final['step']} steps in {trained['wall_seconds']:.0f} s, "
                 + ", ".join(f"{k} {result[k]:.3f}" for k in METRICS)
                 + (f", FID {result['fid']['fid']:.2f}" if reference else ""))
    return {"suite": "small_data", "config": config, "per_class": per_class, "steps": steps,
            "mark_steps": mark_steps, "eval_samples": eval_samples, "eval_real": eval_real,
            "fid_samples": fid_samples, "work_dir": work_dir,
            "seconds": time.time() - started, "arms": results}
