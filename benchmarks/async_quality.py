"""ParaGAN's ablation on this machine: synchronous vs asynchronous training, plain vs
asymmetric policy, with and without a straggler (--suite=async_quality).

Every run is a real local cluster of two workers, each pinned to its own core with
one intra-op thread (LaunchConfig.cores_per_task), so a slowed worker's lost time
is lost, as on a cluster of machines. Arms, modes x policies:

  sync           MultiWorkerMirrored, global batch 2 x per_worker_batch
  closures       1 parameter server and a coordinator (the chief),
                 async_train.mode='closures', per_worker_batch a closure
  sample_buffer  the same with async_train.mode='sample_buffer'

  plain          the config's optimizers (benchmarks/recipes/ablation_mnist5k.gin: one
                 rate for G and D)
  asymmetric     gin/policies/paragan_async.gin on top (ParaGAN's asymmetric G/D policy)

Conditions: the straggler kinds of benchmarks/straggler.py (even, slow25/50/75,
slow_input, restart), always on worker:1. The parameter server and the chief are
not pinned: they run on whichever core is free, and their CPU seconds are recorded
(`cpu_seconds` per task), which is what they cost the workers here.

Equal seconds by construction: every run's clock starts at its first progress record
(start-up and tracing, which differ between strategies, are left out; the records' own
times, stats.jsonl) and the run is stopped `budget_minutes` later. It saves the step it is
on (the call in flight ends first, `log_every` steps or the rounds in flight; under
MultiWorkerMirrored the next call too, at whose end every worker agrees to save) and its
stats.jsonl "stop" record says when that step's training ended: `training_seconds`, in the JSON for every run. A
synchronous job that lost a worker is relaunched inside the same window, its relaunch's
seconds counted. Time to quality: a checkpoint every `checkpoint_images` real images D
trained on (the same training in every arm; what a relaunched synchronous job resumes
from) and at the stop, each scored after the run (bin/eval.py --all, the EMA generator,
the dataset's classifier: FCD and conditional accuracy) and placed at the training second
its step was reached: the run's `curve`, from which benchmarks/probes/ablation_table.py
reads the seconds to a target. images/s: the real images of the steps in the window over
its training seconds (steps a relaunch trains again count once). CPU per image: both
workers' CPU seconds over the metered window (first record to stop) over the images of
that window. Repeats run interleaved (every arm and condition once, then again); the
summary has, per arm and condition, the median and the range over the repeats.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence

from benchmarks import cluster
from benchmarks import quality_runs
from benchmarks import straggler as straggler_lib
from paragan_tf.distribute import launcher
from paragan_tf.errors import ConfigError
from paragan_tf.train import model_dir as model_dir_lib
from paragan_tf.train import run_files

CONFIG = "benchmarks/recipes/ablation_mnist5k.gin"  # make train's, a shorter EMA
MODES = {"sync": [cluster.MWMS],
         "closures": [cluster.PS, "async_train.mode='closures'"],
         "sample_buffer": [cluster.PS, "async_train.mode='sample_buffer'"]}
POLICIES = {"plain": [], "asymmetric": ["gin/policies/paragan_async.gin"]}
ARMS = ("sync", "sample_buffer")  # bin/bench.py --arms' default
CONDITIONS = straggler_lib.CONDITIONS
CONDITIONS_RUN = ("even", "slow50", "restart")  # --conditions' default
# Long enough for the synchronous arm to learn the classes on 2 Ice Lake cores (float32):
# conditional accuracy 0.901 at 328 s and 0.979 at 356 s (2026-11-29, one run;
# benchmarks/results/ablation_pilot_recipe_icelake_2026-11-29.json).
BUDGET_MINUTES = 6.0
START_TIMEOUT = 600  # seconds to the first progress line
# Periodic checkpoints every this many real images of D (the same training in every arm,
# whatever its batch per update): the marks of the quality curve, and what a relaunched
# synchronous job resumes from.
CHECKPOINT_IMAGES = 2400  # ~30 s of synchronous training on 2 Ice Lake cores (~75 images/s)
METRICS = ("training_seconds", "images_per_sec", "g_updates_per_sec", "fcd",
           "conditional_accuracy", "worker_cpu_ms_per_image")


class CpuMeter(threading.Thread):
    """CPU seconds (user + system) of every task's processes from now on, read from /proc
    each second (a process started later, such as a restarted worker, counts whole)."""

    def __init__(self, tasks: List[launcher.Task]):
        super().__init__(daemon=True, name="cpu-meter")
        self.tasks, self.seconds = tasks, {}  # {task: {pid: seconds}}
        self.ticks = os.sysconf("SC_CLK_TCK")
        self.done = threading.Event()
        self.sample()
        self.before = {pid: s for by_pid in self.seconds.values() for pid, s in by_pid.items()}

    def sample(self) -> None:
        for task in list(self.tasks):
            pid = task.process.pid
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # exited: its last sample stands
            self.seconds.setdefault(task.name, {})[pid] = (
                int(fields[11]) + int(fields[12])) / self.ticks

    def run(self):
        while not self.done.wait(1.0):
            self.sample()

    def totals(self) -> Dict[str, float]:
        return {name: round(sum(s - self.before.get(pid, 0.0) for pid, s in by_pid.items()), 1)
                for name, by_pid in self.seconds.items()}


def _launch(config: launcher.LaunchConfig, log, condition: str, stop: threading.Event,
            started: List[launcher.Task], codes: List[int]) -> threading.Thread:
    thread = threading.Thread(target=lambda: codes.append(launcher.launch(
        config, stream=log, handle_signals=False, stop=stop,
        on_started=straggler_lib.on_started(condition, started))))
    thread.start()
    return thread


def _train(name: str, launch: launcher.LaunchConfig, condition: str, synchronous: bool,
           budget_seconds: float, progress: Callable[[str], None]) -> dict:
    """Runs one arm under `condition` until `budget_seconds` after its first progress
    record (its clock: the record's time), then stops it (every training task
    checkpoints). The window's start, the last launch's start, the stop, and the tasks'
    CPU seconds over the window with the window's length as metered."""
    model_dir = launch.model_dir
    shutil.rmtree(model_dir, ignore_errors=True)
    log_path = model_dir + ".log"
    stop, codes, started = threading.Event(), [], []
    progress(f"{name}: starting (log: {log_path})")
    with open(log_path, "w") as log:
        launched = time.time()
        thread = _launch(launch, log, condition, stop, started, codes)
        deadline = time.monotonic() + START_TIMEOUT
        while not run_files.read(model_dir, "log"):
            if not thread.is_alive() or time.monotonic() > deadline:
                stop.set()
                thread.join(timeout=180)
                raise RuntimeError(f"{name} recorded no progress (exit codes {codes}, "
                                   f"{START_TIMEOUT} s at most); see {log_path}")
            time.sleep(0.2)
        began = run_files.read(model_dir, "log")[0]["time"]
        meter = CpuMeter(started)
        meter.start()
        metered_from = time.time()
        progress(f"{name}: training until {budget_seconds:.0f} s after its first record")
        if condition == "restart":
            thread.join(timeout=max(0.0, began + budget_seconds / 3 - time.time()))
            straggler_lib.kill(started)
            progress(f"{name}: killed worker:1")
            if synchronous:
                # A synchronous job cannot go on without the worker: the cluster manager
                # tears it down and relaunches it, and it resumes from its last checkpoint.
                for task in started:
                    if task.process.poll() is None:
                        task.process.kill()
                thread.join()
                meter.sample()
                launched = time.time()
                thread = _launch(launch, log, "even", stop, started, codes)
                progress(f"{name}: relaunched the job from its last checkpoint")
        thread.join(timeout=max(0.0, began + budget_seconds - time.time()))
        if not thread.is_alive():
            raise RuntimeError(f"{name} ended before its budget (exit {codes}); see {log_path}")
        meter.sample()
        stopped = time.time()
        stop.set()  # every training task checkpoints and stops
        thread.join(timeout=180)
        meter.done.set()
    ended = codes[-1:] in ([0], [128 + signal.SIGTERM])
    if not ended or (len(codes) > 1 and not (synchronous and condition == "restart")):
        raise RuntimeError(f"{name} failed with exit codes {codes}; see {log_path}")
    return {"began": began, "launched": launched, "stopped": stopped,
            "cpu_seconds": meter.totals(), "cpu_window_seconds": round(stopped - metered_from, 2)}


