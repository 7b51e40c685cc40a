"""Sweeps: one small gin file expands into many training runs (bin/sweep.py drives them).

A sweep file (gin/sweeps/*.gin) binds the `sweep` configurable:

    sweep.base = ['gin/mnist_default.gin']          # the experiment every run starts from
    sweep.bindings = ['train.total_steps = 2000']   # fixed changes for every run
    sweep.product = {'train.d_steps': [1, 2], 'layout.precision': ['float32', 'auto']}
    sweep.zip = {'G/optimizer.learning_rate': [1e-4, 2e-4],
                 'D/optimizer.learning_rate': [4e-4, 8e-4]}

Runs are the product of the `product` axes and the zipped `zip` axes (the i-th
values of every zip axis go together). Values are gin literals; a reference to a
configurable is written as a string: 'loss.fn': ['@hinge', '@non_saturating'].
Each run is named by the bindings that vary, e.g. `d_steps=2,precision=auto`, and
trains in <sweep root>/<name>. Nothing here imports TensorFlow.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import tokenize
from typing import Any, Dict, List, Optional, Sequence

import gin

from paragan_tf.errors import ConfigError
from paragan_tf.train import model_dir as model_dir_lib


@gin.configurable("sweep")
def sweep_spec(base: Sequence[str] = gin.REQUIRED, bindings: Sequence[str] = (),
               product: Optional[Dict[str, Sequence[Any]]] = None,
               zip: Optional[Dict[str, Sequence[Any]]] = None) -> dict:  # noqa: A002
    """What a sweep file binds (see the module doc)."""
    return dict(base=list(base), bindings=list(bindings), product=dict(product or {}),
                zip=dict(zip or {}))


@dataclasses.dataclass(frozen=True)
class Run:
    name: str
    varying: Dict[str, Any]  # the swept bindings of this run, key -> value
    gin_files: List[str]
    bindings: List[str]  # fixed bindings, then the swept ones
    model_dir: str


def load(path: str) -> dict:
    """The spec of the sweep file at `path`; ConfigError (file and line) when malformed."""
    if not os.path.exists(path):
        raise ConfigError(f"sweep file {path} does not exist")
    gin.clear_config()
    try:
        gin.parse_config_file(path, skip_unknown=True)
        spec = sweep_spec()
    except tokenize.TokenError as e:
        raise ConfigError(f"sweep file {path}, line {e.args[1][0]}: {e.args[0]}") from None
    except (ValueError, SyntaxError, RuntimeError) as e:
        raise ConfigError(f"sweep file {path}: {str(e).strip().splitlines()[0]}") from None
    finally:
        gin.clear_config()
    for axis in ("product", "zip"):
        for key, values in spec[axis].items():
            if not isinstance(values, (list, tuple)) or not values:
                raise ConfigError(f"sweep file {path}: sweep.{axis}[{key!r}] must be a "
                                  f"non-empty list of values")
    lengths = {len(v) for v in spec["zip"].values()}
    if len(lengths) > 1:
        raise ConfigError(f"sweep file {path}: every sweep.zip axis needs the same number of "
                          f"values, got {dict((k, len(v)) for k, v in spec['zip'].items())}")
    overlap = set(spec["product"]) & set(spec["zip"])
    if overlap:
        raise ConfigError(f"sweep file {path}: {sorted(overlap)} in both sweep.product and "
                          f"sweep.zip")
    return spec


def gin_value(value: Any) -> str:
    """A Python value as the gin literal it came from ('@name' stays a reference)."""
    if isinstance(value, str) and value.startswith(("@", "%")):
        return value
    return repr(value)


def _label(key: str) -> str:
    # 'G/optimizer.learning_rate' -> 'G.learning_rate', 'train.d_steps' -> 'd_steps'
    scope = key.split("/")[0] + "." if "/" in key else ""
    return scope + key.rsplit(".", 1)[-1]


def _value_label(value: Any) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return re.sub(r"[^A-Za-z0-9.+_-]", "_", text.lstrip("@%"))


def run_name(varying: Dict[str, Any]) -> str:
    """A stable, readable name from the swept bindings, in the sweep file's order."""
    if not varying:
        return "default"
    labels = [_label(k) for k in varying]
    labels = [label if labels.count(label) == 1 else re.sub(r"[^A-Za-z0-9.]", ".", key)
              for label, key in zip(labels, varying)]
    return ",".join(f"{label}={_value_label(v)}" for label, v in zip(labels, varying.values()))


