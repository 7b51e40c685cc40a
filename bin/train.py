"""Trains a GAN (BigGAN on labelled images, pix2pix on pairs: paragan_tf/families/) under the
strategy the gin config selects.

    python bin/train.py --model_dir=runs/x --gin_file=gin/mnist_default.gin \
        --gin_bindings=train.total_steps=1000
    python bin/train.py --gin_file=gin/biggan_imagenet128.gin --dry_run [--memory_gib=80]

Resumes from the newest checkpoint in --model_dir. On SIGTERM/SIGINT it saves
a checkpoint and exits with 128 + the signal number. A run the NaN guard gives up
on (train.max_consecutive_skips) exits 1 with one error line.

Several processes (see bin/launch_local.py and README): every task runs this
binary with the same flags and its own TF_CONFIG (or Slurm variables). Under
`strategy.kind='parameter_server'` the worker and ps tasks only serve; the
chief coordinates asynchronous training.
"""

from __future__ import annotations

import json

from absl import app
from absl import flags
from absl import logging

import common
import tensorflow as tf

from paragan_tf.distribute import cluster
from paragan_tf.distribute import server
from paragan_tf.errors import Diverged, Interrupted, ParameterServerLost
from paragan_tf.measure import built
from paragan_tf.train import driver
from paragan_tf.train import experiment
from paragan_tf.measure import tuning as layout_tuning
from paragan_tf.train import model_dir as model_dir_lib
from paragan_tf import teardown

FLAGS = flags.FLAGS
common.define_gin_flags()
flags.DEFINE_bool("dry_run", False, "Build everything, print one JSON line of facts (counts, "
                  "layout, per-replica memory plan), exit.")
flags.DEFINE_float("memory_gib", None, "Device memory for the dry run's memory plan (the "
                   "largest per-replica batch that fits); default: the detected device's.")


def _main() -> int:
    common.parse_gin()
    model_dir = None if FLAGS.dry_run else common.model_dir(
        "where checkpoints and summaries go")
    if not FLAGS.dry_run and server.serve_if_server_task(*experiment.Settings.read_cluster()):
        return 0
    settings = experiment.Settings.read()
    experiment.refuse(settings)  # before the layout tuning: one line, no child started
    # The layout measured on this machine (cached; the first run of a step shape times
    # its candidates); oneDNN and the thread counts need TensorFlow restarted.
    measured = layout_tuning.settle(settings, allow_measuring=not FLAGS.dry_run)
    # A dry run too: a pinned layout.onednn against TensorFlow's default is refused unless
    # TensorFlow starts with it.
    common.restart_with(layout_tuning.restart_environment(settings, measured))
    if not FLAGS.dry_run:  # before any work: the folder, and nobody else training in it
        model_dir_lib.check(model_dir)
        if cluster.writes_model_dir(settings.strategy.kind, settings.cluster):
            # Released (its record cleared) on every exit through teardown.exit_now; the
            # kernel releases a killed process's flock, and the next run names that pid.
            teardown.before_exit(model_dir_lib.Lock(model_dir).acquire().release)
    exp = experiment.build(check_data=not FLAGS.dry_run, settings=settings, measured=measured)
    if FLAGS.dry_run:
        facts = experiment.summary(exp)
        memory = built.memory_of(exp)
        facts["memory"] = built.memory_plan(exp, FLAGS.memory_gib, memory)
        facts["plan"] = built.plan_line(exp, memory)
        print(json.dumps(facts), flush=True)
        return 0
    try:
        result = driver.train(exp, model_dir)
    except Interrupted as e:
        logging.warning("%s", e)
        teardown.exit_now(128 + e.signum)
    except (ParameterServerLost, Diverged, model_dir_lib.DiskFull) as e:
        logging.error("%s", e)
        common.fail(str(e), code=1)
    except (OSError, tf.errors.OpError) as e:
        if not model_dir_lib.is_disk_full(e):
            raise
        common.fail(f"no space left on the device of {model_dir} ("
                    f"{str(e).strip().splitlines()[0][:200]}); free space and relaunch to "
                    f"resume from the newest checkpoint", code=1)
    logging.info("done: %s", json.dumps({k: round(v, 4) for k, v in result.items()}))
    teardown.exit_now(0)  # not through the input iterators' destructors: paragan_tf/teardown.py


if __name__ == "__main__":
    app.run(common.absl_main(_main))
