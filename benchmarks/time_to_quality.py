"""Time to quality: training seconds until a recipe reaches a quality (--suite=time_to_quality)

Each config (a gin file, default: the previous default recipe of `make train`,
benchmarks/recipes/mnist_default_v1.gin, and today's gin/mnist_default.gin) trains
in its own process on this machine for at most `budget_minutes` of training
(`train.max_minutes`) or its own `train.total_steps`, whichever comes first,
with a checkpoint and a progress record every `mark_steps` steps and no
evaluation inside the loop. Configs run in turn, A B A B when `repeats` > 1.
After each run every checkpoint is scored with the EMA generator (bin/eval.py
--watch on the finished run, so evaluation never touches the training clock; none
where every checkpoint is scored already, as in a sweep's runs scored a second time):
FCD and conditional accuracy with the dataset's classifier (trained once into
<work_dir>/classifier_<dataset>_<resolution>px, bin/train_classifier.py), and FID on the
standard Inception network at the last checkpoint (`fid_samples` generated
images against the training split's statistics, embedded once per work_dir,
dataset, resolution and image count; 0: no FID).

The curve of each run: step, training seconds (stats.jsonl's wall_seconds at that
step: since the process began training, tracing included), real images seen by D
(step x batch x D steps x accumulation) and the metrics. Quality targets: FCD at
most and conditional accuracy at least those of the first config's last mark
(the reference recipe's end-of-run quality), unless `fcd_target` /
`accuracy_target` are given. `seconds_to_target` is the training seconds of the
first mark meeting both (None: not reached within the budget), `seconds_to_fcd` the
same for FCD alone at 10, 5, 2 and 1 (short runs that stop before the target are
ranked by them); `speedup` is the reference's median over each config's median.

Also scores runs trained elsewhere (`runs`: e.g. every run of a bin/sweep.py
sweep): the same curves and times to target, no training.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

from benchmarks import quality_runs
from paragan_tf.errors import ConfigError
from paragan_tf.eval import history
from paragan_tf.train import config as train_config
from paragan_tf.train import model_dir as model_dir_lib
from paragan_tf.train import run_files

CONFIGS = ("benchmarks/recipes/mnist_default_v1.gin", "gin/mnist_default.gin")
METRICS = ("fcd", "conditional_accuracy")
# Each class's spread, where the evaluation has it (the recipe study's diversity columns).
DIVERSITY = ("recall", "coverage", "intra_class_fcd")
FCD_LADDER = (10.0, 5.0, 2.0, 1.0)  # seconds_to_fcd: coarser marks than the target, for short runs


def _operative_int(model_dir: str, name: str, default: int) -> int:
    """An integer binding of the run's operative_config.gin (train.batch_size, ...)."""
    with open(os.path.join(model_dir, "operative_config.gin")) as f:
        found = re.search(rf"^{re.escape(name)} = (\d+)$", f.read(), re.M)
    return int(found.group(1)) if found else default


def train(model_dir: str, config: str, bindings: Sequence[str], budget_minutes: float,
          mark_steps: int) -> dict:
    """bin/train.py until its budget or its last step; its train_result.json."""
    shutil.rmtree(model_dir, ignore_errors=True)
    marks = [f"train.max_minutes={budget_minutes}", f"train.checkpoint_every={mark_steps}",
             f"train.log_every={mark_steps}", "train.max_to_keep=1000", "eval.every_steps=0"]
    argv = [sys.executable, quality_runs.binary("train.py"), f"--model_dir={model_dir}",
            f"--gin_file={config}"] + [f"--gin_bindings={b}" for b in list(bindings) + marks]
    with open(model_dir + ".log", "w") as log:
        code = subprocess.run(argv, cwd=quality_runs.REPO, stdout=log,
                              stderr=subprocess.STDOUT).returncode
    if code:
        raise RuntimeError(f"{model_dir} failed with exit code {code}; see {model_dir}.log")
    with open(os.path.join(model_dir, run_files.RESULT_FILE)) as f:
        return json.load(f)


def scored(model_dir: str) -> bool:
    """Whether the run has finished and eval/metrics.json has every checkpoint it names:
    then bin/eval.py --watch would evaluate nothing (it skips the checkpoints recorded
    there, whatever their protocol) and only cost a process (a sweep's runs scored again)."""
    if not os.path.exists(os.path.join(model_dir, run_files.RESULT_FILE)):
        return False
    evaluations = history.History(os.path.join(model_dir, "eval"), {})["evaluations"]
    paths = model_dir_lib.checkpoint_paths(model_dir)
    return bool(paths) and set(paths) <= {e["checkpoint"] for e in evaluations}


