"""Starts a training cluster on this machine: one real process per task, on 127.0.0.1.

    # synchronous: 2 workers under MultiWorkerMirroredStrategy
    python bin/launch_local.py --num_workers=2 --model_dir=runs/mwms \
        --gin_file=gin/mnist_default.gin --gin_bindings="strategy.kind='multi_worker_mirrored'"
    # asynchronous (ParaGAN): coordinator + 2 workers + 1 parameter server
    python bin/launch_local.py --num_workers=2 --num_ps=1 --model_dir=runs/async \
        --gin_file=gin/async_ps.gin
    # per-class parallel training: K independent processes, one label group each
    python bin/launch_local.py --mode=per_class --num_groups=2 --model_dir=runs/per_class \
        --gin_file=gin/per_class.gin

See paragan_tf/distribute/launcher.py for what happens to the processes.
Exits non-zero (the failing task's code; 143 after a SIGTERM) if a training
task failed.
"""

from __future__ import annotations

import sys

from absl import app
from absl import flags

import paragan_tf  # noqa: F401  (pins tf-keras for the children's environment)
from paragan_tf.distribute import launcher
from paragan_tf.errors import ConfigError
from paragan_tf.train import model_dir as model_dir_lib

FLAGS = flags.FLAGS
flags.DEFINE_enum("mode", "cluster", ["cluster", "per_class"],
                  "cluster: one TF cluster (TF_CONFIG); per_class: independent processes.")
flags.DEFINE_integer("num_workers", 2, "Worker tasks.")
flags.DEFINE_integer("num_ps", 0, "Parameter-server tasks (> 0: asynchronous training).")
flags.DEFINE_bool("chief", None, "Add a chief task (default: when --num_ps > 0, as the "
                  "coordinator).")
flags.DEFINE_integer("num_groups", 2, "per_class mode: processes, one label group each.")
flags.DEFINE_string("model_dir", None, "Where the run writes (per_class: one subfolder per group).")
flags.DEFINE_multi_string("gin_file", [], "Forwarded to every task.")
flags.DEFINE_multi_string("gin_bindings", [], "Forwarded to every task.")
flags.DEFINE_integer("threads_per_task", 0,
                     "Intra-op threads per task, inter-op at least 2 (0: the cores divided "
                     "among the compute tasks).")
flags.DEFINE_integer("max_restarts", 3, "Restarts of each dying parameter-server worker.")
flags.DEFINE_float("grace_secs", 60.0, "After Ctrl-C/SIGTERM, how long tasks get to checkpoint.")
flags.DEFINE_integer("cores_per_task", 0, "Pin training task i to cores [i*n, (i+1)*n) "
                     "(no parameter servers; 0: no pinning).")


def main(argv):
    if len(argv) > 1:
        sys.exit(f"launch_local.py: error: unexpected arguments {argv[1:]}")
    if not FLAGS.model_dir:
        sys.exit("launch_local.py: error: --model_dir is required")
    try:
        # Every task runs from the repository root: the folder the user typed, resolved
        # here, where it was typed.
        model_dir = model_dir_lib.resolve(FLAGS.model_dir)
    except ConfigError as e:
        sys.exit(f"launch_local.py: error: {e}")
    config = launcher.LaunchConfig(
        model_dir=model_dir, gin_files=FLAGS.gin_file, gin_bindings=FLAGS.gin_bindings,
        mode=FLAGS.mode, num_workers=FLAGS.num_workers, num_ps=FLAGS.num_ps, chief=FLAGS.chief,
        num_groups=FLAGS.num_groups, threads_per_task=FLAGS.threads_per_task,
        max_restarts=FLAGS.max_restarts, grace_secs=FLAGS.grace_secs,
        cores_per_task=FLAGS.cores_per_task)
    try:
        return launcher.launch(config)
    except ValueError as e:
        sys.exit(f"launch_local.py: error: {e}")


if __name__ == "__main__":
    app.run(main)
