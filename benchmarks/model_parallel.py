"""Where each model-parallel mode puts the bytes, and what its step costs, on this host
(--suite=model_parallel).

Every mode trains gin/bench_cluster.gin (BigGAN at 32x32, ch 32, batch 32, D steps 2) in
the float32 layout (gin/layouts/fp32.gin's bindings: the same numerics in every mode,
nothing tuned)
through the product's own binaries. In one process (bin/train.py), on logical CPU devices
(distribute/placement.py splits the CPU):

  data       one_device: G and D on one device (today's default)
  split      model_parallel.placement='split': G on CPU:0, D on CPU:1
  stages2    the split with model_parallel.stages=2: each network's blocks over 2 devices
  mirrored   mirrored on 2 logical CPUs: 2 replicas, keras' Adam
  shard      the same, model_parallel.shard_optimizer=True: Adam's moments 1/2 per replica

and on a 2-process cluster on 127.0.0.1 (bin/launch_local.py machinery, each worker
pinned to its own core with one intra-op thread, as the cluster suites run):

  mwms        multi_worker_mirrored, one replica per worker
  mwms_split  the hybrid: each worker one replica on two logical CPUs, G and D apart
  mwms_shard  Adam's moments 1/2 per worker

Per mode:
- measured: the bytes of the variables on each device of a process (weights, EMA copy,
  optimizer state, each copy on its device: the run's "devices" record in stats.jsonl,
  the chief's on a cluster; its workers are alike), and the seconds per step between the
  run's first and last progress records (start-up and tracing left out);
- planned (one-process modes): the memory plan per device, `bin/train.py --dry_run`'s
  `memory.devices` under a spread placement, the replica's whole plan otherwise.

What this host cannot show: the logical devices share the machine's two cores, so the
step times are the cost of the placement's extra ops and copies, not the overlap that
separate accelerators would give; TensorFlow's CPU allocator serves every logical device
at once, so no per-device peak is measured, only where the variables went.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Callable, Dict, List, Optional

from benchmarks import cluster
from paragan_tf.errors import ConfigError
from paragan_tf.train import run_files

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = "gin/bench_cluster.gin"
# gin/layouts/fp32.gin's settings: every mode the same numerics, nothing tuned.
FP32 = ["layout.precision='float32'", "layout.xla='off'", "layout.round_channels=False"]
SPLIT = "model_parallel.placement='split'"
SHARD = "model_parallel.shard_optimizer=True"
MIRRORED = ["strategy.kind='mirrored'", "strategy.num_logical_cpus=2"]
ONE_PROCESS = {"data": [], "split": [SPLIT], "stages2": [SPLIT, "model_parallel.stages=2"],
               "mirrored": MIRRORED, "shard": MIRRORED + [SHARD]}
CLUSTER = {"mwms": [], "mwms_split": [SPLIT], "mwms_shard": [SHARD]}
MODES = tuple(ONE_PROCESS) + tuple(CLUSTER)


def _bindings(steps: int, log_every: int) -> List[str]:
    return [f"train.total_steps={steps}", f"train.log_every={log_every}"]


def variables_per_device(model_dir: str) -> Optional[Dict[str, float]]:
    """GiB of variables per device, from the run's "devices" record (None: no record, as
    without a model-parallel setting)."""
    records = run_files.read(model_dir, "devices")
    if not records:
        return None
    return {device: round(b / 2 ** 30, 6)
            for device, b in records[-1]["variable_bytes"].items()}


def step_seconds(model_dir: str) -> float:
    """Seconds per step between the first and the last progress record."""
    logged = run_files.read(model_dir, "log")
    if len(logged) < 2:
        raise RuntimeError(f"{model_dir}: fewer than 2 progress records to time by")
    first, last = logged[0], logged[-1]
    return (last["time"] - first["time"]) / (last["step"] - first["step"])


def _train_py(args: List[str], what: str) -> str:
    """bin/train.py with `args` from the repository root; its combined output."""
    child = subprocess.run([sys.executable, os.path.join(_REPO, "bin", "train.py"), *args],
                           cwd=_REPO, capture_output=True, text=True, check=False,
                           env=dict(os.environ, PYTHONUNBUFFERED="1"))
    output = child.stdout + child.stderr
    if child.returncode:
        raise RuntimeError(f"model_parallel: {what} failed (exit {child.returncode}):\n"
                           f"{output[-3000:]}")
    return output


def one_process(mode: str, work_dir: str, steps: int, log_every: int,
                progress: Callable[[str], None], config: str = CONFIG) -> dict:
    """The dry run's plan and a training run's variables and step time, in one process."""
    gin = [f"--gin_file={config}"] + [
        f"--gin_bindings={b}" for b in FP32 + ONE_PROCESS[mode] + _bindings(steps, log_every)]
    progress(f"{mode}: planning")
    dry = _train_py(gin + ["--dry_run"], f"{mode} --dry_run")
    facts = json.loads([l for l in dry.splitlines() if l.startswith("{")][-1])
    memory = facts["memory"]
    planned = ({where: part["total_gib"] for where, part in memory["devices"].items()}
               if "devices" in memory else {"replica": memory["total_gib"]})
    model_dir = os.path.join(work_dir, mode)
    progress(f"{mode}: training {steps} steps")
    _train_py(gin + [f"--model_dir={model_dir}"], mode)
    measured = variables_per_device(model_dir)
    row = dict(bindings=ONE_PROCESS[mode], per_replica_batch=memory["per_replica_batch"],
               planned_total_gib_per_device=planned,
               step_seconds=round(step_seconds(model_dir), 4))
    if measured is not None:  # recorded only under a placement or sharding
        row["variable_gib_per_device"] = measured
    progress(f"{mode}: {row['step_seconds']:.3f} s per step; planned {planned}")
    return row


def two_workers(mode: str, work_dir: str, steps: int, log_every: int,
                progress: Callable[[str], None], config: str = CONFIG) -> dict:
    """A 2-worker MultiWorkerMirrored cluster on 127.0.0.1: variables and step time."""
    result = cluster.run(mode, work_dir, progress,
                         [cluster.MWMS, *FP32, *CLUSTER[mode], *_bindings(steps, log_every)],
                         config=config, num_workers=2, cores_per_task=1)
    row = dict(bindings=CLUSTER[mode], images_per_sec=round(result["perf/images_per_sec"], 2),
               step_seconds=round(step_seconds(os.path.join(work_dir, mode)), 4))
    measured = variables_per_device(os.path.join(work_dir, mode))
    if measured is not None:
        row["variable_gib_per_device"] = measured
    progress(f"{mode}: {row['step_seconds']:.3f} s per step")
    return row


def model_parallel(progress: Callable[[str], None] = print, steps: int = 24,
                   log_every: int = 4, modes: Optional[List[str]] = None,
                   work_dir: Optional[str] = None, config: str = CONFIG) -> dict:
    """Every mode in `modes` (default: all), one after the other, training `config`."""
    modes = list(modes or MODES)
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise ConfigError(f"unknown model_parallel modes {unknown}; choose from {list(MODES)}")
    tmp = tempfile.mkdtemp(dir=work_dir)
    try:
        rows = {mode: (one_process if mode in ONE_PROCESS else two_workers)(
            mode, tmp, steps, log_every, progress, config) for mode in modes}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"suite": "model_parallel", "config": config, "layout": FP32, "steps": steps,
            "note": "logical CPU devices share this host's cores: step times show the "
                    "placement's extra work, not accelerator overlap; per-device bytes are "
                    "the variables placed there (one CPU allocator serves every logical "
                    "device)", "modes": rows}
