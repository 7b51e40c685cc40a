"""Coordinator of tests/train/test_sample_buffer.py's test: do D closures wait for a slow G?

Run as the chief of a cluster of one parameter server and two workers (TF_CONFIG),
with the trainer's closures in mode 'sample_buffer' on gin/tiny.gin. After the
buffer is filled, one G closure and then three D closures are scheduled ("free").
Then the negative control ("handoff"): the same, but the D closures are scheduled
once the G closure's result has arrived, as a design handing G's fakes to D directly
must (ClusterCoordinator takes no RemoteValue as a closure's argument).

What is compared is the order of events, not clock times: three counters on the
parameter server count the G closures that started and that finished and the D
closures that finished. Each closure reads them when it ends. In "free" the G
closure is held, after it started and before it updates G or writes the buffer,
until the D closures have finished; a D closure waits until the G closure has
started. Neither hold depends on the machine's speed: each ends on its event, or
gives up after a stall (no step of the counter it waits on) of max(its argument,
20 x how long filling the buffer took here). Had the D closures waited for G's
result, the hold would give up and the counts would show it.

Prints one JSON line: for each trial, the counts the G closure saw when it started
and finished, the counts each D closure saw when it finished, and the D closures'
sample ages.
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

STALL_FACTOR = 20


def _nap(after: tf.Tensor) -> tf.Tensor:
    """A 50 ms thread sleep inside the graph, on the worker (tf.data's SleepDataset)."""
    return tf.data.Dataset.from_tensors(after).apply(
        tf_data_testing.sleep(50_000)).take(1).get_single_element()


def _wait_until(counter: tf.Variable, target: tf.Tensor, stall: tf.Tensor) -> tf.Tensor:
    """Polls `counter` (on the parameter server) until it reaches `target`, or until it has
    not grown for `stall` seconds; its value at the end."""
    def cond(value, since):
        return tf.logical_and(value < target, tf.timestamp() - since < stall)

    def body(value, since):
        with tf.control_dependencies([_nap(value)]):
            now_value, now = counter.read_value(), tf.timestamp()
        return now_value, tf.where(now_value > value, now, since)

    value, _ = tf.while_loop(cond, body, (counter.read_value(), tf.timestamp()))
    return value


def main(stall_floor: float) -> None:
    experiment.parse(["gin/tiny.gin"], ["strategy.kind='parameter_server'",
                                        "async_train.mode='sample_buffer'",
                                        "async_train.buffer_depth=2"])
    exp = experiment.build()
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(exp.strategy)
    closures = async_closures.Closures(
        exp, coordinator, 0, exp.settings.async_train)
    with exp.strategy.scope():
        g_started, g_finished, d_finished = (
            tf.Variable(tf.constant(0, tf.int64), trainable=False, name=name)
            for name in ("test_g_started", "test_g_finished", "test_d_finished"))
    began = time.monotonic()
    closures.fill_buffer()
    filled = time.monotonic() - began
    stall = max(stall_floor, STALL_FACTOR * filled)
    print(f"buffer filled in {filled:.1f} s; a hold gives up after {stall:.0f} s without "
          f"progress", file=sys.stderr, flush=True)

    def counts():
        return tf.stack([g_started.read_value(), g_finished.read_value(),
                         d_finished.read_value()])

    @tf.function(autograph=False)
    def held_g(index, d_target):
        # Started: counted before anything else; then held until d_target D closures
        # finished, before G's update and the buffer write.
        with tf.control_dependencies([g_started.assign_add(1)]):
            at_start = counts()
        with tf.control_dependencies([at_start]):
            held = _wait_until(d_finished, d_target, stall)
        with tf.control_dependencies([held]):
            out = closures.g_closure(index)
        with tf.control_dependencies(tf.nest.flatten(out)):
            done = g_finished.assign_add(1)
        with tf.control_dependencies([done]):
            return at_start, counts()

    @tf.function(autograph=False)
    def counted_d(iterator, index, g_target):
        with tf.control_dependencies([_wait_until(g_started, g_target, stall)]):
            out = closures.d_closure(iterator, index)
        with tf.control_dependencies(tf.nest.flatten(out)):
            done = d_finished.assign_add(1)
        with tf.control_dependencies([done]):
            return counts(), out["async/sample_age"]

    def trial(round_index: int, handoff: bool) -> dict:
        base = [int(c) for c in counts().numpy()]  # g_started, g_finished, d_finished
        # handoff: no hold (its D closures are scheduled only after G's result arrived).
        d_target = base[2] + (0 if handoff else 3)
        g = coordinator.schedule(held_g, args=(tf.constant(round_index, tf.int64),
                                               tf.constant(d_target, tf.int64)))
        if handoff:
            g.fetch()
        ds = [coordinator.schedule(counted_d, args=(
            closures.real_it, tf.constant(10 * round_index + i, tf.int64),
            tf.constant(base[0] + 1, tf.int64))) for i in range(3)]
        coordinator.join()
        g_start, g_end = (c.tolist() for c in g.fetch())
        d_results = [d.fetch() for d in ds]

        def relative(seen):
            return [int(c) - b for c, b in zip(seen, base)]
        print(f"{'handoff' if handoff else 'free'} trial done", file=sys.stderr, flush=True)
        return {"g_start": relative(g_start), "g_end": relative(g_end),
                "d_end": [relative(c) for c, _ in d_results],
                "sample_age": [float(a) for _, a in d_results]}

    print(json.dumps({"free": trial(0, False), "handoff": trial(1, True)}), flush=True)


if __name__ == "__main__":
    main(float(sys.argv[1]))
