"""pix2pix's golden (tests/golden/make_pix2pix_golden.py: the reference's networks, losses
and one training iteration) as fixtures for the tests that compare with it: import them
into a test module."""

from __future__ import annotations

import os

import numpy as np
import pytest

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
