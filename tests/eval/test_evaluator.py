"""The evaluator (eval/evaluator.py): the eval binary and its sidecar, two replicas against one,
real images, in-loop evaluation, D's logit gap, and the quality binary end to end."""

from __future__ import annotations

import gc
import json
import os
import shutil

import gin
import numpy as np
import pytest
import tensorflow as tf

from paragan_tf import teardown
from paragan_tf.data import datasets
from paragan_tf.errors import ConfigError
from paragan_tf.eval import evaluator as evaluator_lib
from paragan_tf.train import experiment
from paragan_tf.train import driver
from paragan_tf.train import run_files
from tests.helpers.clusters import run_binary  # waits while the run prints, no fixed timeout
from tests.helpers.repo import relative
from tests.helpers.training import declared_for, mirrored_2, parse_tiny


@pytest.fixture(scope="module")
def evaluated_run(tmp_path_factory, mnist_classifier):
    """4 steps of gin/tiny.gin, evaluated in the loop at steps 2 and 4 (its checkpoints),
    trained once: the in-loop test reads its records, the eval binary evaluates its
    checkpoints again. (run folder, driver.train's result)."""
    root = tmp_path_factory.mktemp("evaluated_run")
    run_dir = root / "run"
    # The loop's classifier is a copy, gone once the run ends: the run's operative config
    # names a folder that no longer exists, so the eval binary can only use the one its
    # --gin_bindings give it.
    loop_classifier = str(root / "loop_classifier")
    shutil.copytree(mnist_classifier[0], loop_classifier)
    gin.clear_config()
    parse_tiny("train.total_steps = 4", "eval.every_steps = 2",
               f"eval.classifier_path = '{loop_classifier}'", "eval.num_samples = 100",
               "eval.num_real = 100", "eval.batch_size = 50")
    try:
        result = driver.train(experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0")),
                              str(run_dir))
    finally:
        gin.clear_config()
    shutil.rmtree(loop_classifier)
    return run_dir, result


