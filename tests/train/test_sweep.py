"""Sweeps: expansion and names, validation before any run, skip/resume with a fake trainer,
the Slurm job array, and a tiny two-run sweep end to end with its summary table."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap

import pytest

from paragan_tf.errors import ConfigError
from paragan_tf.train import sweep as sweep_lib
from tests.helpers.repo import PYTHON, REPO, run_binary, scratch_checkout
from tests.helpers.tensorboard_server import tensorboard


def _sweep_file(tmp_path, body: str, name="s.gin") -> str:
    path = tmp_path / name
    path.write_text("# Sweep: a test sweep.\n" + textwrap.dedent(body))
    return str(path)


def test_product_and_zip_expand_in_order_with_stable_unique_names(tmp_path):
    path = _sweep_file(tmp_path, """
        sweep.base = ['gin/tiny.gin']
        sweep.bindings = ['train.total_steps = 3']
        sweep.product = {'train.d_steps': [1, 2], 'loss.fn': ['@hinge', '@non_saturating']}
        sweep.zip = {'G/optimizer.learning_rate': [1e-4, 2e-4],
                     'D/optimizer.learning_rate': [4e-4, 8e-4]}
    """)
    runs = sweep_lib.expand(sweep_lib.load(path), "/sweeps/s")
    assert len(runs) == 8
    assert runs[0].name == ("d_steps=1,fn=hinge,G.learning_rate=0.0001,"
                            "D.learning_rate=0.0004")
    assert runs[1].name == ("d_steps=1,fn=hinge,G.learning_rate=0.0002,"
                            "D.learning_rate=0.0008")  # zipped: the pairs go together
    assert runs[-1].varying == {"train.d_steps": 2, "loss.fn": "@non_saturating",
                                "G/optimizer.learning_rate": 2e-4,
                                "D/optimizer.learning_rate": 8e-4}
    assert runs[-1].bindings == ["train.total_steps = 3", "train.d_steps = 2",
                                 "loss.fn = @non_saturating",
                                 "G/optimizer.learning_rate = 0.0002",
                                 "D/optimizer.learning_rate = 0.0008"]
    assert runs[3].model_dir == os.path.join("/sweeps/s", runs[3].name)
    assert len({r.name for r in runs}) == 8
    again = sweep_lib.expand(sweep_lib.load(path), "/sweeps/s")
    assert [r.name for r in again] == [r.name for r in runs]


def test_malformed_sweeps_are_config_errors(tmp_path):
    uneven = _sweep_file(tmp_path, """
        sweep.base = ['gin/tiny.gin']
        sweep.zip = {'train.d_steps': [1, 2], 'train.seed': [1, 2, 3]}
    """)
    with pytest.raises(ConfigError, match="same number of values"):
        sweep_lib.load(uneven)
    same_names = _sweep_file(tmp_path, """
        sweep.base = ['gin/tiny.gin']
        sweep.product = {'train.d_steps': [1, 1]}
    """, "dup.gin")
    with pytest.raises(ConfigError, match="several runs alike"):
        sweep_lib.expand(sweep_lib.load(same_names), "/x")
    broken = _sweep_file(tmp_path, "sweep.base = ['gin/tiny.gin'\n", "broken.gin")
    with pytest.raises(ConfigError, match="broken.gin"):
        sweep_lib.load(broken)


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REPO, "gin", "sweeps", "*.gin"))))
def test_every_shipped_sweep_opens_with_its_question_and_validates(path):
    with open(path) as f:
        assert f.readline().startswith("# Sweep:"), path
    runs = sweep_lib.expand(sweep_lib.load(path), "/x")
    sweep_lib.validate(runs)
    assert len(runs) >= 2


def test_cores_are_divided_between_parallel_runs():
    assert sweep_lib.divide_cores([0, 1], 2) == [[0], [1]]
    assert sweep_lib.divide_cores([0, 1, 2, 3, 4], 2) == [[0, 2, 4], [1, 3]]
    assert sweep_lib.divide_cores([0, 1], 4) == [[0], [1]]  # never more runs than cores


def test_invalid_bindings_are_reported_before_any_run_starts(tmp_path):
    path = _sweep_file(tmp_path, """
        sweep.base = ['gin/tiny.gin']
        sweep.product = {'train.batch_size': [8, 0], 'train.d_stepz': [1]}
    """)
    proc = run_binary("sweep.py", f"--sweep={path}", f"--root={tmp_path / 'root'}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "2 of 2 runs have invalid settings; nothing was started" in proc.stderr
    assert "batch_size=8,d_stepz=1: gin config: Configurable 'train' doesn't have a " \
           "parameter named 'd_stepz'" in proc.stderr
    # A value that parses but is wrong: caught by the same checks the trainer makes.
    path = _sweep_file(tmp_path, """
        sweep.base = ['gin/tiny.gin']
        sweep.product = {'D/optimizer.learning_rate': [2e-4, 0.0]}
    """, "lr.gin")
    proc = run_binary("sweep.py", f"--sweep={path}", f"--root={tmp_path / 'root'}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "1 of 2 runs have invalid settings" in proc.stderr
    assert "D.learning_rate=0: D/optimizer.learning_rate=0.0 must be positive" in proc.stderr
    assert not (tmp_path / "root").exists()


FAKE_TRAINER = """\
import json, os, sys
model_dir = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--model_dir=")][0]
os.makedirs(model_dir, exist_ok=True)
calls = os.path.join(model_dir, "calls")
n = len(open(calls).read()) if os.path.exists(calls) else 0
open(calls, "a").write("x")
if "seed=1" in model_dir and n == 0:
    open(os.path.join(model_dir, "checkpoint"), "w").write('model_checkpoint_path: "ckpt-2"')
    print("fake crash"); sys.exit(3)   # dies once, after a checkpoint: unfinished
