"""Is a test worker's memory held or only fragmented? A pytest plugin: at the end of every test
module it prints the process's resident MiB, then again after `gc.collect()` and
tf_keras' `clear_session()`, then after glibc's `malloc_trim(0)` (which returns freed heap
pages to the system). What the last number keeps is memory something still holds.

    PYTHONPATH=. .venv/bin/python -m pytest -p no:xdist -p benchmarks.probes.memory_trim -s \
        tests/families/test_biggan_networks.py tests/eval/test_inception.py \
        tests/distribute/test_sharded_adam.py | grep '^MEM'

(2026-11-29, Intel Xeon family 6 model 106, in that file order after the start order:
test_inception 2,581 -> 2,576 -> 2,063 MiB; test_sharded_adam 2,882 -> 2,882 -> 2,804;
test_biggan 2,923 -> 2,922 -> 2,861.)
"""

import ctypes
import gc

import pytest


def rss_mib() -> int:
    """This process's resident memory, MiB (also benchmarks/probes/worker_memory.py's)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return -1


@pytest.fixture(autouse=True, scope="module")
def _trim(request):
    yield
    before = rss_mib()
    gc.collect()
    import tf_keras  # pylint: disable=import-outside-toplevel
    tf_keras.backend.clear_session()
    gc.collect()
    collected = rss_mib()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    print(f"\nMEM {request.module.__name__}: {before} MiB -> gc and clear_session {collected} "
          f"-> malloc_trim {rss_mib()}", flush=True)
