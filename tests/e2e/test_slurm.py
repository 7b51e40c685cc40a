"""Slurm, for real: a single-node cluster on localhost runs bin/train.sbatch, whose srun
starts two bin/train.py tasks training under MultiWorkerMirroredStrategy."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.helpers.repo import REPO
from tests.helpers.slurm_cluster import local_cluster


@pytest.mark.slow
def test_sbatch_and_srun_train_two_workers(tmp_path):
    model_dir = tmp_path / "run"
    output = tmp_path / "job.out"
    with local_cluster(str(tmp_path / "slurm")) as env:
        env = dict(env, PYTHON=os.path.join(REPO, ".venv", "bin", "python"),
                   PYTHONUNBUFFERED="1")
        env = {k: v for k, v in env.items() if k != "TF_CONFIG"}
        job = subprocess.run(
            ["sbatch", "--wait", "--nodes=1", "--ntasks-per-node=2", f"--output={output}",
             "bin/train.sbatch", "gin/tiny.gin", str(model_dir), "train.total_steps = 4"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        log = output.read_text() if output.exists() else ""
        # The first error lines, which a tail of the log can miss behind the tracebacks.
        errors = [line for line in log.splitlines() if "Error" in line][:10]
        assert job.returncode == 0, (job.stdout, job.stderr, errors, log[-4000:])
        accounting = subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True)
        assert accounting.stdout.strip() == ""  # the job is gone from the queue
    assert re.search(r"job \d+: 2 task\(s\) on \S+: gin/tiny.gin", log)
    # Both workers trained in lockstep: the same final weights on each.
    digests = re.findall(r"final weights digest (\w+)", log)
    assert len(digests) == 2 and digests[0] == digests[1], log[-4000:]
    assert len(re.findall(r"from step 0 to 4 on 2 replica\(s\)", log)) == 2, log[-4000:]
    assert (model_dir / "ckpt-4.index").exists()