def test_eval_binary_on_a_tiny_checkpoint_then_as_a_sidecar(evaluated_run, mnist_classifier):
    path, _ = mnist_classifier
    run_dir, _ = evaluated_run  # checkpoints at steps 2 and 4
    # Folders as a user types them: relative to where the binary runs.
    flags = [f"--model_dir={relative(run_dir)}",
             f"--gin_bindings=eval.classifier_path='{relative(path)}'",
             "--gin_bindings=eval.num_samples=100", "--gin_bindings=eval.num_real=100",
             "--gin_bindings=eval.batch_size=50"]
    proc = run_binary("eval.py", *flags, f"--checkpoint={relative(run_dir / 'ckpt-2')}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["step"] == 2
    saved = json.loads((run_dir / "eval" / "metrics.json").read_text())
    assert saved["metric"] == "fcd" and [e["step"] for e in saved["evaluations"]] == [2]
    for key in ("fcd", "kcd", "classifier_score", "conditional_accuracy"):
        assert np.isfinite(saved["evaluations"][0][key]), key
    assert saved["best"]["checkpoint"].endswith(os.path.join("eval", "best", "ckpt-2"))
    assert os.path.exists(saved["best"]["checkpoint"] + ".index")
    assert list((run_dir / "eval").glob("events.out.tfevents.*"))
    # The sidecar evaluates what is new (ckpt-4) and stops: the run has finished.
    proc = run_binary("eval.py", *flags, "--watch", "--poll_secs=0.2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = json.loads((run_dir / "eval" / "metrics.json").read_text())
    assert [e["step"] for e in saved["evaluations"]] == [2, 4]
    best = min(saved["evaluations"], key=lambda e: e["fcd"])
    assert saved["best"]["step"] == best["step"]


def test_evaluation_under_two_replicas_matches_one_device(tiny_gin, tmp_path, mnist_classifier):
    path, _ = mnist_classifier
    results, timings = [], []
    for strategy in (tf.distribute.OneDeviceStrategy("/cpu:0"), mirrored_2()):
        # Counts that are not multiples of the batch: the last batches (31 and 73 images)
        # are partial and split unevenly between the two replicas.
        tiny_gin(f"eval.classifier_path = '{path}'", "eval.num_samples = 231",
                 "eval.num_real = 173", "eval.batch_size = 100")
        exp = experiment.build(strategy)  # same seed: same initial weights
        out_dir = str(tmp_path / str(strategy.num_replicas_in_sync))
        evaluator = evaluator_lib.Evaluator(experiment.eval_subject(exp), out_dir)
        results.append(evaluator.evaluate(0))
        again = evaluator.evaluate(4)  # the traced steps and iterators are reused
        # The kept iterators read the same pass again: the same weights, the same values.
        assert again == pytest.approx(results[-1], rel=1e-6, abs=1e-9)
        timings.append(evaluator.timings)  # what the controller records in stats.jsonl
        # Freed, the evaluator parks its iterators (paragan_tf/teardown.py): destroying
        # them could block for a minute.
        iterators = [loop[1] for loop in evaluator._loops.values()]  # pylint: disable=W0212
        del evaluator, exp
        gc.collect()
        assert all(any(i is p for p in teardown.PARKED) for i in iterators) and iterators
    one, two = results
    assert one.keys() == two.keys()
    for key in one:
        assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key
    assert [(t["samples"], t["replicas"]) for t in timings] == [(231, 1), (231, 2)]
    assert all(0 < t["phases"]["generation"] <= t["seconds"] for t in timings), timings


def test_real_images_are_what_the_split_has_up_to_num_real_and_stamped(
        tiny_gin, tmp_path, mnist_classifier, monkeypatch, caplog):
    path, _ = mnist_classifier
    monkeypatch.setattr(evaluator_lib, "PROGRESS_SECONDS", -1.0)  # a line per batch
    # One class of mnist5k: 500 images, 600 asked for.
    tiny_gin(f"eval.classifier_path = '{path}'", "eval.num_samples = 100",
             "eval.num_real = 600", "eval.batch_size = 100", "per_class.group = 0",
             "per_class.num_groups = 10")
    evaluator = evaluator_lib.Evaluator(
        experiment.eval_subject(experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))),
        str(tmp_path))
    assert evaluator.num_real == 500
    assert evaluator.protocol["real"] == 500
    assert evaluator.protocol["name"] == "fcd0.1k_train0.5k"
    with caplog.at_level("INFO", logger="absl"):
        real = evaluator.real_features()
    assert real["features"].shape[0] == 500 and set(real["labels"]) == {0}
    # A long phase says how far it is (not after its last batch).
    assert "real images: 100 of 500 (" in caplog.text and "400 of 500" in caplog.text
    assert "500 of 500" not in caplog.text
    # A pass shorter than the count (data that changed under the evaluator) is still
    # refused by name rather than wrapped around.
    evaluator.num_real = 600
    evaluator._real = None  # pylint: disable=protected-access
    evaluator._loops.clear()  # pylint: disable=protected-access
    with pytest.raises(ConfigError, match=r"real images: the data has only 500 of the 600 "
                                          r"needed; lower eval.num_real"):
        evaluator.real_features()


def test_in_loop_evaluation_records_every_interval(evaluated_run):
    tmp_path, result = evaluated_run  # eval.every_steps = 2 of total_steps = 4
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert [e["step"] for e in saved["evaluations"]] == [2, 4]
    assert "fcd" in result and saved["best"]["step"] in (2, 4)
    # Every value carries what it measured (mnist5k has no test split: the train split).
    assert saved["protocol"]["name"] == "fcd0.1k_train0.1k"
    assert saved["protocol"] | {"extractor_path": None} == {
        "name": "fcd0.1k_train0.1k", "extractor": "classifier", "extractor_path": None,
        "dataset": "mnist5k", "classes": list(range(10)), "truncation": None, "generated": 100, "real": 100, "reference_split": "train",
        "resize": "padded if smaller, else centre-cropped and area-resized to 32 px",
        "prdc_samples": 100, "nearest_k": 5, "logit_gap_samples": 0}
    for entry in saved["evaluations"]:
        assert entry["protocol"] == "fcd0.1k_train0.1k"
        for key in ("precision", "recall", "density", "coverage", "intra_class_fcd"):
            assert np.isfinite(entry[key]), key
        assert 0 <= entry["precision"] <= 1 and 0 <= entry["coverage"] <= 1
    events = tf.io.gfile.glob(str(tmp_path / "events.out.tfevents.*"))
    described = {v.tag: v.metadata.summary_description for e in events
                 for ev in tf.compat.v1.train.summary_iterator(e) for v in ev.summary.value
                 if v.tag.startswith("metrics/")}
    assert described["metrics/precision"].startswith("fcd0.1k_train0.1k: classifier features")
    # The run's stats.jsonl: a record per progress line and per evaluation, the values and
    # timings the benchmarks read (benchmarks/eval_scaling.py), and the end.
    from benchmarks import eval_scaling
    stats = run_files.read(str(tmp_path))
    assert [(r["kind"], r["step"]) for r in stats] == [
        ("log", 2), ("eval", 2), ("log", 4), ("eval", 4), ("end", 4)]
    evaluated = [r for r in stats if r["kind"] == "eval"]
    assert [r["fcd"] for r in evaluated] == [e["fcd"] for e in saved["evaluations"]]
    timings = eval_scaling.seconds(str(tmp_path), step=4)
    assert timings["samples"] == 100 and timings["replicas"] == 1
    assert 0 < timings["generate_seconds"] <= timings["eval_seconds"]
    assert np.isfinite(stats[0]["loss/D"]) and stats[0]["perf/images_per_sec"] > 0


