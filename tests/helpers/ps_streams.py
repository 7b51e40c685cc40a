"""Coordinator of tests/data/test_pipeline.py's stream test: what each PS worker reads first.

Run as the chief of a cluster of one parameter server and two workers (TF_CONFIG).
For each scheme it builds the real-image input on every worker through
ClusterCoordinator.create_per_worker_dataset, as the asynchronous trainer does, takes
batches until each worker has delivered `--batches`, and prints one JSON line:
{scheme: {"examples": n per worker, "overlap": examples both workers read}}, and
whether a second build of the trainer's input gave every worker the same examples again.

Schemes: `worker_seed` is the trainer's (pipeline.real_input_fn(per_worker=True));
`pid_offset` is the scheme it replaced (one shuffle seed for every worker, the stream
skipped by pid % examples), kept here as the negative control.
"""

from __future__ import annotations

import collections
import hashlib
import json
import sys

import paragan_tf  # noqa: F401  (pins tf-keras first)

import tensorflow as tf

from paragan_tf.data import config as data_config
from paragan_tf.data import datasets
from paragan_tf.data import pipeline
from paragan_tf.distribute import cluster

BATCH = 64


def _pid_offset(fn, examples: int):
    def input_fn(ctx):
        pid = tf.strings.to_number(cluster.process_id(), tf.int64)
        return fn(ctx).unbatch().skip(pid % examples).batch(BATCH, drop_remainder=True)
    return input_fn


def main(batches: int) -> None:
    tf.random.set_seed(0)  # as the trainer (keras.utils.set_random_seed(train.seed))
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        tf.distribute.cluster_resolver.TFConfigClusterResolver())
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    source = datasets.get_source("mnist5k")
    config = data_config.DatasetConfig(name="mnist5k", shuffle_buffer=source.num_examples)
    report, first_build = {}, None
    for scheme in ("worker_seed", "rebuilt", "pid_offset"):
        if scheme != "pid_offset":
            fn = pipeline.real_input_fn(source, config, BATCH, seed=0, per_worker=True)
        else:
            fn = _pid_offset(pipeline.real_input_fn(source, config, 1, seed=0),
                             source.num_examples)
        iterator = iter(coordinator.create_per_worker_dataset(
            lambda: strategy.distribute_datasets_from_function(fn)))  # noqa: B023

        @tf.function
        def take(iterator):
            images, _ = next(iterator)
            return tf.distribute.coordinator.experimental_get_current_worker_index(), images

        seen = collections.defaultdict(list)
        while min(len(seen[0]), len(seen[1])) < batches:
            values = [coordinator.schedule(take, args=(iterator,)) for _ in range(4)]
            for worker, images in (v.fetch() for v in values):
                seen[int(worker)].append(images)
        # An example's identity: the hash of its pixels. Each worker's first `batches`
        # batches (a worker's closures run one at a time, so in its stream's order).
        ids = [{hashlib.sha1(x.tobytes()).hexdigest() for b in seen[w][:batches] for x in b}
               for w in (0, 1)]
        if scheme == "rebuilt":
            report["reproducible"] = ids == first_build
            continue
        first_build = ids
        report[scheme] = {"examples": [len(ids[0]), len(ids[1])],
                          "overlap": len(ids[0] & ids[1]), "dataset": source.num_examples}
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
