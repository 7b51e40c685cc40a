"""bin/train.py killed with SIGKILL (once in the middle of a checkpoint save, then at random
moments) and relaunched: the newest checkpoint loads, the step never goes backwards, the
weights at resume are the checkpoint's, and the run ends with the weights of a run that
was never interrupted."""

from __future__ import annotations

import os
import random
import re
import subprocess
import time

import gin
import pytest
import tensorflow as tf

from paragan_tf.train import checkpoints
from paragan_tf.train import experiment
from tests.helpers import clusters
from tests.helpers.repo import PYTHON, REPO

BINDINGS = ("train.total_steps = 12", "train.d_steps = 2", "train.checkpoint_every = 1",
            "train.steps_per_loop = 1", "train.log_every = 1", "train.sample_every = 100",
            "train.max_to_keep = 100", "dataset.random_flip = True")


def _launch(model_dir: str, log_path: str) -> subprocess.Popen:
    args = [PYTHON, os.path.join(REPO, "bin", "train.py"), "--gin_file=gin/tiny.gin",
            f"--model_dir={model_dir}"] + [f"--gin_bindings={b}" for b in BINDINGS]
    log = open(log_path, "w")  # pylint: disable=consider-using-with
    return subprocess.Popen(args, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))


def _newest_step(model_dir: str) -> int:
    path = tf.train.latest_checkpoint(model_dir)
    return int(path.rsplit("-", 1)[1]) if path else 0


def _wait_for(condition, proc, log_path, poll=0.0005):
    """Until condition(), while the run keeps printing (a line a step): no fixed deadline."""
    def met():
        if condition():
            return True
        assert proc.poll() is None, "the run ended before it could be killed"
        return None
    clusters.wait_while_progressing(met, lambda: _read(log_path), "waiting for the run",
                                    poll=poll)


def _read(path) -> str:
    with open(path) as f:
        return f.read()


def _finish(proc, log_path) -> int:
    """The run's exit code, waiting while it keeps printing."""
    return clusters.wait_while_progressing(proc.poll, lambda: _read(log_path), "the run")


def _digest_of(checkpoint: str, tiny_gin) -> str:
    tiny_gin(*BINDINGS)
    exp = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
    checkpoints.Checkpointer(os.path.dirname(checkpoint), 100, **exp.trackables()).restore(
        checkpoint)
    return experiment.weights_digest(exp)


@pytest.mark.slow
def test_sigkill_anywhere_then_relaunch_resumes_exactly(tmp_path, tiny_gin):
    reference = _launch(str(tmp_path / "straight"), str(tmp_path / "straight.log"))
    assert _finish(reference, tmp_path / "straight.log") == 0
    final = re.findall(r"final weights digest (\w+)", (tmp_path / "straight.log").read_text())

    model_dir = str(tmp_path / "crashed")
    rng = random.Random(int(time.time()))
    kills = []
    for attempt in range(2):
        log = str(tmp_path / f"attempt{attempt}.log")
        proc = _launch(model_dir, log)
        begun = _newest_step(model_dir)
        # Let the relaunched run write a checkpoint of its own first. Polled every 50 ms:
        # reading the checkpoint state 2,000 times a second through the start-up would
        # take a core from the run (and from the tests beside this one).
        _wait_for(lambda: _newest_step(model_dir) > begun, proc, log, poll=0.05)
        if attempt == 0:
            # In the middle of a save: TensorFlow writes into ckpt-N_temp first (a
            # directory listing every 0.5 ms: the window is short).
            _wait_for(lambda: any("_temp" in f for f in os.listdir(model_dir)), proc, log)
            moment = "during a save"
        else:
            delay = rng.uniform(0.0, 1.5)
            time.sleep(delay)
            moment = f"{delay:.2f} s after its first checkpoint"
        during_save = any("_temp" in f for f in os.listdir(model_dir))
        proc.kill()
        proc.wait()
        if proc.returncode != -9:  # it finished before the kill: nothing to resume
            break
        kills.append((_newest_step(model_dir), moment, during_save))
    print("kills (newest checkpoint step, moment, temp files present):", kills)
    assert kills and kills[0][2], "the first kill should land inside a checkpoint save"

    last = str(tmp_path / "last.log")
    assert _finish(_launch(model_dir, last), last) == 0
    logs = [(tmp_path / f"attempt{i}.log").read_text() for i in range(1, len(kills))]
    logs.append(open(last).read())
    previous = 0
    for (killed_at, _, _), text in zip(kills, logs):
        resumed = re.search(r"resumed from (\S+) at step (\d+), weights digest (\w+)", text)
        assert resumed, text[-2000:]
        path, step, digest = resumed.group(1), int(resumed.group(2)), resumed.group(3)
        # The newest checkpoint at the kill is the one that loads: no step goes backwards.
        assert step == killed_at >= previous
        previous = step
        gin.clear_config()
        assert digest == _digest_of(path, tiny_gin), path
    assert re.findall(r"final weights digest (\w+)", open(last).read()) == final
    assert "left by a checkpoint save that was interrupted" in logs[0]
    assert not [f for f in os.listdir(model_dir) if "_temp" in f]


