"""Does asynchronous training learn as well as synchronous, and faster? (--suite=async_quality)

Every arm trains the quality experiment (gin/quality_fashion_mnist.gin:
Fashion-MNIST at 32 px) on this machine for the same wall-clock budget, with two
workers of one thread each, and its final EMA generator is then evaluated as the
quality benchmark does (bin/eval.py with the Fashion-MNIST classifier: FCD and
conditional accuracy):

  sync           MultiWorkerMirrored, global batch 2 x per_worker_batch
  closures       1 parameter server, async_train.mode='closures', per_worker_batch a closure
  sample_buffer  the same with async_train.mode='sample_buffer'

each under `even` workers and under a `straggler` (worker:1 paused half the time,
benchmarks/straggler.py). The budget runs from the arm's first progress record
in its stats.jsonl (start-up and tracing left out: they differ between
strategies and are not what is compared) until the launcher is asked to stop,
on which the run checkpoints and stops: the checkpoint's step is what the arm
trained. images/s is over the progress records after the first.
closures_by_worker: the closures each worker task ran (parameter-server arms);
under MultiWorkerMirrored every worker takes part in every step, so both carry
the step count.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from typing import Callable, Dict, Optional, Sequence

from benchmarks import cluster
from benchmarks import quality_runs
from benchmarks import straggler as straggler_lib
from paragan_tf.distribute import launcher
from paragan_tf.errors import ConfigError
from paragan_tf.train import run_files

CONFIG = "gin/quality_fashion_mnist.gin"
ARMS = {"sync": [cluster.MWMS],
        "closures": [cluster.PS, "async_train.mode='closures'"],
        "sample_buffer": [cluster.PS, "async_train.mode='sample_buffer'"]}
CONDITIONS = ("even", "straggler")
START_TIMEOUT = 600  # seconds to the first progress line


def _train(name: str, model_dir: str, config: str, bindings: Sequence[str], straggler: bool,
           budget_seconds: float, progress: Callable[[str], None]) -> None:
    """Launches one arm; stops it `budget_seconds` after its first progress record (start-up
    and tracing, which differ between strategies, are not in the budget)."""
    shutil.rmtree(model_dir, ignore_errors=True)
    log_path = model_dir + ".log"
    asynchronous = cluster.PS in bindings
    launch = launcher.LaunchConfig(model_dir=model_dir, gin_files=[config],
                                   gin_bindings=list(bindings), num_workers=2,
                                   num_ps=int(asynchronous), threads_per_task=1)
    stop, codes = threading.Event(), []
    progress(f"{name}: starting (log: {log_path})")
    with open(log_path, "w") as log:
        thread = threading.Thread(target=lambda: codes.append(launcher.launch(
            launch, stream=log, handle_signals=False, stop=stop,
            on_started=straggler_lib.throttle("worker:1", 0.5) if straggler else None)))
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not run_files.read(model_dir, "log"):
            if not thread.is_alive() or time.monotonic() > deadline:
                stop.set()
                thread.join(timeout=180)
                raise RuntimeError(f"{name} recorded no progress in {START_TIMEOUT} s; "
                                   f"see {log_path}")
            time.sleep(0.5)
        progress(f"{name}: training for {budget_seconds:.0f} s")
        thread.join(timeout=budget_seconds)
        if not thread.is_alive():
            raise RuntimeError(f"{name} ended before its budget (exit {codes}); see {log_path}")
        stop.set()  # every training task checkpoints and stops
        thread.join(timeout=180)
    if codes not in ([0], [128 + signal.SIGTERM]):
        raise RuntimeError(f"{name} failed with exit code {codes}; see {log_path}")


def _arm(name: str, arm: str, condition: str, work_dir: str, classifier_dir: str,
         config: str, per_worker_batch: int, log_every: int, budget_seconds: float,
         eval_samples: int, progress: Callable[[str], None]) -> dict:
    model_dir = os.path.join(work_dir, name)
    synchronous = arm == "sync"
    batch = per_worker_batch * (2 if synchronous else 1)
    bindings = ARMS[arm] + [f"train.batch_size={batch}", "train.total_steps=100000000",
                            f"train.log_every={log_every}", "train.checkpoint_every=100000000",
                            "train.sample_every=100000000", "eval.every_steps=0"]
    _train(name, model_dir, config, bindings, condition == "straggler", budget_seconds,
           progress)
    rate = cluster.progress_rate(model_dir, batch * 2)  # train.d_steps = 2 real batches
    final = quality_runs.evaluate(model_dir, classifier_dir, eval_samples, 2 * eval_samples)
    if synchronous:
        closures = {"worker:0": final["step"], "worker:1": final["step"]}
    else:
        closures = cluster.closures_by_task(model_dir)
    result = {"images_per_sec": rate,
              "steps": final["step"], "fcd": final["fcd"],
              "conditional_accuracy": final["conditional_accuracy"],
              "closures_by_worker": closures, "batch_per_update": batch}
    progress(f"{name}: {result['images_per_sec']:.1f} images/s, {final['step']} steps, "
             f"FCD {final['fcd']:.2f}, conditional accuracy "
             f"{final['conditional_accuracy']:.3f}, closures {closures}")
    return result


def async_quality(budget_minutes: float = 10.0, per_worker_batch: int = 32,
                  arms: Sequence[str] = tuple(ARMS), conditions: Sequence[str] = CONDITIONS,
                  eval_samples: int = 5000, work_dir: Optional[str] = None,
                  classifier_dir: Optional[str] = None, config: str = CONFIG,
                  log_every: int = 25, classifier_epochs: int = 4, progress=print) -> dict:
    """Every arm x condition for `budget_minutes` each; JSON arms.<arm>.<condition>.

    config, log_every, classifier_epochs: the experiment and its classifier (the tests
    run gin/tiny.gin for a few seconds).
    """
    unknown = set(arms) - set(ARMS) | set(conditions) - set(CONDITIONS)
    if unknown:
        raise ConfigError(f"unknown arms/conditions {sorted(unknown)}: choose from "
                         f"{list(ARMS)} and {list(CONDITIONS)}")
    work_dir = os.path.abspath(work_dir or os.path.join(quality_runs.REPO, "runs", "bench",
                                                        "async_quality"))
    classifier_dir = os.path.abspath(classifier_dir or os.path.join(work_dir, "classifier"))
    os.makedirs(work_dir, exist_ok=True)
    quality_runs.train_classifier(classifier_dir, config, classifier_epochs, progress)
    started = time.time()
    results: Dict[str, dict] = {}
    for arm in arms:
        for condition in conditions:
            results.setdefault(arm, {})[condition] = _arm(
                f"{arm}_{condition}", arm, condition, work_dir, classifier_dir, config,
                per_worker_batch, log_every, budget_minutes * 60, eval_samples, progress)
    return {"suite": "async_quality", "config": config, "budget_minutes": budget_minutes,
            "per_worker_batch": per_worker_batch, "eval_samples": eval_samples,
            "slow_fraction": 0.5, "threads_per_task": 1, "work_dir": work_dir,
            "seconds": time.time() - started, "arms": results}
