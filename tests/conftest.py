"""Shared test set-up: tf-keras, two logical CPUs, a clean gin config per test.

The CPU is split into two logical devices before TensorFlow initialises, so
multi-replica code (MirroredStrategy, sync BN, cross-replica sums) runs in the
same process as single-device tests.
"""

from __future__ import annotations

import os
import subprocess
import sys

import paragan_tf  # noqa: F401  (pins tf-keras first)

import gin
import pytest
import tensorflow as tf

from paragan_tf.distribute import strategy as strategy_lib

strategy_lib.split_cpu(2)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable


@pytest.fixture(autouse=True)
def clean_gin():
    gin.clear_config()
    yield
    gin.clear_config()


@pytest.fixture
def tiny_gin():
    """Parses gin/tiny.gin plus extra bindings (unfinalised, so tests may add more)."""
    from paragan_tf import config as config_lib

    def parse(*bindings):
        config_lib.parse(["gin/tiny.gin"], list(bindings), finalize=False)
    return parse


def run_binary(script: str, *args: str, timeout: float = 300, env=None) -> subprocess.CompletedProcess:
    """Runs bin/<script> in a fresh process from the repository root."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run([PYTHON, os.path.join(REPO, "bin", script), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, env=full_env)


def mirrored_2() -> tf.distribute.Strategy:
    return tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())
