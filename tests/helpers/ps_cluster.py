"""A parameter-server cluster on 127.0.0.1 whose chief is a test's own coordinator script.

`coordinate(script, argument, folder)` starts the server tasks (bin/train.py serving: one
parameter server, two workers), runs `script` (tests/helpers/ps_streams.py,
tests/helpers/ps_buffer.py) as the chief and returns the last line it printed, as JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess

from paragan_tf.distribute import launcher
from tests.helpers import clusters
from tests.helpers.repo import PYTHON, REPO


@contextlib.contextmanager
def servers(workers: int = 2, ps: int = 1):
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


def coordinate(script: str, argument, folder) -> dict:
    """Runs `script` as the chief of a fresh cluster; its last output line, as JSON. No
    deadline: it may take as long as it needs while it keeps printing (clusters.py); a
    script that announces a hold of N s ("gives up after N s") gets twice that."""
    stdout, stderr = (os.path.join(str(folder), f"coordinator.{n}") for n in ("out", "err"))

    def output():
        with open(stdout) as out, open(stderr) as err:
            return out.read() + err.read()

    def floor():
        hold = re.search(r"gives up after (\d+) s", output())
        return max(clusters.STALL_FLOOR, 2 * float(hold.group(1)) if hold else 0.0)
    with servers() as chief, open(stdout, "w") as out, open(stderr, "w") as err:
        proc = subprocess.Popen([PYTHON, script, str(argument)], cwd=REPO,
                                env=dict(os.environ, TF_CONFIG=chief), stdout=out,
                                stderr=err, text=True)
        try:
            code = clusters.wait_while_progressing(proc.poll, output, script, floor)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    with open(stdout) as out, open(stderr) as err:
        stdout, stderr = out.read(), err.read()
    assert code == 0, stderr[-3000:]
    report = json.loads(stdout.strip().splitlines()[-1])
    print(report)  # the numbers, for the closing note (pytest -s)
    return report
