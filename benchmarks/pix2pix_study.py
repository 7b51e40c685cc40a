"""The pix2pix feature study of docs/benchmarks.md (--suite=pix2pix_study): one arm per
feature, as the study of ../shared/seeds measured them (baseline, data parallelism, mixed
precision, accumulation over 4 steps, clipping at norm 2, sharded optimizer state), each
training the same epochs of the same pairs through the product's own binaries:

  baseline          one process on both cores, float32 (gin/layouts/fp32.gin's numerics)
  data_parallel     2 MultiWorkerMirrored processes on 127.0.0.1, one core each, the same
                    global batch
  mixed_precision   the baseline in mixed_bfloat16 (this CPU's mixed precision; float16 is
                    emulated on a CPU, and no GPU is at hand)
  accumulation      the baseline with train.accumulation=4: an update per 4 micro-batches
  clipping          the baseline with train.clip_norm=2
  sharded_state     data_parallel with Adam's moments 1/2 per worker
                    (model_parallel.shard_optimizer, ZeRO stage 1)

Per arm: seconds per epoch (from the run's first to its last progress record, start-up and
tracing left out, scaled to an epoch's steps), the peak resident memory of the largest
training process (one replica each; sampled from /proc every 0.1 s by
benchmarks/memory_sampler.py), the bytes of the variables and optimizer state per device
where the run records them (sharded state), the last progress record's losses, and the
validation L1, PSNR, SSIM and FID of families/pix2pix/evaluator.py beside the identity's L1 (input
copied to output), measured by bin/eval.py on the final checkpoint in a process of its own
(so that the FID Inception's memory is not counted as training's).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional

from benchmarks import memory_sampler
from paragan_tf.errors import ConfigError
from paragan_tf.train import run_files

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = "gin/pix2pix_fashion_mnist_edges.gin"
EPOCH_PAIRS = 2560  # the first pairs of the training split: 160 steps of 16, 40 updates of 64
BATCH = 16
FP32 = ["layout.precision='float32'", "layout.xla='off'", "layout.tune='off'",
        "layout.round_channels=False"]
MWMS = ["strategy.kind='multi_worker_mirrored'"]
ARMS: Dict[str, List[str]] = {
    "baseline": [],
    "data_parallel": MWMS,
    "mixed_precision": ["layout.precision='mixed_bfloat16'"],
    "accumulation": ["train.accumulation=4"],
    "clipping": ["train.clip_norm=2.0"],
    "sharded_state": MWMS + ["model_parallel.shard_optimizer=True"],
}
# The study's own numbers (pix2pix on facades, batch 1, one GPU), for the table beside ours.
STUDY = {"baseline": 40.38, "data_parallel": 37.84}


def _run(command: List[str], log_path: str) -> int:
    """Runs `command` from the repository root; the peak resident bytes of its largest
    process. Raises RuntimeError with the log's tail when it fails."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, cwd=_REPO, stdout=log, stderr=subprocess.STDOUT,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
        sampler = memory_sampler.Sampler(proc.pid)
        sampler.start()
        code = proc.wait()
        peak = sampler.stop().peak_each
    if code:
        with open(log_path) as f:
            raise RuntimeError(f"{command[1]} failed (exit {code}):\n{f.read()[-3000:]}")
    return peak


def epoch_seconds(model_dir: str, steps_per_epoch: float) -> float:
    """Seconds per epoch between the run's first and last progress records."""
    logged = run_files.read(model_dir, "log")
    if len(logged) < 2:
        raise RuntimeError(f"{model_dir}: fewer than 2 progress records to time by")
    first, last = logged[0], logged[-1]
    return (last["time"] - first["time"]) / (last["step"] - first["step"]) * steps_per_epoch


