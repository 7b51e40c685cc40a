"""The README, executed: its commands run as a newcomer types them, relative folders and all.

The quick start's lines are read from README.md itself (so the two cannot drift apart)
and run one by one with bash from the root of a scratch checkout (tests/helpers/repo.py's
`scratch_checkout`), so `runs/default` is a relative folder as it is for a user. Only
sizes change, for time; `SHORTER` lists every change. The other binaries that read a run
folder get relative folders in their own tests (repo.relative: the evaluation sidecar
and the quality benchmark in tests/eval/test_evaluator.py, the local launcher in
tests/helpers/clusters.py, sweeps in tests/train/test_sweep.py).
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers.repo import REPO, scratch_checkout

pytestmark = pytest.mark.slow

README = os.path.join(REPO, "README.md")
# The only changes to the README's lines: the tiny model (gin/tiny.gin: 4 steps, a
# checkpoint every 2) instead of the default's 800 steps, and smaller evaluations.
SHORTER = [("train.total_steps=850", "train.total_steps=6"),
           ("GIN_FILE=gin/pix2pix_fashion_mnist_edges.gin", "GIN_FILE=gin/tiny_pix2pix.gin"),
           ("--output=runs/clf_mnist", "--output=runs/clf_mnist --epochs=1"),
           ("eval.classifier_path='runs/clf_mnist'\"",
            "eval.classifier_path='runs/clf_mnist'\" --gin_bindings=eval.num_samples=500")]
MAKE_ENV = {"GIN_FILE": "gin/tiny.gin"}  # the Makefile's default experiment, made tiny


def readme_block(heading: str) -> list:
    """The command lines of the first ```bash block after `heading` in README.md."""
    with open(README) as f:
        text = f.read()
    assert heading in text, f"README.md has no {heading!r}"
    block = re.search(r"```bash\n(.*?)```", text[text.index(heading):], re.S)
    return [line for line in block.group(1).splitlines() if line.strip()
            and not line.startswith("#")]


def shorter(command: str) -> str:
    for old, new in SHORTER:
        command = command.replace(old, new)
    return command


def run(checkout: str, command: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=checkout, capture_output=True,
                          text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONUNBUFFERED="1", **MAKE_ENV))


@pytest.fixture(scope="module")
def quick_start(tmp_path_factory):
    """The README's first `make train`, then every line of its quick start: {command: result}."""
    checkout = scratch_checkout(tmp_path_factory.mktemp("readme") / "paragan_tf")
    # make would reinstall an out-of-date .venv from here, pointing it at this folder.
    if subprocess.run(["make", "-q", ".venv/.installed"], cwd=checkout).returncode:
        pytest.fail(".venv is older than requirements.txt or pyproject.toml: run `make "
                    "setup` (or `make test`) first")
    first = [line for line in readme_block("# paragan_tf") if line.startswith("make train")]
    lines = first + readme_block("## Quick start")
    results = {}
    for line in lines:
        if line.startswith(".venv/bin/tensorboard"):
            results[line] = None  # a server: its --logdir is checked by the test
            continue
        results[line] = result = run(checkout, shorter(line))
        assert result.returncode == 0, (line, result.stdout[-2000:], result.stderr[-3000:])
    return checkout, results


def _result(results, start: str) -> subprocess.CompletedProcess:
    return next(r for line, r in results.items() if line.startswith(start))


