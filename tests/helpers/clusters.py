"""Multi-process runs on 127.0.0.1 for the tests: bin/launch_local.py in the background,
and waiting on any process of a test without a fixed deadline.

Launch is used by tests/e2e/test_scale_out.py and tests/train/test_async_trainer.py; the
waits (run_binary, run_while_progressing, wait_while_progressing) also by tests that start
binaries (tests/train/test_model_dir.py, measure/test_tuning.py, data/test_prepare.py,
eval/test_evaluator.py, benchmarks/test_step.py, tests/e2e/test_binaries.py and
e2e/test_crash_resume.py) and by tests/helpers/ps_cluster.py.

No wait here has a fixed deadline for training to get somewhere: a slow or loaded
machine trains slowly, not wrongly. A wait goes on as long as the run keeps printing
(every task's log lines, the step and round lines among them) and gives up only after
a stall: no new output for max(STALL_FLOOR, STALL_FACTOR x the longest pause between
two outputs seen so far in this wait), so the bound grows with the machine's own pace.
HARD_CAP is a safety net only, against a run that prints forever without getting
anywhere; the slowest wait of the suite takes a few minutes on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from typing import Callable, List, Optional, TypeVar

from tests.helpers.repo import PYTHON, REPO, relative

TINY = ["--gin_file=gin/tiny.gin", "--gin_bindings=train.sample_every=0"]

STALL_FLOOR = 300.0
STALL_FACTOR = 10.0
HARD_CAP = 3600.0

T = TypeVar("T")


def wait_while_progressing(done: Callable[[], Optional[T]], output: Callable[[], str],
                           what: str, stall_floor: Callable[[], float] = lambda: STALL_FLOOR,
                           poll: float = 0.3) -> T:
    """Polls `done()` every `poll` seconds until it returns something other than None and
    returns that. Raises AssertionError once `output()` (read every 0.3 s at most) has not
    grown for the stall limit (module docstring; `stall_floor()` is asked each time, for a
    run that announces a long silence)."""
    began = last_change = checked = time.monotonic()
    size, longest_pause = len(output()), 0.0
    while True:
        result = done()
        if result is not None:
            return result
        now = time.monotonic()
        if now - checked >= 0.3:
            checked, grown = now, len(output())
            if grown != size:
                longest_pause = max(longest_pause, now - last_change)
                size, last_change = grown, now
            limit = max(stall_floor(), STALL_FACTOR * longest_pause)
            if now - last_change > limit or now - began > HARD_CAP:
                raise AssertionError(
                    f"{what}: no new output for {now - last_change:.0f} s (stall limit "
                    f"{limit:.0f} s; longest pause before {longest_pause:.1f} s), "
                    f"{now - began:.0f} s in all:\n{output()[-4000:]}")
        time.sleep(poll)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def run_while_progressing(argv: List[str], env=None, cwd: str = REPO
                          ) -> subprocess.CompletedProcess:
    """subprocess.run(argv, capture_output=True, text=True) without a deadline: waits while
    the process prints (on stdout or stderr); on a stall it is killed and AssertionError
    raised."""
    with tempfile.TemporaryDirectory() as folder:
        out_path, err_path = os.path.join(folder, "out"), os.path.join(folder, "err")
        with open(out_path, "w") as out, open(err_path, "w") as err:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=err, text=True)
        try:
            code = wait_while_progressing(
                proc.poll, lambda: _read(out_path) + _read(err_path), " ".join(argv[1:3]))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return subprocess.CompletedProcess(argv, code, _read(out_path), _read(err_path))


def run_binary(script: str, *args: str, env=None) -> subprocess.CompletedProcess:
    """repo.run_binary (bin/<script> from the repository root), waiting while it makes
    progress instead of up to a fixed timeout."""
    return run_while_progressing([PYTHON, os.path.join(REPO, "bin", script), *args],
                                 env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})))


class Launch:
    """bin/launch_local.py in the background, its output in a file we can poll."""

    def __init__(self, model_dir, *args, config=tuple(TINY)):
        """`config`: the gin flags before `args` (default: gin/tiny.gin's)."""
        self.model_dir = str(model_dir)
        self.log_path = os.path.join(self.model_dir + ".log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [PYTHON, os.path.join(REPO, "bin", "launch_local.py"),
             f"--model_dir={relative(self.model_dir)}", *config, *args],
            cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT)

    def output(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def wait_for(self, pattern: str) -> re.Match:
        """The first match of `pattern` in the output, waiting while the run makes progress;
        on a stall or an early exit the cluster is stopped (a run of total_steps=100000 left
        behind would slow every later test down)."""
        def found():
            running = self.proc.poll() is None  # first: an ended run's output is complete
            match = re.search(pattern, self.output())
            if match or running:
                return match
            return False  # ended without it
        try:
            match = wait_while_progressing(found, self.output, f"waiting for {pattern!r}")
        except AssertionError:
            self.stop()
            raise
        if not match:
            self.stop()
            raise AssertionError(f"no {pattern!r} in the output:\n{self.output()[-4000:]}")
        return match

    def stop(self) -> None:
        """Kills the launcher; its children die with it (they ask for SIGKILL on its death)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def pid(self, task: str) -> int:
        with open(os.path.join(self.model_dir, "launch.json")) as f:
            return json.load(f)[task]

    def finish(self) -> int:
        """The launcher's exit code, waiting while the run makes progress (stopped on a
        stall)."""
        try:
            code = wait_while_progressing(self.proc.poll, self.output, "waiting for the end")
        except AssertionError:
            self.stop()
            raise
        self.log.close()
        return code