def _bindings(mode: str, batch: int, d_steps: int, log_every: int,
              checkpoint_images: int) -> List[str]:
    """Progress records every `log_every` steps (rounds: twice as many, each half the
    work), a checkpoint on the first record after every `checkpoint_images` real images."""
    log_every *= 1 if mode == "sync" else 2
    checkpoint_every = log_every * max(1, round(checkpoint_images / (batch * d_steps
                                                                      * log_every)))
    return MODES[mode] + [f"train.batch_size={batch}", "train.total_steps=100000000",
                          f"train.log_every={log_every}",
                          f"train.checkpoint_every={checkpoint_every}",
                          "train.max_to_keep=1000", "train.sample_every=0",
                          "eval.every_steps=0"]


def timeline(model_dir: str, began: float, launched: float, stopped: float
             ) -> Dict[str, object]:
    """The run's clock from stats.jsonl: seconds after `began` at which each logged step was
    reached (the newest record of a step: a relaunched job trains some steps again), the
    step saved at the stop and the training seconds: to the end of that step's training
    (the stop record), or to the stop (`stopped`) for a job that never trained after its
    last launch (a relaunch still starting: its newest checkpoint is all the window gave)."""
    seconds = {r["step"]: r["time"] - began for r in run_files.read(model_dir, "log")}
    stops = [r for r in run_files.read(model_dir, "stop") if r["time"] >= launched]
    if stops:
        step, until = stops[-1]["step"], stops[-1]["trained_until"] - began
        seconds[step] = until
    else:
        step = int(model_dir_lib.latest_checkpoint(model_dir).rsplit("-", 1)[1])
        until = stopped - began
    return {"seconds": seconds, "step": step, "training_seconds": round(until, 2),
            "first_step": min(seconds)}


