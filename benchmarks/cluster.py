"""Cluster benchmarks: weak scaling of synchronous training, and stragglers, sync vs async.

Each measurement launches a real local cluster (distribute/launcher.py), trains
the benchmark model (gin/bench_cluster.gin) and reads what the run recorded
(the chief's stats.jsonl and train_result.json, train/run_files.py): rates over
the last `log_every` steps, or between progress records, so start-up and
tracing are left out. Every task gets one intra- and one
inter-op thread: on this 2-core machine each worker then has one core.

scaling    images/s of 1 worker vs 2 workers under MultiWorkerMirroredStrategy,
           per-worker batch fixed (weak scaling); efficiency = t2 / (2 t1).
straggler  2 workers, worker:1 paused `slow_fraction` of the time (a machine
           running at 1 - slow_fraction of its speed): synchronous
           MultiWorkerMirrored vs asynchronous parameter-server training.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Callable, Dict, List, Optional

from benchmarks import profile as profile_lib
from benchmarks import straggler as straggler_lib
from paragan_tf.distribute import launcher
from paragan_tf.train import run_files

CONFIG = "gin/bench_cluster.gin"
MWMS = "strategy.kind='multi_worker_mirrored'"
PS = "strategy.kind='parameter_server'"


def run(name: str, work_dir: str, progress: Callable[[str], None], bindings: List[str],
        config: str = CONFIG, slow_task: Optional[str] = None, slow_fraction: float = 0.5,
        **launch) -> Dict[str, float]:
    """Launches a local cluster training `config` into work_dir/name (its log beside it),
    `slow_task` throttled to 1 - slow_fraction of its speed (benchmarks/straggler.py);
    the chief's train_result.json. Raises RuntimeError with the log's tail on failure."""
    model_dir = os.path.join(work_dir, name)
    log_path = model_dir + ".log"
    progress(f"{name}: training (log: {log_path})")
    with open(log_path, "w") as log:
        code = launcher.launch(
            launcher.LaunchConfig(model_dir=model_dir, gin_files=[config],
                                  gin_bindings=bindings, threads_per_task=1, **launch),
            stream=log, handle_signals=False,
            on_started=straggler_lib.throttle(slow_task, slow_fraction) if slow_task else None)
    if code != 0:
        with open(log_path) as f:
            tail = f.read()[-3000:]
        raise RuntimeError(f"benchmark run {name} failed with exit code {code}:\n{tail}")
    with open(os.path.join(model_dir, "train_result.json")) as f:
        result = json.load(f)
    progress(f"{name}: {result['perf/images_per_sec']:.1f} images/s")
    return result


def _steps(steps: int, log_every: int) -> List[str]:
    return [f"train.total_steps={steps}", f"train.log_every={log_every}"]


def _breakdown(result: dict, model_dir: str, global_batch: int) -> dict:
    """Seconds per step: the whole, waiting for input, in collectives, and the rest (compute).

    The step and the input wait come from the measured (last) window; the
    collective share from the profiled window before it (tf.profiler slows the
    steps it traces, so the two windows are kept apart). A collective's time
    includes waiting for the slowest worker to arrive: exchange and skew together.
    """
    step = global_batch / result["perf/images_per_sec"]
    seconds = profile_lib.op_seconds(model_dir)
    busy = sum(seconds.values())
    collective = sum(v for k, v in seconds.items() if k.startswith("Collective")) / busy
    input_wait = result["perf/input_wait_frac"] * step
    exchange = collective * (step - input_wait)
    return {"step_seconds": step, "input_wait_seconds": input_wait,
            "exchange_seconds": exchange, "compute_seconds": step - input_wait - exchange,
            "op_time_share": profile_lib.shares(seconds, top=8)}


def scaling(per_worker_batch: int = 32, steps: int = 30, progress=print,
            work_dir: Optional[str] = None) -> dict:
    """Weak scaling, 1 -> 2 workers under MultiWorkerMirroredStrategy.

    Three windows of steps // 3: start-up and tracing, a tf.profiler trace on
    the chief, and the measured one.
    """
    window = steps // 3
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        runs, parts = {}, {}
        for workers in (1, 2):
            batch = per_worker_batch * workers
            name = f"mwms_{workers}"
            runs[workers] = run(
                name, tmp, progress,
                [MWMS, f"train.batch_size={batch}", f"train.profile_steps={window}"]
                + _steps(3 * window, window), num_workers=workers, cores_per_task=1)
            parts[workers] = _breakdown(runs[workers], os.path.join(tmp, name), batch)
    t1, t2 = (runs[w]["perf/images_per_sec"] for w in (1, 2))
    return {"suite": "scaling", "config": CONFIG, "per_worker_batch": per_worker_batch,
            "steps": 3 * window, "throughput_1": t1, "throughput_2": t2,
            "efficiency": t2 / (2 * t1),
            "input_wait_frac_1": runs[1]["perf/input_wait_frac"],
            "input_wait_frac_2": runs[2]["perf/input_wait_frac"],
            "per_step_1": parts[1], "per_step_2": parts[2]}


def progress_rate(model_dir: str, images_per_step: int) -> float:
    """Images/s from the run's first to its last progress record in stats.jsonl (start-up
    and tracing left out)."""
    logged = run_files.read(model_dir, "log")
    if len(logged) < 2:
        raise RuntimeError(f"{model_dir}: fewer than 2 progress records in "
                           f"{run_files.FILE} to time by")
    first, last = logged[0], logged[-1]
    return (last["step"] - first["step"]) * images_per_step / (last["time"] - first["time"])


def closures_by_task(model_dir: str, kind: str = "closures") -> Dict[str, int]:
    """Closures each worker task ran (async_workers.json counts them by process id):
    `kind` 'closures' (all) or 'd_closures' (those that read real images)."""
    with open(os.path.join(model_dir, "async_workers.json")) as f:
        by_process = json.load(f)[f"{kind}_by_process"]
    with open(os.path.join(model_dir, "launch.json")) as f:
        task_of = {str(pid): task for task, pid in json.load(f).items()}
    return {task_of.get(pid, f"pid {pid}"): n for pid, n in sorted(by_process.items())}


def straggler(per_worker_batch: int = 32, steps: int = 24, slow_fraction: float = 0.5,
              max_staleness: int = 4, log_every: int = 2, progress=print,
              work_dir: Optional[str] = None) -> dict:
    """2 workers, one at (1 - slow_fraction) speed: sync MWMS vs async parameter server.

    The asynchronous run is made twice: logging every `log_every` rounds (often enough
    that a barrier at log lines would cost) and every `steps` rounds (two lines); the
    ratio of their rates is what logging costs. Without a barrier the fast worker runs
    about 1 / (1 - slow_fraction) times the slow one's closures.
    """
    slow = dict(num_workers=2, slow_task="worker:1", slow_fraction=slow_fraction,
                cores_per_task=1)
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        sync = run("sync", tmp, progress,
                   [MWMS, f"train.batch_size={2 * per_worker_batch}"]
                   + _steps(steps, steps // 2), **slow)
        # Async: a round is d_steps D closures + 1 G closure of per_worker_batch each,
        # so twice the rounds of the sync run train on the same number of images.
        rates, closures = {}, {}
        for name, every in (("async", log_every), ("async_sparse_log", steps)):
            run(name, tmp, progress,
                [PS, f"train.batch_size={per_worker_batch}",
                 f"async_train.max_staleness={max_staleness}"]
                + _steps(2 * steps, every), num_ps=1, **slow)
            rates[name] = progress_rate(os.path.join(tmp, name), per_worker_batch * 2)
            closures[name] = closures_by_task(os.path.join(tmp, name))
            progress(f"{name}: {rates[name]:.1f} images/s between its progress lines, "
                     f"closures {closures[name]}")
    s, a = sync["perf/images_per_sec"], rates["async"]
    return {"suite": "straggler", "config": CONFIG, "per_worker_batch": per_worker_batch,
            "slow_task": "worker:1", "slow_fraction": slow_fraction,
            "max_staleness": max_staleness, "async_log_every": log_every,
            "sync_images_per_sec": s, "async_images_per_sec": a, "async_over_sync": a / s,
            "async_sparse_log_images_per_sec": rates["async_sparse_log"],
            "async_log_cost": 1 - a / rates["async_sparse_log"],
            "async_closures_by_worker": closures["async"],
            "async_fast_over_slow_closures": closures["async"].get("worker:0", 0)
            / max(closures["async"].get("worker:1", 0), 1),
            "async_sparse_log_closures_by_worker": closures["async_sparse_log"]}


SUITES = {"scaling": scaling, "straggler": straggler}