def expand(spec: dict, root: str, extra_bindings: Sequence[str] = ()) -> List[Run]:
    """Every run of the sweep, in a stable order (product axes vary slowest, as written)."""
    product_keys = list(spec["product"])
    zip_keys = list(spec["zip"])
    zipped = list(zip(*spec["zip"].values())) if zip_keys else [()]
    runs = []
    for combo in itertools.product(*spec["product"].values()):
        for paired in zipped:
            varying = dict(zip(product_keys, combo))
            varying.update(zip(zip_keys, paired))
            name = run_name(varying)
            bindings = (list(spec["bindings"]) + list(extra_bindings) +
                        [f"{k} = {gin_value(v)}" for k, v in varying.items()])
            runs.append(Run(name, varying, list(spec["base"]), bindings,
                            os.path.join(root, name)))
    names = [r.name for r in runs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"the sweep names several runs alike ({duplicates}); two runs "
                          f"with the same bindings?")
    return runs


def validate(runs: Sequence[Run]) -> None:
    """Parses every run's configuration and checks the trainer's, dataset's and
    optimizers' settings; one ConfigError listing every bad run, so nothing starts
    when any is wrong."""
    # pylint: disable=import-outside-toplevel  (TensorFlow loads only when validating)
    from paragan_tf.train import experiment
    problems = []
    for run in runs:
        try:
            experiment.parse(run.gin_files, run.bindings, finalize=False)
            experiment.Settings.read()  # the optimizers' settings too
        except ConfigError as e:
            problems.append(f"{run.name}: {str(e).splitlines()[0]}")
        finally:
            gin.clear_config()
    if problems:
        raise ConfigError(f"{len(problems)} of {len(runs)} runs have invalid settings; "
                          f"nothing was started:\n  " + "\n  ".join(problems))


def status(run: Run) -> str:
    """'finished' (train_result.json written), 'unfinished' (a checkpoint to resume from)
    or 'new' (its folder may hold the sweep's HParams record or a run that died before
    its first checkpoint: it starts from step 0)."""
    if os.path.exists(os.path.join(run.model_dir, "train_result.json")):
        return "finished"
    if model_dir_lib.latest_checkpoint(run.model_dir):
        return "unfinished"
    return "new"


def train_command(run: Run, python: str, repo: str) -> List[str]:
    return ([python, os.path.join(repo, "bin", "train.py"), f"--model_dir={run.model_dir}"] +
            [f"--gin_file={f}" for f in run.gin_files] +
            [f"--gin_bindings={b}" for b in run.bindings])


def divide_cores(cores: Sequence[int], parallel: int) -> List[List[int]]:
    """`parallel` disjoint, near-equal groups of `cores` (at least one core each)."""
    parallel = max(1, min(parallel, len(cores)))
    return [list(cores[i::parallel]) for i in range(parallel)]


# What the summary table reports, best first by the first quality metric present.
QUALITY = ("fcd", "fid")  # lower is better
COLUMNS = ("fcd", "fid", "conditional_accuracy", "classifier_score", "inception_score",
           "precision", "recall", "perf/images_per_sec", "loss/D", "loss/G", "step",
           "eval_protocol")  # what the quality columns measured (eval/evaluator.py)


def summarize(runs: Sequence[Run]) -> List[Dict[str, Any]]:
    """One row per run: name, status, swept bindings and final metrics; best first."""
    rows = []
    for run in runs:
        row: Dict[str, Any] = {"run": run.name, "status": status(run)}
        row.update(run.varying)
        result = os.path.join(run.model_dir, "train_result.json")
        if os.path.exists(result):
            with open(result) as f:
                metrics = json.load(f)
            row.update({k: metrics[k] for k in COLUMNS if k in metrics})
        rows.append(row)

    def key(row):
        for metric in QUALITY:
            if metric in row:
                return (0, row[metric])
        return (1, -row.get("perf/images_per_sec", 0.0)) if row["status"] == "finished" \
            else (2, 0.0)
    return sorted(rows, key=key)


def table_columns(rows: Sequence[Dict[str, Any]], runs: Sequence[Run]) -> List[str]:
    swept = list(runs[0].varying) if runs else []
    metrics = [c for c in COLUMNS if any(c in r for r in rows)]
    return ["run", "status"] + swept + metrics


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def markdown(rows: Sequence[Dict[str, Any]], columns: Sequence[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"