def _run(mode: str, policy: str, condition: str, repeat: int, work_dir: str,
         classifier_dir: str, config: str, per_worker_batch: int, log_every: int,
         budget_seconds: float, eval_samples: int, checkpoint_images: int,
         progress: Callable[[str], None]) -> dict:
    name = f"{mode}_{policy}_{condition}_{repeat}"
    model_dir = os.path.join(work_dir, name)
    synchronous = mode == "sync"
    batch = per_worker_batch * (2 if synchronous else 1)
    gin_files = [config] + POLICIES[policy]
    d_steps = quality_runs.settings_of(gin_files).train.d_steps
    launch = launcher.LaunchConfig(
        model_dir=model_dir, gin_files=gin_files,
        gin_bindings=(_bindings(mode, batch, d_steps, log_every, checkpoint_images)
                      + straggler_lib.bindings(condition)),
        num_workers=2, num_ps=0 if synchronous else 1, threads_per_task=1, cores_per_task=1)
    trained = _train(name, launch, condition, synchronous, budget_seconds, progress)
    clock = timeline(model_dir, trained["began"], trained["launched"], trained["stopped"])
    images_per_step = batch * d_steps
    g_rate = (clock["step"] - clock["first_step"]) / clock["training_seconds"]
    progress(f"{name}: {clock['training_seconds']:.1f} training seconds to step "
             f"{clock['step']}; scoring its checkpoints")
    curve = [dict(step=e["step"], seconds=round(clock["seconds"][e["step"]], 2),
                  images=e["step"] * images_per_step, fcd=e["fcd"],
                  conditional_accuracy=e["conditional_accuracy"])
             for e in quality_runs.evaluate_all(model_dir, classifier_dir, eval_samples,
                                                2 * eval_samples)
             if e["step"] in clock["seconds"] and e["step"] >= clock["first_step"]]
    final = curve[-1]
    if final["step"] != clock["step"]:
        raise RuntimeError(f"{name}: the newest scored checkpoint is step {final['step']}, "
                           f"not the stop's {clock['step']}")
    closures = ({"worker:0": final["step"], "worker:1": final["step"]} if synchronous
                else cluster.closures_by_task(model_dir))
    d_closures = ({w: n * d_steps for w, n in closures.items()} if synchronous
                  else cluster.closures_by_task(model_dir, "d_closures"))
    worker_cpu = sum(v for task, v in trained["cpu_seconds"].items()
                     if task.startswith("worker"))
    images_per_sec = g_rate * images_per_step
    result = {"training_seconds": clock["training_seconds"], "images_per_sec": images_per_sec,
              "g_updates_per_sec": g_rate, "steps": final["step"], "fcd": final["fcd"],
              "conditional_accuracy": final["conditional_accuracy"], "curve": curve,
              "closures_by_worker": closures, "d_closures_by_worker": d_closures,
              "batch_per_update": batch, "d_steps": d_steps,
              "cpu_seconds": trained["cpu_seconds"],
              "cpu_window_seconds": trained["cpu_window_seconds"],
              # Both workers' CPU over the images trained in the metered window.
              "worker_cpu_ms_per_image": 1000 * worker_cpu / (
                  images_per_sec * trained["cpu_window_seconds"])}
    progress(f"{name}: {images_per_sec:.1f} images/s over {clock['training_seconds']:.1f} s, "
             f"{final['step']} steps, FCD {final['fcd']:.2f}, conditional accuracy "
             f"{final['conditional_accuracy']:.3f} ({len(curve)} marks), closures {closures} "
             f"(D {d_closures}), CPU s {trained['cpu_seconds']}")
    return result