def test_the_quick_start_resumes_samples_evaluates_and_exports_a_relative_run(quick_start):
    checkout, results = quick_start
    run_dir = os.path.join(checkout, "runs", "default")
    lines = list(results)
    assert lines[0].split("#")[0].strip() == "make train", lines
    # make train, then make train again: the second continues the first, in the same folder.
    resumed = _result(results, "make train TRAIN_ARGS")
    assert f"resumed from {run_dir}/ckpt-4 at step 4" in resumed.stderr, resumed.stderr[-3000:]
    with open(os.path.join(run_dir, "train_result.json")) as f:
        assert json.load(f)["step"] == 6
    # Both ended cleanly, so the lock's record is cleared and nobody's lock was taken over.
    assert "taking over the lock" not in resumed.stderr
    assert open(os.path.join(run_dir, ".lock")).read() == ""
    grid = os.path.join(run_dir, "samples", "sample.png")
    assert _result(results, ".venv/bin/python bin/sample.py").stdout.strip() == grid
    assert tf.io.decode_png(tf.io.read_file(grid)).numpy().std() > 0
    # The default eval.num_real (10,000) on the default data (mnist5k: 5,000 images, no test
    # split) evaluates against what there is, and says so in its protocol.
    evaluated = json.loads(_result(results, ".venv/bin/python bin/eval.py").stdout
                           .strip().splitlines()[-1])
    assert evaluated["step"] == 6 and np.isfinite(evaluated["fcd"])
    assert evaluated["checkpoint"] == f"{run_dir}/ckpt-6"
    with open(os.path.join(run_dir, "eval", "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["protocol"]["real"] == 5000 and metrics["protocol"]["name"] == \
        "fcd0.5k_train5k"
    # Where the README says the best checkpoint goes.
    assert "runs/default/eval/best/" in open(README).read()
    assert os.path.exists(os.path.join(run_dir, "eval", "best", "ckpt-6.index"))
    exported = _result(results, ".venv/bin/python bin/export.py").stdout.strip()
    assert exported == os.path.join(run_dir, "export", "generator")
    assert os.path.exists(os.path.join(exported, "saved_model.pb"))
    tensorboard = next(line for line in lines if line.startswith(".venv/bin/tensorboard"))
    logdir = re.search(r"--logdir (\S+)", tensorboard).group(1)
    assert glob.glob(os.path.join(checkout, logdir, "default", "events.out.tfevents.*"))


@pytest.fixture(scope="module")
def pix2pix_quick_start(tmp_path_factory):
    """Every line of the README's pix2pix quick start (tiny: gin/tiny_pix2pix.gin)."""
    checkout = scratch_checkout(tmp_path_factory.mktemp("readme_pix2pix") / "paragan_tf")
    results = {}
    for line in readme_block("## Quick start for pix2pix"):
        results[line] = result = run(checkout, shorter(line))
        assert result.returncode == 0, (line, result.stdout[-2000:], result.stderr[-3000:])
    return checkout, results


def test_the_pix2pix_quick_start_samples_translates_exports_and_reloads(pix2pix_quick_start):
    checkout, results = pix2pix_quick_start
    run_dir = os.path.join(checkout, "runs", "pix2pix")
    grid = os.path.join(run_dir, "samples", "sample.png")
    assert _result(results, ".venv/bin/python bin/sample.py").stdout.strip() == grid
    # 8 validation pairs, a row each: input | output | target, 32 px, 2 px apart.
    assert tf.io.decode_png(tf.io.read_file(grid)).shape == (8 * 34 + 2, 3 * 34 + 2, 1)
    # The user's 28 x 28 edge drawings, fitted to the model's 32 px, one PNG each.
    out = os.path.join(checkout, "runs", "pix2pix_edges")
    assert sorted(os.listdir(out)) == sorted(os.listdir(os.path.join(REPO, "docs", "images",
                                                                      "edges")))
    for name in os.listdir(out):
        assert tf.io.decode_png(tf.io.read_file(os.path.join(out, name))).shape == (32, 32, 1)
    exported = _result(results, ".venv/bin/python bin/export.py").stdout.strip()
    assert exported == os.path.join(run_dir, "export", "generator")
    assert _result(results, ".venv/bin/python -c").stdout.strip() == "(2, 64, 64, 1)"
    # The SavedModel in a fresh process (TensorFlow alone) against the checkpoint's G.
    inputs = np.random.default_rng(0).uniform(-1, 1, (3, 32, 32, 1)).astype(np.float32)
    np.save(os.path.join(checkout, "inputs.npy"), inputs)
    served = run(checkout, ".venv/bin/python -c \"import numpy as np, tensorflow as tf; "
                 "m = tf.saved_model.load('runs/pix2pix/export/generator'); "
                 "np.save('served.npy', m.signatures['serving_default']("
                 "images=tf.constant(np.load('inputs.npy')))['images'].numpy())\"")
    assert served.returncode == 0, served.stderr[-3000:]
    from paragan_tf.train import experiment  # pylint: disable=import-outside-toplevel
    exp, _ = experiment.restore(run_dir)
    restored = exp.family.translate(experiment.eval_subject(exp), tf.constant(inputs))
    np.testing.assert_allclose(np.load(os.path.join(checkout, "served.npy")), restored.numpy(),
                               atol=1e-5)
