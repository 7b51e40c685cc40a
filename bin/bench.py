"""Benchmarks; each suite writes one JSON object to --output (and prints it).

    python bin/bench.py --suite=scaling --output=runs/bench/scaling.json
    python bin/bench.py --suite=straggler --output=runs/bench/straggler.json

Suites (see paragan_tf/bench/): scaling (weak scaling of synchronous
multi-worker training), straggler (one slow worker: sync vs asynchronous
parameter-server training). Each runs with its defaults in a few minutes here.
"""

from __future__ import annotations

import json
import os
import sys

from absl import app
from absl import flags

import paragan_tf  # noqa: F401  (pins tf-keras for the children's environment)
from paragan_tf.bench import cluster

SUITES = dict(cluster.SUITES)

FLAGS = flags.FLAGS
flags.DEFINE_enum("suite", None, sorted(SUITES), "Which benchmark to run.")
flags.DEFINE_string("output", None, "Where to write the JSON result (default: stdout only).")
flags.mark_flag_as_required("suite")


def _progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def main(argv):
    if len(argv) > 1:
        sys.exit(f"bench.py: error: unexpected arguments {argv[1:]}")
    result = SUITES[FLAGS.suite](progress=_progress)
    text = json.dumps(result, indent=1, sort_keys=True)
    if FLAGS.output:
        os.makedirs(os.path.dirname(os.path.abspath(FLAGS.output)), exist_ok=True)
        with open(FLAGS.output, "w") as f:
            f.write(text + "\n")
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    app.run(main)
