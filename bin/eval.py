"""Evaluates a run's checkpoints: FCD (or FID), KCD/KID, classifier/Inception score, accuracy.

    python bin/eval.py --model_dir=runs/quality/run \
        --gin_bindings="eval.classifier_path='runs/quality/classifier'"        # newest
    python bin/eval.py --model_dir=runs/x --checkpoint=runs/x/ckpt-400        # that one
    python bin/eval.py --model_dir=runs/x --watch                             # sidecar
    python bin/eval.py --model_dir=runs/x --all                # every one, then exit
    python bin/eval.py --gin_file=gin/x.gin --write_stats=stats/x_test.npz     # FID statistics

Builds the run from its operative_config.gin (one device unless --gin_bindings
choose a strategy), restores each checkpoint, evaluates the EMA generator and
writes <model_dir>/eval/metrics.json (or --eval_dir's: every evaluation, the best), TensorBoard
scalars metrics/* under <model_dir>/eval, and copies the best checkpoint to
<model_dir>/eval/best/. --watch evaluates every checkpoint not yet evaluated, waits for
new ones, and stops once the run has finished (train_result.json) and all are
done, or after --timeout_secs without a new checkpoint. --all evaluates every
checkpoint not yet evaluated and exits (a stopped run, which --watch would wait on).

--write_stats=PATH embeds the real images an evaluation compares with (the run's
data with --model_dir, else --gin_file's; eval.reference_split and eval.num_real
choose them) and stores their mean, covariance and protocol as an .npz;
eval.reference_stats=PATH makes later evaluations use it (eval/reference_stats.py).
"""

from __future__ import annotations

import json
import os
import time

from absl import app
from absl import flags
from absl import logging

import common  # first: quiets TensorFlow's start-up (see quiet_startup.py)
import tensorflow as tf
from paragan_tf.train import checkpoints
from paragan_tf.train import experiment
from paragan_tf.train import model_dir as model_dir_lib
from paragan_tf import teardown

FLAGS = flags.FLAGS
common.define_gin_flags()
flags.DEFINE_string("checkpoint", None, "Checkpoint prefix to evaluate; default the newest.")
flags.DEFINE_string("eval_dir", None, "Folder of metrics.json, the scalars and best/ "
                    "(default <model_dir>/eval); a second protocol of the same run (FID "
                    "beside FCD) needs a folder of its own.")
flags.DEFINE_bool("watch", False, "Evaluate every checkpoint as it appears (sidecar).")
flags.DEFINE_bool("all", False, "Evaluate every checkpoint not yet evaluated, oldest "
                  "first, then exit.")
flags.DEFINE_float("poll_secs", 10.0, "--watch: seconds between looks for new checkpoints.")
flags.DEFINE_float("timeout_secs", 3600.0, "--watch: give up after this long without one.")
flags.DEFINE_string("write_stats", None, "Store the real images' feature statistics (.npz) "
                    "here and exit: the run's data with --model_dir, else --gin_file's.")


def _pending(model_dir: str, done: set) -> list:
    """The run's checkpoints not yet evaluated, oldest first."""
    return [p for p in reversed(model_dir_lib.checkpoint_paths(model_dir)) if p not in done]


def _wait_for_first_checkpoint(model_dir: str) -> None:
    """A sidecar may start before the trainer has written anything."""
    start = time.monotonic()
    while not (os.path.exists(os.path.join(model_dir, "operative_config.gin"))
               and model_dir_lib.latest_checkpoint(model_dir)):
        if time.monotonic() - start > FLAGS.timeout_secs:
            common.fail(f"no checkpoint appeared in {model_dir} in {FLAGS.timeout_secs:.0f} s",
                        code=1)
        logging.info("waiting for the first checkpoint in %s", model_dir)
        time.sleep(FLAGS.poll_secs)


def _write_stats(path: str) -> None:
    """The real images' statistics of the run (or of --gin_file's experiment) into `path`."""
    files = list(FLAGS.gin_file)
    if FLAGS.model_dir:
        files.insert(0, os.path.join(common.model_dir(), "operative_config.gin"))
    if not files:
        common.fail("--write_stats needs --model_dir (a run) or --gin_file (an experiment)")
    experiment.parse(files, ["strategy.kind = 'one_device'"] + FLAGS.gin_bindings +
                     ["eval.reference_stats = None"], finalize=False)
    path = model_dir_lib.resolve(path)
    exp = experiment.build(check_data=False)
    evaluator = exp.family.evaluator(experiment.eval_subject(exp), os.path.dirname(path),
                                     write=False)
    written = evaluator.write_stats(path)
    print(json.dumps(dict(path=written.path, sha1=written.sha1, **written.protocol)),
          flush=True)


def _main() -> int:
    if FLAGS.watch and FLAGS.all:
        common.fail("--watch and --all: choose one (--all does not wait for new checkpoints)")
    if FLAGS.write_stats:
        _write_stats(FLAGS.write_stats)
        teardown.exit_now(0)
    model_dir = common.model_dir()
    if FLAGS.watch:
        _wait_for_first_checkpoint(model_dir)
    exp, path = common.restore_run(model_dir, FLAGS.checkpoint)
    out_dir = (model_dir_lib.resolve(FLAGS.eval_dir) if FLAGS.eval_dir
               else os.path.join(model_dir, "eval"))
    # What the run's GAN family measures (paragan_tf/families/): BigGAN's distances to the
    # data, pix2pix's to its targets.
    evaluator = exp.family.evaluator(experiment.eval_subject(exp), out_dir)
    writer = tf.summary.create_file_writer(out_dir)
    saver = checkpoints.Checkpointer(model_dir, max_to_keep=1000, **exp.trackables())
    done = {e["checkpoint"] for e in evaluator.history["evaluations"]}
    if not (FLAGS.watch or FLAGS.all):
        result = evaluator.evaluate(int(exp.step.numpy()), path, writer)
        print(json.dumps(dict(step=int(exp.step.numpy()), checkpoint=path, **result)),
              flush=True)
        teardown.exit_now(0)
    last_new = time.monotonic()
    while True:
        pending = _pending(model_dir, done)
        for path in pending:
            try:
                saver.restore(path)
            except common.ConfigError as e:  # deleted by max_to_keep meanwhile
                logging.warning("skipping %s: %s", path, e)
                done.add(path)
                continue
            evaluator.evaluate(int(exp.step.numpy()), path, writer)
            writer.flush()
            done.add(path)
            last_new = time.monotonic()
        finished = FLAGS.all or os.path.exists(os.path.join(model_dir, "train_result.json"))
        if finished and not _pending(model_dir, done):
            logging.info("every checkpoint is evaluated%s",
                         "" if FLAGS.all else " and the run has finished")
            break
        if time.monotonic() - last_new > FLAGS.timeout_secs:
            common.fail(f"no new checkpoint in {model_dir} for {FLAGS.timeout_secs:.0f} s",
                        code=1)
        time.sleep(FLAGS.poll_secs)
    best = evaluator.history["best"]
    print(json.dumps(best), flush=True)
    teardown.exit_now(0)


if __name__ == "__main__":
    app.run(common.absl_main(_main))