def score(model_dir: str, classifier_dir: str, samples: int, real: int) -> None:
    """FCD and conditional accuracy of every checkpoint of the finished run (eval/) not yet
    scored there."""
    if scored(model_dir):
        return
    with open(model_dir + ".eval.log", "w") as log:
        subprocess.run([sys.executable, quality_runs.binary("eval.py"),
                        f"--model_dir={model_dir}", "--watch", "--poll_secs=1",
                        f"--gin_bindings=eval.classifier_path='{classifier_dir}'",
                        "--gin_bindings=eval.feature_extractor='classifier'",
                        f"--gin_bindings=eval.num_samples={samples}",
                        f"--gin_bindings=eval.num_real={real}"],
                       check=True, cwd=quality_runs.REPO, stdout=log, stderr=subprocess.STDOUT)


def reference_stats(path: str, config: str, bindings: Sequence[str], real: int,
                    progress: Callable[[str], None]) -> None:
    """Inception statistics of up to `real` images of the config's reference split, once."""
    if os.path.exists(path):
        return
    progress(f"embedding up to {real} real images with Inception: {path}")
    subprocess.run([sys.executable, quality_runs.binary("eval.py"), f"--gin_file={config}",
                    f"--write_stats={path}", "--gin_bindings=eval.feature_extractor='inception'",
                    f"--gin_bindings=eval.num_real={real}"]
                   + [f"--gin_bindings={b}" for b in bindings],
                   check=True, cwd=quality_runs.REPO, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def fid(model_dir: str, reference: str, samples: int, real: int) -> dict:
    """FID (standard Inception) of the run's newest checkpoint, into eval_fid/."""
    with open(model_dir + ".fid.log", "w") as log:
        subprocess.run([sys.executable, quality_runs.binary("eval.py"),
                        f"--model_dir={model_dir}", f"--eval_dir={model_dir}/eval_fid",
                        "--gin_bindings=eval.feature_extractor='inception'",
                        f"--gin_bindings=eval.reference_stats='{reference}'",
                        f"--gin_bindings=eval.num_samples={samples}",
                        f"--gin_bindings=eval.num_real={real}"],
                       check=True, cwd=quality_runs.REPO, stdout=log, stderr=subprocess.STDOUT)
    with open(os.path.join(model_dir, "eval_fid", "metrics.json")) as f:
        final = max(json.load(f)["evaluations"], key=lambda e: e["step"])
    return dict(step=final["step"], fid=final["fid"], protocol=final["protocol"])


def curve(model_dir: str, metrics: Sequence[str] = METRICS) -> List[dict]:
    """The run's scored marks: step, training seconds, real images seen, metrics."""
    seconds = {r["step"]: r["wall_seconds"] for r in run_files.read(model_dir, "log")}
    default = train_config.defaults(train_config.TrainConfig)
    per_step = 1
    for name in ("batch_size", "d_steps", "accumulation"):
        per_step *= _operative_int(model_dir, f"train.{name}", default[name])
    with open(os.path.join(model_dir, "eval", "metrics.json")) as f:
        evaluations = sorted(json.load(f)["evaluations"], key=lambda e: e["step"])
    # The asked-for metrics must be there; the diversity metrics ride along where scored
    # (a caller may ask for one by name too: the merge keeps one of each).
    return [dict(step=e["step"], seconds=seconds.get(e["step"]), images=e["step"] * per_step,
                 protocol=e["protocol"],
                 **({k: e[k] for k in DIVERSITY if k in e} | {k: e[k] for k in metrics}))
            for e in evaluations if e["step"] > 0]


def seconds_to(points: List[dict], fcd: float, accuracy: float) -> Optional[float]:
    """Training seconds of the first mark with FCD <= fcd and accuracy >= accuracy."""
    for p in points:
        if p["fcd"] <= fcd and p["conditional_accuracy"] >= accuracy:
            return p["seconds"]
    return None


def _run_folders(paths: Sequence[str]) -> List[str]:
    """Run folders as given, a sweep's folder as its finished runs (sorted)."""
    found = []
    for path in paths:
        if os.path.exists(os.path.join(path, "operative_config.gin")):
            found.append(path)
            continue
        inside = sorted(os.path.dirname(p) for p in
                        glob.glob(os.path.join(glob.escape(path), "*", run_files.RESULT_FILE)))
        if not inside:
            raise ConfigError(f"time_to_quality: {path} is neither a run folder nor a folder "
                              f"of finished runs")
        found.extend(inside)
    return found


def _label(config: str) -> str:
    return os.path.splitext(os.path.basename(config))[0]


def time_to_quality(configs: Sequence[str] = CONFIGS, budget_minutes: float = 20.0,
                    mark_steps: int = 100, repeats: int = 1, runs: Sequence[str] = (),
                    bindings: Sequence[str] = (), eval_samples: int = 5000,
                    eval_real: int = 10000, fid_samples: int = 2000,
                    fcd_target: Optional[float] = None,
                    accuracy_target: Optional[float] = None, classifier_epochs: int = 4,
                    work_dir: Optional[str] = None, classifier_dir: Optional[str] = None,
                    progress: Callable[[str], None] = print) -> dict:
    """Trains (or, with `runs`, only scores) and compares; see the module doc."""
    if repeats < 1 or mark_steps < 1 or budget_minutes <= 0:
        raise ConfigError("time_to_quality: repeats, mark_steps and budget_minutes must be "
                          "positive")
    if runs and (fcd_target is None or accuracy_target is None):
        raise ConfigError("time_to_quality: scoring --runs needs --fcd_target and "
                          "--accuracy_target (there is no reference config to take them from)")
    if len({_label(c) for c in configs}) < len(configs):
        raise ConfigError(f"time_to_quality: two configs share a file name in {list(configs)}: "
                          f"their runs would share a folder")
    missing = [c for c in configs if not os.path.exists(os.path.join(quality_runs.REPO, c))]
    if missing and not runs:
        raise ConfigError(f"time_to_quality: no such config {missing}")
    work_dir = os.path.abspath(work_dir or os.path.join(quality_runs.REPO, "runs", "bench",
                                                        "time_to_quality"))
    os.makedirs(work_dir, exist_ok=True)
    runs = _run_folders(runs)
    sources = [os.path.join(r, "operative_config.gin") for r in runs] or list(configs)
    data_config = sources[0]
    # One classifier (and one Inception reference) scores every run: all must train the
    # same data, or the FCD of the others would be silently wrong.
    kinds = {s: quality_runs.data_of(s) for s in sources}
    if len({(d.name, d.resolution) for d in kinds.values()}) > 1:
        raise ConfigError("time_to_quality: one classifier scores every run, but they train "
                          "different data: " + ", ".join(
                              f"{s} {d.name!r} at {d.resolution} px" for s, d in kinds.items()))
    data = kinds[data_config]
    classifier_dir = os.path.abspath(classifier_dir or os.path.join(
        work_dir, f"classifier_{data.name}_{data.resolution}px"))
    quality_runs.train_classifier(classifier_dir, data_config, classifier_epochs, progress)
    started = time.time()
    order = ([(os.path.basename(os.path.normpath(r)), None, os.path.abspath(r)) for r in runs]
             or [(f"{_label(c)}_{i}" if repeats > 1 else _label(c), c, None)
                 for i in range(repeats) for c in configs])
    reference = None
    if fid_samples:
        # Named by what it embeds: one work_dir serves several datasets and resolutions.
        reference = os.path.join(
            work_dir, f"inception_{data.name}_{data.resolution}px_{eval_real}.npz")
        reference_stats(reference, data_config, (), eval_real, progress)
    results: Dict[str, dict] = {}
    for name, config, model_dir in order:
        result: dict = dict(config=config)
        if config is not None:
            model_dir = os.path.join(work_dir, name)
            progress(f"{name}: training up to {budget_minutes:g} min (log: {model_dir}.log)")
            trained = train(model_dir, config, bindings, budget_minutes, mark_steps)
            result.update(steps=int(trained["step"]), train_seconds=trained["wall_seconds"])
        progress(f"{name}: scoring every checkpoint of {model_dir}")
        score(model_dir, classifier_dir, eval_samples, eval_real)
        result.update(model_dir=model_dir, curve=curve(model_dir))
        if reference:
            result["final_fid"] = fid(model_dir, reference, fid_samples, eval_real)
        last = result["curve"][-1]
        progress(f"{name}: step {last['step']} at {last['seconds']:.0f} s: FCD {last['fcd']:.3f}, "
                 f"accuracy {last['conditional_accuracy']:.3f}"
                 + (f", FID {result['final_fid']['fid']:.2f}" if reference else ""))
        results[name] = result
    first = results[order[0][0]]["curve"][-1]
    targets = dict(fcd=first["fcd"] if fcd_target is None else fcd_target,
                   conditional_accuracy=(first["conditional_accuracy"]
                                         if accuracy_target is None else accuracy_target),
                   source=("given" if fcd_target is not None and accuracy_target is not None
                           else f"the last mark of {order[0][0]}"))
    for result in results.values():
        result["seconds_to_target"] = seconds_to(result["curve"], targets["fcd"],
                                                 targets["conditional_accuracy"])
        result["seconds_to_fcd"] = {f"{fcd:g}": seconds_to(result["curve"], fcd, 0.0)
                                    for fcd in FCD_LADDER}
    summary = {}
    for config in (configs if not runs else ()):
        times = [results[n]["seconds_to_target"] for n, c, _ in order if c == config]
        reached = [t for t in times if t is not None]
        summary[_label(config)] = dict(
            seconds_to_target=times,
            median=statistics.median(reached) if len(reached) == len(times) else None)
    base = summary.get(_label(configs[0]), {}).get("median") if summary else None
    for entry in summary.values():
        entry["speedup"] = (base / entry["median"] if base and entry["median"] else None)
    return {"suite": "time_to_quality", "configs": list(configs) if not runs else [],
            "budget_minutes": budget_minutes, "mark_steps": mark_steps, "repeats": repeats,
            "bindings": list(bindings), "eval_samples": eval_samples, "eval_real": eval_real,
            "fid_samples": fid_samples, "targets": targets, "work_dir": work_dir,
            "classifier_dir": classifier_dir, "seconds": time.time() - started,
            "summary": summary, "runs": results}
