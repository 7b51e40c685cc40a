"""Where Python's garbage collector stops a test worker: a pytest plugin that appends one JSON
line to $GC_PAUSES for every collection longer than a second, with the test it ran in and
its generation. A long one is either a full collection walking everything the worker keeps
(1-5 s each; 47 over 1 s, 103 s in all, at b0c38e1 on 2026-11-30) or garbage whose
destructor blocks: a distributed tf.data iterator nobody parked (paragan_tf/teardown.py; 82 s
once, after tests/eval/test_inception.py's evaluator, which now parks them). Freezing what
survives each test out of the collector (gc.freeze) ended the walks but kept garbage too: one
worker held 15.6 GB at 43 % of the suite, more than either worker at the end of a run without
it (13.4 and 9.8 GB, 2026-11-29: PARAGAN_TF_TEST_COSTS), so the suite does not freeze.

    GC_PAUSES=/tmp/gc.jsonl PYTHONPATH=. .venv/bin/python -m pytest -n 2 --dist loadfile \
        --no-loadscope-reorder -p benchmarks.probes.gc_pauses
    python -c "import json; [print(l) for l in sorted(open('/tmp/gc.jsonl'), \
        key=lambda l: -json.loads(l)['seconds'])[:20]]"
"""

import gc
import json
import os
import time

import pytest

_now = {"test": None, "began": 0.0}


def _timed(phase, info):
    if phase == "start":
        _now["began"] = time.monotonic()
        return
    seconds = time.monotonic() - _now["began"]
    if seconds > 1.0:
        with open(os.environ["GC_PAUSES"], "a") as f:
            f.write(json.dumps(dict(test=_now["test"], seconds=round(seconds, 2),
                                    generation=info["generation"])) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # pylint: disable=unused-argument
    _now["test"] = item.nodeid
    yield


def pytest_configure(config):  # pylint: disable=unused-argument
    if os.environ.get("GC_PAUSES"):
        gc.callbacks.append(_timed)