def _summary(runs: List[dict]) -> Dict[str, dict]:
    """Per metric: the median and the range over the repeats."""
    out = {}
    for metric in METRICS:
        values = [r[metric] for r in runs]
        out[metric] = {"median": statistics.median(values), "min": min(values),
                       "max": max(values)}
    return out


def async_quality(budget_minutes: float = BUDGET_MINUTES, per_worker_batch: int = 16,
                  arms: Sequence[str] = ARMS, policies: Sequence[str] = ("plain",),
                  conditions: Sequence[str] = CONDITIONS_RUN, repeats: int = 3,
                  eval_samples: int = 2000, work_dir: Optional[str] = None,
                  classifier_dir: Optional[str] = None, config: str = CONFIG,
                  log_every: int = 2, classifier_epochs: int = 2,
                  checkpoint_images: int = CHECKPOINT_IMAGES, progress=print) -> dict:
    """Every arm (mode x policy) x condition, `repeats` times interleaved, for
    `budget_minutes` each; JSON runs.<mode>.<policy>.<condition> (a list, one per repeat)
    and summary.<mode>.<policy>.<condition> (median, min, max of each metric).

    config, log_every, classifier_epochs, checkpoint_images: the experiment, its
    classifier and its periodic checkpoints (the tests run gin/tiny.gin for seconds).
    """
    unknown = (set(arms) - set(MODES) | set(policies) - set(POLICIES)
               | set(conditions) - set(CONDITIONS))
    if unknown:
        raise ConfigError(f"unknown arms/policies/conditions {sorted(unknown)}: choose from "
                          f"{list(MODES)}, {list(POLICIES)} and {list(CONDITIONS)}")
    if repeats < 1:
        raise ConfigError(f"repeats={repeats} must be >= 1")
    work_dir = os.path.abspath(work_dir or os.path.join(quality_runs.REPO, "runs", "bench",
                                                        "async_quality"))
    classifier_dir = os.path.abspath(classifier_dir or os.path.join(work_dir, "classifier"))
    os.makedirs(work_dir, exist_ok=True)
    quality_runs.train_classifier(classifier_dir, config, classifier_epochs, progress)
    # Children import benchmarks.congestion (the slow_input store) from the repository.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (quality_runs.REPO, os.environ.get("PYTHONPATH")) if p)
    started = time.time()
    runs: Dict[str, Dict[str, Dict[str, List[dict]]]] = {}
    for repeat in range(repeats):
        for condition in conditions:
            for mode in arms:
                for policy in policies:
                    runs.setdefault(mode, {}).setdefault(policy, {}).setdefault(
                        condition, []).append(_run(
                            mode, policy, condition, repeat, work_dir, classifier_dir,
                            config, per_worker_batch, log_every, budget_minutes * 60,
                            eval_samples, checkpoint_images, progress))
    summary = {mode: {policy: {condition: _summary(r) for condition, r in by_condition.items()}
                      for policy, by_condition in by_policy.items()}
               for mode, by_policy in runs.items()}
    return {"suite": "async_quality", "config": config, "budget_minutes": budget_minutes,
            "per_worker_batch": per_worker_batch, "eval_samples": eval_samples,
            "repeats": repeats, "threads_per_task": 1, "cores_per_task": 1,
            "slow_task": straggler_lib.SLOW_TASK,
            "slow_input": {"latency_ms": straggler_lib.INPUT_LATENCY_MS,
                           "reads_at_once": straggler_lib.INPUT_READS},
            "checkpoint_images": checkpoint_images, "work_dir": work_dir,
            "seconds": time.time() - started, "runs": runs, "summary": summary}
