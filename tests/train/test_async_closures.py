"""The asynchronous trainer's closures (train/async_closures.py): a closure's noise is a pure
function of its index, so a closure the coordinator runs again sees the same noise."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from paragan_tf.train import async_closures


def _noise(index: int, seed: int = 3):
    z, labels = async_closures._noise(  # pylint: disable=protected-access
        tf.constant(index, tf.int64), seed, 16, 8, [2, 5, 7])
    return z.numpy(), labels.numpy()


def test_a_closures_noise_is_a_function_of_its_index_and_seed():
    z, labels = _noise(4)
    assert z.shape == (16, 8) and labels.shape == (16,) and set(labels) <= {2, 5, 7}
    again_z, again_labels = _noise(4)  # the same closure run again
    np.testing.assert_array_equal(again_z, z)
    np.testing.assert_array_equal(again_labels, labels)
    assert not np.array_equal(_noise(5)[0], z)  # the next closure
    assert not np.array_equal(_noise(4, seed=4)[0], z)  # the other network's closures
    assert not np.array_equal(_noise(-1)[0], z)  # filling the sample buffer
