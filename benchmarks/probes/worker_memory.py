"""What a test worker keeps of each test: a pytest plugin that, after every test, frees what
Python can (the iterators paragan_tf/teardown.py parks, a garbage collection, tf_keras'
clear_session, TensorFlow's kernel cache, glibc's malloc_trim) and prints one line: the
resident MiB before and after, the parked iterators freed, and the live traced functions
(AtomicFunction) and functions registered with the eager context that are left.

    PYTHONPATH=. .venv/bin/python -m pytest -p no:xdist -p benchmarks.probes.worker_memory \
        -s tests/train/test_step.py -k "one_step_trains or two_replicas_match or nan_in" \
        | grep '^KEPT'

(2026-11-30, AMD EPYC Zen 4 family 25 model 17, at 6e44b30: 1,139 MiB kept after the first
of those 6 tests, 2,143 after the sixth, 0.2 GB a training test, with 42 traced functions
live: what a worker keeps is TensorFlow's native memory, which nothing above returns.
Hence the Makefile's two sessions.)
"""

import ctypes
import gc

import pytest

from benchmarks.probes.memory_trim import rss_mib


@pytest.fixture(autouse=True)
def _kept(request):
    yield
    # Imported here: the plugin loads before tests/conftest.py configures TensorFlow.
    import tf_keras  # pylint: disable=import-outside-toplevel
    from tensorflow.python.eager import context  # pylint: disable=import-outside-toplevel

    from paragan_tf import teardown  # pylint: disable=import-outside-toplevel
    gc.collect()
    before, parked = rss_mib(), len(teardown.PARKED)
    del teardown.PARKED[:]  # destroyed now: this probe accepts tf.data's teardown wait
    gc.collect()
    tf_keras.backend.clear_session()
    context.context().clear_kernel_cache()
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    functions = sum(type(o).__name__ == "AtomicFunction" for o in gc.get_objects())
    print(f"\nKEPT {request.node.name}: {before} MiB -> {rss_mib()} MiB after freeing "
          f"{parked} parked objects; {functions} traced functions live, "
          f"{len(context.context().list_function_names())} registered", flush=True)