json.dump({"step": 3, "perf/images_per_sec": 100.0 + n}, open(os.path.join(model_dir, "train_result.json"), "w"))
"""


def test_rerunning_skips_finished_runs_resumes_unfinished_and_survives_failures(tmp_path):
    fake = tmp_path / "fake_python.py"
    fake.write_text(FAKE_TRAINER)
    launcher = tmp_path / "fake_python"  # stands in for the python that runs bin/train.py
    launcher.write_text(f"#!/bin/sh\nexec {sys.executable} {fake} \"$@\"\n")
    launcher.chmod(0o755)
    path = _sweep_file(tmp_path, """
        sweep.base = ['gin/tiny.gin']
        sweep.product = {'train.seed': [0, 1, 2]}
    """)
    root = tmp_path / "root"
    args = (f"--sweep={path}", f"--root={root}", f"--python={launcher}")
    first = run_binary("sweep.py", *args)
    assert first.returncode == 1, first.stderr[-3000:]
    out = first.stdout
    assert "done   seed=0" in out and "done   seed=2" in out
    assert "FAILED seed=1 (exit 3" in out and "fake crash" in out
    assert "1 run(s) failed: seed=1" in out
    second = run_binary("sweep.py", *args)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "skip   seed=0: finished" in second.stdout and "skip   seed=2: finished" in second.stdout
    assert "resume seed=1" in second.stdout and "done   seed=1" in second.stdout
    for seed, calls in ((0, 1), (1, 2), (2, 1)):
        assert (root / f"seed={seed}" / "calls").read_text() == "x" * calls


def test_slurm_job_array_for_three_runs_is_valid_bash(tmp_path):
    path = _sweep_file(tmp_path, """
        sweep.base = ['gin/tiny.gin']
        sweep.product = {'train.seed': [0, 1, 2]}
    """)
    proc = run_binary("sweep.py", f"--sweep={path}", f"--root={tmp_path}/root", "--slurm")
    assert proc.returncode == 0, proc.stderr[-2000:]
    script = tmp_path / "root" / "sweep.sbatch"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    assert "#SBATCH --array=0-2\n" in text
    for i in range(3):
        assert f"  {i}) exec srun " in text and f"--model_dir={tmp_path}/root/seed={i}" in text
    # Each array task runs its own run: the case statement picks it by SLURM_ARRAY_TASK_ID.
    env = dict(os.environ, SLURM_ARRAY_TASK_ID="1", PATH=f"{tmp_path}:{os.environ['PATH']}")
    (tmp_path / "srun").write_text("#!/bin/sh\necho \"$@\"\n")
    (tmp_path / "srun").chmod(0o755)
    ran = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert ran.returncode == 0 and "seed=1" in ran.stdout and "seed=0" not in ran.stdout


def test_tf_config_sets_name_every_task_of_every_run(tmp_path):
    path = _sweep_file(tmp_path, """
        sweep.base = ['gin/tiny.gin']
        sweep.product = {'train.seed': [0, 1]}
    """)
    proc = run_binary("sweep.py", f"--sweep={path}", f"--root={tmp_path}/root",
                      "--tf_config_hosts=a:2222,b:2222")
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = json.loads((tmp_path / "root" / "seed=1" / "tf_config" / "worker-0.json").read_text())
    assert config == {"cluster": {"chief": ["a:2222"], "worker": ["b:2222"]},
                      "task": {"type": "worker", "index": 0}}
    commands = (tmp_path / "root" / "tf_config_commands.sh").read_text()
    assert commands.count("multi_worker_mirrored") == 4


@pytest.mark.slow
def test_tiny_sweep_end_to_end_writes_hparams_and_the_summary_table(tmp_path, mnist_classifier):
    model_path, _ = mnist_classifier
    checkout = scratch_checkout(tmp_path / "checkout")  # --root relative to it, as typed
    root = tmp_path / "checkout" / "runs" / "sweep"
    evaluation = [f"eval.classifier_path = '{model_path}'", "eval.every_steps = 4",
                  "eval.num_samples = 100", "eval.num_real = 100", "eval.batch_size = 50"]
    proc = subprocess.run(
        [PYTHON, "bin/sweep.py", "--sweep=gin/sweeps/tiny.gin", "--root=runs/sweep",
         "--parallel=2", *[f"--gin_bindings={b}" for b in evaluation]], cwd=checkout,
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert "on core(s) [0]" in proc.stdout and "on core(s) [1]" in proc.stdout
    # Runs without a checkpoint start (the HParams record made their folders first).
    assert "start  D.learning_rate=0.0002 [1/2]" in proc.stdout, proc.stdout
    assert "resume" not in proc.stdout
    table = (root / "summary.md").read_text()
    print(table)
    lines = table.strip().splitlines()
    assert lines[0].startswith("| run | status | D/optimizer.learning_rate | fcd | "
                               "conditional_accuracy |")
    assert len(lines) == 4 and all("| finished |" in line for line in lines[2:])
    fcds = [float(line.split("|")[4]) for line in lines[2:]]
    assert fcds == sorted(fcds)  # best (lowest FCD) first
    csv_rows = (root / "summary.csv").read_text().strip().splitlines()
    assert len(csv_rows) == 3 and "perf/images_per_sec" in csv_rows[0]
    # HParams as the dashboard reads them: the swept axis typed, marked as differing, and
    # each run's value on it.
    with tensorboard(str(root)) as get:
        infos = get("/data/plugin/hparams/experiment", {"experimentName": ""})["hparamInfos"]
        axis = next(i for i in infos if i["name"] == "D/optimizer.learning_rate")
        assert axis["type"] == "DATA_TYPE_FLOAT64" and axis["differs"] is True, infos
        groups = get("/data/plugin/hparams/session_groups",
                     {"experimentName": "", "startIndex": 0, "sliceSize": 10,
                      "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS"],
                      "colParams": [{"hparam": "D/optimizer.learning_rate"}]})
        values = sorted(g["hparams"]["D/optimizer.learning_rate"]
                        for g in groups["sessionGroups"])
        assert values == [2e-4, 8e-4], groups
    again = run_binary("sweep.py", "--sweep=gin/sweeps/tiny.gin", f"--root={root}",
                       *[f"--gin_bindings={b}" for b in evaluation])
    assert again.returncode == 0 and again.stdout.count(": finished") == 2
