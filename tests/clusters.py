"""Multi-process runs on 127.0.0.1 for the tests: bin/launch_local.py in the background.

Used by tests/e2e/test_scale_out.py and tests/test_async_loop.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

from conftest import PYTHON, REPO, relative

TINY = ["--gin_file=gin/tiny.gin", "--gin_bindings=train.sample_every=100000"]


class Launch:
    """bin/launch_local.py in the background, its output in a file we can poll."""

    def __init__(self, model_dir, *args):
        self.model_dir = str(model_dir)
        self.log_path = os.path.join(self.model_dir + ".log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [PYTHON, os.path.join(REPO, "bin", "launch_local.py"),
             f"--model_dir={relative(self.model_dir)}", *TINY, *args],
            cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT)

    def output(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def wait_for(self, pattern: str, timeout: float = 240) -> re.Match:
        """The first match of `pattern` in the output; on a timeout the cluster is stopped
        (a run of total_steps=100000 left behind would slow every later test down)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.output())
            if match:
                return match
            if self.proc.poll() is not None:
                break
            time.sleep(0.3)
        self.stop()
        raise AssertionError(f"no {pattern!r} in the output:\n{self.output()[-4000:]}")

    def stop(self) -> None:
        """Kills the launcher; its children die with it (they ask for SIGKILL on its death)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def pid(self, task: str) -> int:
        with open(os.path.join(self.model_dir, "launch.json")) as f:
            return json.load(f)[task]

    def finish(self, timeout: float = 240) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        self.log.close()
        return code
