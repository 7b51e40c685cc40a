"""The sample buffer (train/sample_buffer.py): a read is the newest batch written, whole; and D
closures train on the fakes it holds without waiting for a G closure, on real server processes
on 127.0.0.1."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.train import sample_buffer
from tests.helpers.ps_cluster import coordinate


def test_a_read_is_the_newest_batch_written_whole():
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        near = tf.Variable(0, dtype=tf.int64, trainable=False)
    buffer = sample_buffer.SampleBuffer(strategy, depth=3, batch=2, image_shape=(4, 4, 1),
                                        dim_z=5, near=near)
    assert buffer.filled() == 0

    def write(round_index: int, value: float, version: int):
        buffer.write(tf.constant(round_index, tf.int64), tf.fill([2, 4, 4, 1], value),
                     tf.constant([1, 2]) * int(value), tf.fill([2, 5], -value),
                     tf.constant(version, tf.int64))
    write(0, 1.0, 10)
    write(1, 2.0, 11)
    fakes, labels, z, version = buffer.read()
    assert int(version) == 11 and buffer.filled() == 2
    np.testing.assert_array_equal(fakes.numpy(), np.full([2, 4, 4, 1], 2.0, np.float32))
    assert labels.dtype == tf.int32 and labels.numpy().tolist() == [2, 4]
    np.testing.assert_array_equal(z.numpy(), np.full([2, 5], -2.0, np.float32))
    # Round 3 writes slot 3 % 3 = 0, over round 0's batch: the newest is then in slot 0.
    write(3, 3.0, 12)
    assert buffer.versions.numpy().tolist() == [12, 11, -1]
    fakes, labels, z, version = buffer.read()
    assert int(version) == 12 and labels.numpy().tolist() == [3, 6]
    assert float(fakes.numpy().min()) == float(fakes.numpy().max()) == 3.0


@pytest.mark.slow
def test_d_closures_train_on_the_buffer_while_a_g_closure_is_still_running(tmp_path):
    # The order of events, from counters on the parameter server (tests/helpers/ps_buffer.py), each
    # [G closures started, G closures finished, D closures finished] in the trial. The G
    # closure is held until the D closures finish (or a stall): whether they can finish
    # while it runs, not which is faster on this machine, decides.
    report = coordinate("tests/helpers/ps_buffer.py", 60, tmp_path)
    free, handoff = report["free"], report["handoff"]
    # The G closure started before any D closure finished; each D closure finished while it
    # was running (started, not finished), on the fakes the buffer was filled with (no G
    # update yet: age 0); when G finished, all three D closures had.
    assert free["g_start"] == [1, 0, 0], free
    assert [d[:2] for d in free["d_end"]] == [[1, 0]] * 3, free
    assert free["g_end"] == [1, 1, 3], free
    assert free["sample_age"] == [0.0, 0.0, 0.0]
    # The negative control: D closures handed G's result finish only after G did.
    assert handoff["g_end"] == [1, 1, 0], handoff
    assert [d[:2] for d in handoff["d_end"]] == [[1, 1]] * 3, handoff
