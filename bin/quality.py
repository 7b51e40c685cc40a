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
   wall_seconds, the targets and whether each was met, and the sample grid.
"""

from __future__ import annotations

import json
import os
import time

from absl import app
from absl import flags
from absl import logging

import common  # first: quiets TensorFlow's start-up (see quiet_startup.py)
from paragan_tf import config as config_lib
from paragan_tf.data import pipeline
from paragan_tf.eval import classifier
from paragan_tf.eval import evaluator as evaluator_lib
from paragan_tf.train import experiment
from paragan_tf.train import loop
from paragan_tf.train import model_dir as model_dir_lib

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", "runs/quality", "Where the classifier, run and metrics go.")
flags.DEFINE_multi_string("gin_file", ["gin/quality_fashion_mnist.gin"], "The experiment.")
flags.DEFINE_multi_string("gin_bindings", [], "Extra gin bindings.")
flags.DEFINE_integer("classifier_epochs", 4, "Epochs of the FCD classifier.")

TARGETS = dict(classifier_test_accuracy=0.90, conditional_accuracy=0.85, fcd_ratio=0.05)


def _classifier(path: str) -> dict:
    """The classifier at `path` for the configured dataset, trained first if absent."""
    data = pipeline.dataset_config()
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


def _main() -> int:
    start = time.perf_counter()
    out = model_dir_lib.resolve(FLAGS.output_dir)
    classifier_dir, run_dir = os.path.join(out, "classifier"), os.path.join(out, "run")
    bindings = FLAGS.gin_bindings + [f"eval.classifier_path = '{classifier_dir}'"]
    config_lib.parse(FLAGS.gin_file, bindings, finalize=False)
    info = _classifier(classifier_dir)
    exp = experiment.build()
    evaluator = evaluator_lib.Evaluator(exp, run_dir)
    first = [e for e in evaluator.history["evaluations"] if e["step"] == 0]
    if first:
        fcd_start = first[0]["fcd"]
    elif int(exp.step.numpy()) == 0 and not model_dir_lib.latest_checkpoint(run_dir):
        fcd_start = evaluator.evaluate(0)["fcd"]
    else:
        common.fail(f"{run_dir} holds a run without its step-0 evaluation; use a fresh "
                    "--output_dir")
    result = loop.train(exp, run_dir)
    steps = int(result["step"])
    with open(os.path.join(run_dir, evaluator_lib.METRICS_FILE)) as f:
        end = json.load(f)
    final = max(end["evaluations"], key=lambda e: e["step"])
    if final["step"] != steps:  # eval.every_steps = 0: the loop did not evaluate the end
        final = evaluator.evaluate(steps, model_dir_lib.latest_checkpoint(run_dir))
        end = evaluator.history
    metrics = dict(
        fcd_start=fcd_start, fcd_end=final["fcd"], fcd_ratio=final["fcd"] / fcd_start,
        kcd_end=final["kcd"], classifier_score_end=final["classifier_score"],
        conditional_accuracy=final["conditional_accuracy"],
        classifier_test_accuracy=info["test_accuracy"], classifier_test_set=info["test_set"],
        steps=steps, wall_seconds=time.perf_counter() - start,
        train_images_per_sec=result.get("perf/images_per_sec"), best=end["best"],
        grid=os.path.join(run_dir, "samples", f"step_{steps:07d}.png"),
        layout=exp.layout.precision, targets=TARGETS)
    metrics["targets_met"] = {
        k: metrics[k] <= v if k == "fcd_ratio" else metrics[k] >= v for k, v in TARGETS.items()}
    path = os.path.join(out, "metrics.json")
    with open(path, "w") as f:
        json.dump(metrics, f, indent=1)
    logging.info("quality: %s", json.dumps({k: v for k, v in metrics.items() if k != "best"}))
    print(path, flush=True)
    common.exit_now(0)


if __name__ == "__main__":
    app.run(common.absl_main(_main))