def _padded(images):
    return np.pad(images, [(0, 0), (2, 2), (2, 2), (0, 0)]).astype(np.float32) / 127.5 - 1.0


def test_the_logit_gap_is_d_on_the_training_subset_minus_d_on_held_out_images(
        tiny_gin, tmp_path, mnist_classifier):
    path = declared_for(mnist_classifier[0], str(tmp_path / "classifier"), "fashion_mnist")
    tiny_gin("dataset.name = 'fashion_mnist'", "dataset.per_class_limit = 10",
             f"eval.classifier_path = '{path}'", "eval.num_samples = 200",
             "eval.num_real = 200", "eval.batch_size = 100")
    exp = experiment.build(mirrored_2())  # two replicas share each batch of the gap
    evaluator = evaluator_lib.Evaluator(experiment.eval_subject(exp), str(tmp_path / "eval"))
    assert evaluator.protocol["logit_gap_samples"] == 100  # 10 per class, not num_real
    gap = evaluator.evaluate(0)["d_logit_gap"]
    # By hand, on one device: the first 10 training images of each class in the stored
    # order and the first 100 test images, padded to 32 px, each with its own label.
    source = datasets.get_source("fashion_mnist")
    train_x, train_y, counts = [], [], np.zeros(10, int)
    for image, label in source.make("train").as_numpy_iterator():
        if counts[label] < 10:
            counts[label] += 1
            train_x.append(image)
            train_y.append(label)
        if counts.sum() == 100:
            break
    test_x, test_y = zip(*source.make("test").take(100).as_numpy_iterator())
    d = exp.discriminator
    expected = (np.mean(d((_padded(np.stack(train_x)), np.array(train_y)), training=False))
                - np.mean(d((_padded(np.stack(test_x)), np.array(test_y)), training=False)))
    assert gap == pytest.approx(float(expected), rel=1e-4, abs=1e-5)
    assert abs(expected) > 1e-3  # an untrained D still tells the two sets apart a little
    assert "D's logit gap on 100 training vs held-out images" in evaluator.describe()


def test_quality_binary_end_to_end_on_the_tiny_config(tmp_path, mnist_classifier):
    # The session's mnist5k classifier where the binary keeps its own: it reuses one of
    # the configured dataset and resolution instead of training one (~10 CPU s an epoch).
    shutil.copytree(mnist_classifier[0], tmp_path / "classifier")
    proc = run_binary("quality.py", f"--output_dir={relative(tmp_path)}",
                      "--gin_file=gin/tiny.gin", "--classifier_epochs=1",
                      "--gin_bindings=eval.every_steps=2",
                      "--gin_bindings=eval.num_samples=20", "--gin_bindings=eval.num_real=20",
                      "--gin_bindings=eval.batch_size=20")  # few images through Inception
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "reusing the classifier in" in proc.stderr, proc.stderr[-3000:]
    result = json.loads((tmp_path / "metrics.json").read_text())
    assert result["steps"] == 4 and result["fcd_start"] > 0 and result["fcd_end"] > 0
    # The FID beside the FCD, against stored statistics of the same real images; mnist5k
    # has no held-out split, so no real-vs-real floor.
    assert result["fid_start"] > 0 and result["fid_end"] > 0 and result["fid_floor"] is None
    assert result["fid_protocol"]["name"] == "fid0.02k_train0.02k"
    assert result["fid_protocol"]["reference_stats"] == str(tmp_path / "fid" / "train.npz")
    fid_history = json.loads((tmp_path / "fid" / "metrics.json").read_text())
    assert [e["step"] for e in fid_history["evaluations"]] == [0, 4]
    assert result["fcd_ratio"] == pytest.approx(result["fcd_end"] / result["fcd_start"])
    assert set(result["targets_met"]) == {"classifier_test_accuracy", "conditional_accuracy",
                                          "fcd_ratio"}
    assert os.path.exists(result["grid"])  # the final EMA sample grid
