"""pix2pix's golden (tests/golden/make_pix2pix_golden.py: the reference's networks, losses
and one training iteration) as fixtures for the tests that compare with it: import them
into a test module."""

from __future__ import annotations

import os

import numpy as np
import pytest

from paragan_tf.families.pix2pix import networks

GOLDEN = os.path.join(os.path.dirname(__file__), os.pardir, "golden", "pix2pix_golden.npz")


@pytest.fixture(scope="module")
def golden() -> dict:
    with np.load(GOLDEN) as data:
        return dict(data)


@pytest.fixture(autouse=True)
def float32_policy(policy):
    """The comparisons are float32's: an earlier test in this process may have left a mixed
    policy (a bfloat16 one moved the one-step loss by 1.3e-4, and the outputs by up to
    0.006)."""
    policy("float32")


def as_held(layer, variable: str, value) -> np.ndarray:
    """A golden tensor (weights/<layer>/<variable>) as `layer` holds it, and back (the map is
    its own inverse): an up-convolution without spectral norm keeps its kernel as the op
    takes it, [4, 4, out, in], where the golden has a convolution's [4, 4, in, out]."""
    value = np.asarray(value)
    if (isinstance(layer, networks.UpConv4x4) and not layer.spectral_norm
            and variable == "kernel"):
        return value.transpose(0, 1, 3, 2)
    return value
