"""How much of an in-process test's time is TensorFlow's graph optimiser (Grappler)? A pytest
plugin that turns Grappler's meta-optimizer off in the test process when NO_GRAPPLER is set:

    NO_GRAPPLER=1 /usr/bin/time -f "%e s wall, %U s user" .venv/bin/python -m pytest -q \
        -p benchmarks.probes.no_grappler tests/train/test_step.py -k "every_setting or one_step"

Unset, it changes nothing (the control). The suite itself now runs its in-process tests with
Grappler off (tests/conftest.py, fixture graph_optimizer; the learning gate and every binary
the tests start keep it on); with that fixture in place, compare a file's CPU seconds with the
fixture's `is None` forced to False instead (2026-11-29, Intel Xeon family 6 model 106:
tests/distribute/test_placement.py 206.6 CPU s on, 191.0 off).
"""

from __future__ import annotations

import os


def pytest_configure(config):  # pylint: disable=unused-argument
    if os.environ.get("NO_GRAPPLER"):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
