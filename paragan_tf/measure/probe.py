"""One layout candidate's training step, timed on request (a child of measure/timing.py).

    python -m paragan_tf.measure.probe CONFIG.gin [BINDING ...]

The process settings under test (oneDNN, thread counts) come in the environment,
set before TensorFlow loads; the rest (XLA, precision) as gin bindings. It builds
the experiment as bin/train.py would (stand-in pixels of the same shape when the
data is not on this machine), runs two warm-up steps (tracing, XLA compilation),
prints one JSON line {"ready": ...}, then for every line "N" on stdin runs N
steps and prints {"seconds": ..., "steps": N}. "quit" or end of input ends it at once,
without the input iterators' destructors (they can block for a minute:
paragan_tf/teardown.py), as does any error (one JSON line {"error": ...}).
"""

from __future__ import annotations

import json
import os
import sys

from paragan_tf import teardown
from paragan_tf.measure import step_timer


def _say(**fields) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def main(argv) -> None:
    from absl import logging  # pylint: disable=import-outside-toplevel
    from paragan_tf.train import experiment  # pylint: disable=import-outside-toplevel
    from paragan_tf.train import sync_trainer  # pylint: disable=import-outside-toplevel
    logging.set_verbosity(logging.WARNING)
    config, bindings = argv[0], list(argv[1:])
    exp, _ = experiment.build_or_stand_in([config], bindings)
    trainer = sync_trainer.SyncTrainer(exp)
    warmup = step_timer.time_steps(trainer, 0, warmup=2).warmup_seconds
    flops = None
    if os.environ.get("PARAGAN_TF_PROBE_FLOPS") == "1":  # one probe counts for all
        from paragan_tf.scale import flops as flops_lib  # pylint: disable=import-outside-toplevel
        flops = flops_lib.train_step_flops(exp)
    _say(ready=True, warmup_seconds=warmup, layout=exp.layout.as_dict(),
         train_step_flops=flops, replicas=exp.strategy.num_replicas_in_sync)
    while True:
        command = sys.stdin.readline().strip()
        if command in ("quit", ""):  # here, while the iterators are still referenced
            teardown.exit_now(0)
        steps = int(command)
        _say(seconds=step_timer.time_steps(trainer, 1, steps_per_call=steps).seconds[0] * steps,
             steps=steps)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except Exception as e:  # pylint: disable=broad-except
        lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
        _say(error=f"{type(e).__name__}: {lines[-1] if lines else ''}"[:500])
    teardown.exit_now(0)  # the one exit path: without the input iterators' destructors
