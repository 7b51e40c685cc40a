"""Where each test's time goes, as a pytest plugin (`-p tests.helpers.costs`; `make test`
loads it). Inert unless PARAGAN_TF_TEST_COSTS names a file: then every test appends one JSON
line there with its wall seconds (set-up, call, tear-down), the CPU seconds of the test's own
process, those of the processes it started and waited for (bin/ binaries, clusters: each
imports TensorFlow anew), and how many processes it started; and memory: the worker's
resident MiB after the test, the page faults it waited on disk for during it, and the
machine's available MiB after it (a worker that keeps what its tests built crowds the page
cache out, and then every process waits on its own code). xdist workers append to the
same file (one short write a line). benchmarks/probes/test_durations.py sums the lines.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time

import pytest

ENV = "PARAGAN_TF_TEST_COSTS"
_started = [0]  # processes started since the worker began (subprocess.Popen)


def _cpu(who) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _meminfo_mib(path: str, key: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) // 1024
    return -1


def pytest_configure(config):
    if not os.environ.get(ENV):
        return
    original = subprocess.Popen.__init__

    def counted(self, *args, **kwargs):
        _started[0] += 1
        original(self, *args, **kwargs)
    subprocess.Popen.__init__ = counted


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # pylint: disable=unused-argument
    path = os.environ.get(ENV)
    if not path:
        yield
        return
    began = (time.monotonic(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN),
             _started[0], resource.getrusage(resource.RUSAGE_SELF).ru_majflt)
    yield
    wall, own, children, started, faults = began
    line = dict(test=item.nodeid, wall=round(time.monotonic() - wall, 3),
                cpu_self=round(_cpu(resource.RUSAGE_SELF) - own, 3),
                cpu_children=round(_cpu(resource.RUSAGE_CHILDREN) - children, 3),
                processes=_started[0] - started,
                rss_mib=_meminfo_mib("/proc/self/status", "VmRSS"),
                major_faults=resource.getrusage(resource.RUSAGE_SELF).ru_majflt - faults,
                available_mib=_meminfo_mib("/proc/meminfo", "MemAvailable"),
                worker=os.environ.get("PYTEST_XDIST_WORKER", "main"))
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
