"""Coordinator of tests/test_async_loop.py's sample-buffer test: do D closures wait for a slow G?

Run as the chief of a cluster of one parameter server and two workers (TF_CONFIG),
with the trainer's closures in mode 'sample_buffer' on gin/tiny.gin. After the
buffer is filled, one G closure is slowed by `--delay` seconds (an in-graph sleep
before it) and three D closures are scheduled behind it ("free"). Then the negative
control ("handoff"): the same, but the D closures are scheduled once the slow G
closure's result has arrived, as a design handing G's fakes to D directly must
(ClusterCoordinator takes no RemoteValue as a closure's argument). Prints one JSON
line: for each, when the G closure and each D closure finished (seconds after
scheduling) and the D closures' sample ages.
"""

from __future__ import annotations

import json
import sys
import time

import paragan_tf  # noqa: F401  (pins tf-keras first)

import tensorflow as tf
from tensorflow.python.data.experimental.ops import testing as tf_data_testing

from paragan_tf.train import async_closures
from paragan_tf.train import experiment


def main(delay: float) -> None:
    experiment.parse(["gin/tiny.gin"], ["strategy.kind='parameter_server'",
                                        "async_train.mode='sample_buffer'",
                                        "async_train.buffer_depth=2"])
    exp = experiment.build()
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(exp.strategy)
    closures = async_closures.Closures(
        exp, coordinator, 0, exp.settings.async_train)
    closures.fill_buffer()

    @tf.function(autograph=False)
    def slow_g(index):
        # tf.data's SleepDataset: a thread sleep inside the graph, on the worker.
        index = tf.data.Dataset.from_tensors(index).apply(
            tf_data_testing.sleep(int(delay * 1e6))).take(1).get_single_element()
        out = closures.g_closure(index)
        with tf.control_dependencies(tf.nest.flatten(out)):
            return tf.timestamp()

    @tf.function(autograph=False)
    def timed_d(iterator, index):
        out = closures.d_closure(iterator, index)
        with tf.control_dependencies(tf.nest.flatten(out)):
            return tf.timestamp(), out["async/sample_age"]

    def trial(round_index: int, handoff: bool) -> dict:
        begin = time.time()
        g = coordinator.schedule(slow_g, args=(tf.constant(round_index, tf.int64),))
        if handoff:
            g.fetch()
        ds = [coordinator.schedule(timed_d, args=(closures.real_it,
                                                  tf.constant(10 * round_index + i, tf.int64)))
              for i in range(3)]
        coordinator.join()
        d_results = [d.fetch() for d in ds]
        return {"g_done": float(g.fetch()) - begin,
                "d_done": [float(t) - begin for t, _ in d_results],
                "sample_age": [float(a) for _, a in d_results]}

    print(json.dumps({"free": trial(0, False), "handoff": trial(1, True)}), flush=True)


if __name__ == "__main__":
    main(float(sys.argv[1]))
