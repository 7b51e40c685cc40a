"""Where a tiny training process's first train call goes: tracing the loop (Python building
the graph) against the first call (graph optimisation and placement, then the steps).

    .venv/bin/python benchmarks/probes/trace_time.py [gin bindings ...]

Prints one JSON line: the loop graph's op count (with its nested functions), seconds and CPU
seconds to trace it, and to run its first call of two steps, on gin/tiny.gin plus the bindings
given. Every test that trains pays these once per process, which is why the suite's time moves
with the size of the traced step.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import tensorflow as tf  # noqa: E402  pylint: disable=wrong-import-position

from paragan_tf.train import experiment, sync_trainer  # noqa: E402  pylint: disable=wrong-import-position


def _clocks():
    return time.perf_counter(), time.process_time()


def _since(start):
    wall, cpu = _clocks()
    return round(wall - start[0], 2), round(cpu - start[1], 2)


def _ops(graph) -> int:
    """Ops in the graph and in every function it calls (while bodies, conds)."""
    return len(graph.get_operations()) + sum(
        len(f.definition.node_def) for f in graph._functions.values())  # pylint: disable=protected-access


def main(bindings):
    experiment.parse(["gin/tiny.gin"], ["layout.onednn = 'on'", *bindings])
    exp = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
    trainer = sync_trainer.SyncTrainer(exp)
    trainer._begin()  # pylint: disable=protected-access
    n = tf.constant(2, tf.int64)
    start = _clocks()
    concrete = trainer.loop.get_concrete_function(trainer.real_it, trainer.noise_it, n)
    trace = _since(start)
    start = _clocks()
    trainer.loop(trainer.real_it, trainer.noise_it, n)
    first = _since(start)
    start = _clocks()
    trainer.loop(trainer.real_it, trainer.noise_it, n)
    second = _since(start)
    print(json.dumps({"bindings": bindings, "ops": _ops(concrete.graph),
                      "trace_s": trace[0], "trace_cpu_s": trace[1],
                      "first_call_s": first[0], "first_call_cpu_s": first[1],
                      "second_call_s": second[0], "second_call_cpu_s": second[1]}))


if __name__ == "__main__":
    main(sys.argv[1:])
