"""The quality benchmark (`make quality`): train on Fashion-MNIST, measure FCD and accuracy.

    python bin/quality.py --output_dir=runs/quality

1. trains the dataset classifier (or reuses <output_dir>/classifier) and reports
   its test accuracy;
2. builds the experiment of --gin_file (default gin/quality_fashion_mnist.gin)
   in <output_dir>/run and measures the FCD of the untrained EMA generator;
3. trains it (in-loop evaluation every eval.every_steps keeps the best checkpoint;
   a rerun resumes);
4. evaluates the final EMA generator and writes <output_dir>/metrics.json with
   fcd_start, fcd_end, conditional_accuracy, classifier_test_accuracy, steps,
   wall_seconds, the targets and whether each was met, and the sample grid;
5. with --fid (the default), the FID on the standard Inception as the field reports
   it: of the untrained (fid_start) and the trained (fid_end) EMA generator against
   the same real images as the FCD (the test split where there is one), and the
   real-vs-real floor (fid_floor: the training split's first eval.num_real images
   against those), from statistics stored once in <output_dir>/fid/ (bin/eval.py
   --write_stats); on 2 CPU cores ~10 minutes per 10,000 images.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

from absl import app
from absl import flags
from absl import logging

import common  # first: quiets TensorFlow's start-up (see quiet_startup.py)
from paragan_tf import families
from paragan_tf.data import config as data_config
from paragan_tf.data import pipeline
from paragan_tf.eval import classifier
from paragan_tf.eval import evaluator as evaluator_lib
from paragan_tf.eval import history as history_lib
from paragan_tf.eval import inception
from paragan_tf.eval import metrics as metrics_lib
from paragan_tf.eval import reference_stats
from paragan_tf.train import experiment
from paragan_tf.train import driver
from paragan_tf.train import model_dir as model_dir_lib
from paragan_tf import teardown

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", "runs/quality", "Where the classifier, run and metrics go.")
flags.DEFINE_multi_string("gin_file", ["gin/quality_fashion_mnist.gin"], "The experiment.")
flags.DEFINE_multi_string("gin_bindings", [], "Extra gin bindings.")
flags.DEFINE_integer("classifier_epochs", 4, "Epochs of the FCD classifier.")
flags.DEFINE_bool("fid", True, "Also the FID on the standard Inception: start, end and the "
                  "real-vs-real floor (~10 minutes per 10,000 images on 2 cores).")

TARGETS = dict(classifier_test_accuracy=0.90, conditional_accuracy=0.85, fcd_ratio=0.05)


def _classifier(path: str) -> dict:
    """The classifier at `path` for the configured dataset, trained first if absent."""
    data = data_config.DatasetConfig()
    if os.path.exists(os.path.join(path, classifier.INFO_FILE)):
        info = classifier.load_info(path)
        if (info["dataset"], info["resolution"]) == (data.name, data.resolution):
            logging.info("reusing the classifier in %s (test accuracy %.4f)", path,
                         info["test_accuracy"])
            return info
    model, info = classifier.train(pipeline.load_source(data), data, FLAGS.classifier_epochs,
                                   progress=logging.info)
    classifier.save(model, path, info)
    return info


class _Fid:
    """The FID side of the benchmark: an Inception evaluator against stored statistics."""

    def __init__(self, subject, evaluator: evaluator_lib.Evaluator, out: str):
        self.dir = os.path.join(out, "fid")
        config = dataclasses.replace(evaluator.config, feature_extractor="inception",
                                     classifier_path=None, reference_stats=None)
        reference = self._stats(subject, config, evaluator.reference_split)
        self.floor = None
        if evaluator.reference_split != subject.data.split:  # a held-out split: real vs real
            training = self._stats(subject, config, subject.data.split)
            self.floor = metrics_lib.frechet_distance_from_statistics(
                training.mu, training.sigma, reference.mu, reference.sigma)
            logging.info("FID floor (%s vs %s split, %d images each): %.4f", subject.data.split,
                         evaluator.reference_split, reference.count, self.floor)
        self.evaluator = evaluator_lib.Evaluator(
            subject, self.dir, dataclasses.replace(config, reference_stats=reference.path))

    def _stats(self, subject, config, split: str):
        path = os.path.join(self.dir, f"{split}.npz")
        config = dataclasses.replace(config, reference_split=split)
        writer = evaluator_lib.Evaluator(subject, self.dir, config, write=False)
        try:  # computed once: a rerun reuses them if the protocol still matches
            return reference_stats.read(path, writer.protocol, inception.FEATURES)
        except common.ConfigError:
            return writer.write_stats(path)

    @staticmethod
    def evaluated(out: str, step: int) -> bool:
        path = os.path.join(out, "fid", history_lib.METRICS_FILE)
        if not os.path.exists(path):
            return False
        with open(path) as f:
            return any(e["step"] == step for e in json.load(f)["evaluations"])

    def at(self, step: int, checkpoint=None) -> float:
        """The FID at `step` (recorded in <output_dir>/fid/metrics.json; reused by a rerun)."""
        done = [e for e in self.evaluator.history["evaluations"] if e["step"] == step]
        return done[0]["fid"] if done else self.evaluator.evaluate(step, checkpoint)["fid"]


def _main() -> int:
    start = time.perf_counter()
    out = model_dir_lib.resolve(FLAGS.output_dir)
    classifier_dir, run_dir = os.path.join(out, "classifier"), os.path.join(out, "run")
    bindings = FLAGS.gin_bindings + [f"eval.classifier_path = '{classifier_dir}'"]
    experiment.parse(FLAGS.gin_file, bindings, finalize=False)
    family = families.family_class(experiment.Settings.read().model.family)
    if not family.class_conditional:
        common.fail(f"bin/quality.py measures class-conditional samples (FCD, conditional "
                    f"accuracy); the GAN family {family.name!r} ({family.data_kind}) draws "
                    f"none: evaluate its runs with bin/eval.py")
    info = _classifier(classifier_dir)
    exp = experiment.build()
    subject = experiment.eval_subject(exp)
    evaluator = evaluator_lib.Evaluator(subject, run_dir)
    first = [e for e in evaluator.history["evaluations"] if e["step"] == 0]
    fresh = int(exp.step.numpy()) == 0 and not model_dir_lib.latest_checkpoint(run_dir)
    if not first and not fresh:
        common.fail(f"{run_dir} holds a run without its step-0 evaluation; use a fresh "
                    "--output_dir")
    fcd_start = first[0]["fcd"] if first else evaluator.evaluate(0)["fcd"]
    fid = None
    if FLAGS.fid:
        if not fresh and not _Fid.evaluated(out, 0):
            common.fail(f"{run_dir} holds a run without its step-0 FID; use a fresh "
                        "--output_dir or --nofid")
        fid = _Fid(subject, evaluator, out)
    fid_start = fid.at(0) if fid else None
    result = driver.train(exp, run_dir)
    steps = int(result["step"])
    with open(os.path.join(run_dir, history_lib.METRICS_FILE)) as f:
        end = json.load(f)
    final = max(end["evaluations"], key=lambda e: e["step"])
    if final["step"] != steps:  # eval.every_steps = 0: the loop did not evaluate the end
        final = evaluator.evaluate(steps, model_dir_lib.latest_checkpoint(run_dir))
        end = evaluator.history
    fid_end = fid.at(steps, model_dir_lib.latest_checkpoint(run_dir)) if fid else None
    metrics = dict(
        fcd_start=fcd_start, fcd_end=final["fcd"], fcd_ratio=final["fcd"] / fcd_start,
        kcd_end=final["kcd"], classifier_score_end=final["classifier_score"],
        conditional_accuracy=final["conditional_accuracy"],
        classifier_test_accuracy=info["test_accuracy"], classifier_test_set=info["test_set"],
        steps=steps, wall_seconds=time.perf_counter() - start,
        train_images_per_sec=result.get("perf/images_per_sec"), best=end["best"],
        grid=os.path.join(run_dir, "samples", f"step_{steps:07d}.png"),
        layout=exp.layout.precision, targets=TARGETS)
    if fid:
        metrics.update(fid_start=fid_start, fid_end=fid_end, fid_floor=fid.floor,
                       fid_protocol=fid.evaluator.protocol)
    metrics["targets_met"] = {
        k: metrics[k] <= v if k == "fcd_ratio" else metrics[k] >= v for k, v in TARGETS.items()}
    path = os.path.join(out, "metrics.json")
    with open(path, "w") as f:
        json.dump(metrics, f, indent=1)
    logging.info("quality: %s", json.dumps({k: v for k, v in metrics.items() if k != "best"}))
    print(path, flush=True)
    teardown.exit_now(0)


if __name__ == "__main__":
    app.run(common.absl_main(_main))