def arm(name: str, work_dir: str, epochs: int, progress: Callable[[str], None],
        config: str = CONFIG, epoch_pairs: int = EPOCH_PAIRS, batch: int = BATCH,
        eval_pairs: int = 200) -> dict:
    """One arm of the study: trains `epochs` epochs of `config` with the arm's settings."""
    accumulation = 4 if "train.accumulation=4" in ARMS[name] else 1
    steps_per_epoch = epoch_pairs / (batch * accumulation)
    steps = int(round(epochs * steps_per_epoch))
    every = max(1, int(steps_per_epoch // 4))
    bindings = FP32 + ARMS[name] + [
        f"dataset.split='train[:{epoch_pairs}]'", f"train.batch_size={batch}",
        f"train.total_steps={steps}", f"train.steps_per_loop={every}",
        f"train.log_every={every}", f"train.checkpoint_every={steps}",
        "train.sample_every=0", f"eval.num_real={eval_pairs}"]
    model_dir = os.path.join(work_dir, name)
    flags = [f"--gin_file={config}"] + [f"--gin_bindings={b}" for b in bindings]
    if name in ("data_parallel", "sharded_state"):
        command = [sys.executable, os.path.join(_REPO, "bin", "launch_local.py"),
                   f"--model_dir={model_dir}", "--num_workers=2", "--cores_per_task=1",
                   "--threads_per_task=1", *flags]
    else:
        command = [sys.executable, os.path.join(_REPO, "bin", "train.py"),
                   f"--model_dir={model_dir}", *flags]
    progress(f"{name}: {epochs} epoch(s) of {epoch_pairs} pairs, {steps} steps")
    began = time.perf_counter()
    peak = _run(command, model_dir + ".log")
    with open(os.path.join(model_dir, "train_result.json")) as f:
        result = json.load(f)
    progress(f"{name}: evaluating the final checkpoint")
    _run([sys.executable, os.path.join(_REPO, "bin", "eval.py"), f"--model_dir={model_dir}"],
         model_dir + ".eval.log")
    with open(os.path.join(model_dir, "eval", "metrics.json")) as f:
        evaluation = json.load(f)["evaluations"][-1]
    row = dict(bindings=ARMS[name], steps=steps, accumulation=accumulation,
               seconds_per_epoch=round(epoch_seconds(model_dir, steps_per_epoch), 2),
               wall_seconds=round(time.perf_counter() - began, 1),
               peak_rss_gib=round(peak / 2 ** 30, 3),
               final_losses={k: round(result[k], 4) for k in ("loss/D", "loss/G")},
               validation={k: round(evaluation[k], 4)
                           for k in ("l1", "l1_identity", "psnr", "ssim", "fid")})
    placed = run_files.read(model_dir, "devices")
    if placed:  # variables and optimizer state per device, under sharding
        row["variable_gib_per_device"] = {d: round(b / 2 ** 30, 4) for d, b in
                                          placed[-1]["variable_bytes"].items()}
    progress(f"{name}: {row['seconds_per_epoch']} s per epoch, peak {row['peak_rss_gib']} GiB, "
             f"val L1 {row['validation']['l1']} (identity {row['validation']['l1_identity']})")
    return row


def pix2pix_study(progress: Callable[[str], None] = print, epochs: int = 2,
                  arms: Optional[List[str]] = None, work_dir: Optional[str] = None,
                  **options) -> dict:
    """Every arm in `arms` (default: all), one after the other."""
    arms = list(arms or ARMS)
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        raise ConfigError(f"unknown pix2pix_study arms {unknown}; choose from {list(ARMS)}")
    tmp = tempfile.mkdtemp(dir=work_dir)
    try:
        rows = {name: arm(name, tmp, epochs, progress, **options) for name in arms}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"suite": "pix2pix_study", "config": options.get("config", CONFIG),
            "epochs": epochs, "epoch_pairs": options.get("epoch_pairs", EPOCH_PAIRS),
            "batch": options.get("batch", BATCH), "layout": FP32,
            "study_seconds_per_epoch": STUDY, "arms": rows}
