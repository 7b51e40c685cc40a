"""The asynchronous (parameter-server) trainer's rules, on real server processes on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess

import pytest

from conftest import PYTHON, REPO
from paragan_tf.distribute import launcher

pytestmark = pytest.mark.slow


@contextlib.contextmanager
def _servers(workers: int = 2, ps: int = 1):
    """A parameter-server cluster's server tasks (bin/train.py serving); yields TF_CONFIG of
    its chief, for a coordinator run as a subprocess."""
    spec = {"chief": [f"127.0.0.1:{launcher.free_port()}"],
            "worker": [f"127.0.0.1:{launcher.free_port()}" for _ in range(workers)],
            "ps": [f"127.0.0.1:{launcher.free_port()}" for _ in range(ps)]}
    procs = []
    try:
        for job in ("ps", "worker"):
            for index in range(len(spec[job])):
                env = dict(os.environ, TF_CONFIG=json.dumps(
                    {"cluster": spec, "task": {"type": job, "index": index}}))
                procs.append(subprocess.Popen(
                    [PYTHON, "bin/train.py", "--model_dir=/nonexistent",
                     "--gin_bindings=strategy.kind='parameter_server'"], cwd=REPO, env=env,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield json.dumps({"cluster": spec, "task": {"type": "chief", "index": 0}})
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _chance_bound(a: int, b: int, population: int) -> float:
    """Examples two independent uniform draws of a and b share, plus 6 standard deviations."""
    mean = a * b / population
    return mean + 6 * mean ** 0.5 + 1


def test_each_worker_reads_its_own_permutation_and_the_pid_offset_scheme_did_not():
    batches = 4  # 256 examples per worker out of 5,000: ~13 shared by chance
    with _servers() as chief:
        out = subprocess.run([PYTHON, "tests/ps_streams.py", str(batches)], cwd=REPO,
                             env=dict(os.environ, TF_CONFIG=chief), capture_output=True,
                             text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    print(report)  # the numbers, for the closing note (pytest -s)
    assert report["reproducible"], "a rebuilt input gave a worker other examples"
    for scheme in ("worker_seed", "pid_offset"):
        assert report[scheme]["examples"] == [batches * 64] * 2
    new, old = report["worker_seed"], report["pid_offset"]
    bound = _chance_bound(*new["examples"], new["dataset"])
    assert new["overlap"] <= bound, report
    # The negative control: consecutive pids shift one permutation by a few examples.
    assert old["overlap"] > bound, report
