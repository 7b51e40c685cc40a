"""A real TensorBoard on 127.0.0.1 for the tests that read what a run wrote through its HTTP API."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import urllib.request

from paragan_tf.distribute import launcher
from tests.helpers.repo import PYTHON


@contextlib.contextmanager
def tensorboard(logdir: str, ready: str = "/data/plugin/scalars/tags"):
    """A real TensorBoard serving `logdir` on 127.0.0.1: yields get(path, body=None), which
    GETs (or POSTs `body` as JSON) and returns the parsed answer. Ready once `ready`
    answers with some run (the events are read a moment after start)."""
    port = launcher.free_port()
    server = subprocess.Popen(
        [PYTHON, "-m", "tensorboard.main", "--logdir", logdir, "--host", "127.0.0.1",
         "--port", str(port), "--load_fast=false"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def get(path: str, body=None):
        request = urllib.request.Request(  # POSTed as the dashboard does: JSON
            f"http://127.0.0.1:{port}{path}", headers={"Content-Type": "application/json"},
            data=None if body is None else json.dumps(body).encode())
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    try:
        deadline, answer = time.time() + 120, {}
        while not answer:
            assert server.poll() is None, server.stdout.read()
            assert time.time() < deadline, f"TensorBoard did not serve {ready} of {logdir}"
            try:
                answer = get(ready)
            except OSError:
                pass
            time.sleep(0.5)
        yield get
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
