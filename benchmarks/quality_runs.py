"""What the quality suites (async_quality, small_data) share: the dataset's classifier,
and scoring every checkpoint of a run with it (bin/eval.py --all in a child process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Callable, List, Sequence

import gin

from paragan_tf.errors import ConfigError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def binary(name: str) -> str:
    """The path of bin/<name>."""
    return os.path.join(REPO, "bin", name)


def settings_of(configs: Sequence[str], bindings: Sequence[str] = ()):
    """The experiment.Settings the gin files `configs` and `bindings` make (parsed here,
    then cleared)."""
    from paragan_tf.train import experiment  # pylint: disable=import-outside-toplevel
    experiment.parse(list(configs), list(bindings), finalize=False)
    try:
        return experiment.Settings.read()
    finally:
        gin.clear_config()


def data_of(config: str, bindings: Sequence[str] = ()):
    """The dataset settings `config` and `bindings` make."""
    return settings_of([config], bindings).data


def train_classifier(path: str, config: str, epochs: int, progress: Callable[[str], None],
                     bindings: Sequence[str] = ()) -> None:
    """bin/train_classifier.py on the dataset of `config` (and `bindings`) into `path`,
    unless one of that dataset and resolution is there (one of another is refused by name:
    its FCD would be silently wrong)."""
    info = os.path.join(path, "classifier.json")
    if os.path.exists(info):
        with open(info) as f:
            trained = json.load(f)
        data = data_of(config, bindings)
        trained_on = f"{trained['dataset']!r} at {trained['resolution']} px"
        wanted = f"{data.name!r} at {data.resolution} px"
        if trained_on != wanted:
            raise ConfigError(f"{path} holds a classifier of {trained_on}, but {config} "
                              f"trains {wanted}: move it away or score in another folder")
        progress(f"reusing the {trained_on} classifier in {path}")
        return
    progress(f"training the dataset's classifier into {path}")
    subprocess.run([sys.executable, binary("train_classifier.py"), f"--gin_file={config}",
                    f"--output={path}", f"--epochs={epochs}"]
                   + [f"--gin_bindings={b}" for b in bindings], check=True, cwd=REPO,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def evaluate_all(model_dir: str, classifier_dir: str, samples: int, real: int) -> List[dict]:
    """bin/eval.py --all: every checkpoint of `model_dir` not yet scored, one process; the
    metrics.json entries, oldest first."""
    subprocess.run([sys.executable, binary("eval.py"), f"--model_dir={model_dir}", "--all",
                    f"--gin_bindings=eval.classifier_path='{classifier_dir}'",
                    f"--gin_bindings=eval.num_samples={samples}",
                    f"--gin_bindings=eval.num_real={real}"], check=True, cwd=REPO,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(model_dir, "eval", "metrics.json")) as f:
        return sorted(json.load(f)["evaluations"], key=lambda e: e["step"])
