"""How much of an in-process test's time is TensorFlow's graph optimiser (Grappler)? A pytest
plugin that turns Grappler's meta-optimizer off in the test process when NO_GRAPPLER is set:

    NO_GRAPPLER=1 /usr/bin/time -f "%e s wall, %U s user" .venv/bin/python -m pytest -q \
        -p benchmarks.probes.no_grappler tests/train/test_step.py -k "every_setting or one_step"

Unset, it changes nothing (the control). Not for the suite itself: the product runs with
Grappler on, and a test without it would not test the graphs users run.
"""

from __future__ import annotations

import os


def pytest_configure(config):  # pylint: disable=unused-argument
    if os.environ.get("NO_GRAPPLER"):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
