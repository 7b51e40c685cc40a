"""Evaluation: metric math against numpy, extractors, the eval binary, sampling modes, export."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from conftest import PYTHON, declared_for, mirrored_2, run_binary
from paragan_tf.generate import export
from paragan_tf.data import datasets
from paragan_tf.errors import ConfigError
from paragan_tf.eval import classifier
from paragan_tf.eval import evaluator as evaluator_lib
from paragan_tf.eval import features
from paragan_tf.eval import metrics
from paragan_tf.train import experiment
from paragan_tf.train import loop
from paragan_tf.train import records


def _activations(n=300, d=16, shift=0.0, seed=0):
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(d, d)) / np.sqrt(d)
    return rng.normal(size=(n, d)) @ mix + shift


def _numpy_fid(a, b):
    mu_a, mu_b = a.mean(0), b.mean(0)
    s_a, s_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    # Tr((S_a S_b)^1/2) = sum of the square roots of the (real, >= 0) eigenvalues of S_a S_b.
    trace_sqrt = np.sum(np.sqrt(np.abs(np.linalg.eigvals(s_a @ s_b).real)))
    return np.sum((mu_a - mu_b) ** 2) + np.trace(s_a) + np.trace(s_b) - 2 * trace_sqrt


def _numpy_kid(a, b):
    d = a.shape[1]
    kernel = lambda x, y: (x @ y.T / d + 1.0) ** 3  # noqa: E731
    k_aa, k_bb, k_ab = kernel(a, a), kernel(b, b), kernel(a, b)
    m, n = len(a), len(b)
    return ((k_aa.sum() - np.trace(k_aa)) / (m * (m - 1))
            + (k_bb.sum() - np.trace(k_bb)) / (n * (n - 1)) - 2 * k_ab.mean())


def test_fid_of_a_set_against_itself_is_zero():
    a = _activations()
    assert abs(metrics.frechet_distance(a, a)) < 1e-6 * np.trace(np.cov(a, rowvar=False))


def test_fid_and_kid_match_a_float64_numpy_reference():
    a, b = _activations(seed=0), _activations(shift=0.3, seed=1)
    fid, reference = metrics.frechet_distance(a, b), _numpy_fid(a, b)
    assert reference > 0.1 and fid == pytest.approx(reference, rel=1e-3)
    kid, _ = metrics.kernel_distance(a, b)  # 300 samples: one block, the exact estimator
    assert kid == pytest.approx(_numpy_kid(a, b), rel=1e-3)


def test_classifier_score_of_uniform_logits_is_one_and_of_confident_distinct_is_k():
    assert metrics.classifier_score(np.zeros([50, 10])) == pytest.approx(1.0)
    confident = np.eye(10)[np.arange(100) % 10] * 50.0  # each class equally often, sure
    assert metrics.classifier_score(confident) == pytest.approx(10.0, rel=1e-3)
    assert metrics.conditional_accuracy([1, 2, 3, 3], [1, 2, 3, 4]) == 0.75


def test_inception_path_loads_a_savedmodel_of_that_interface(tmp_path):
    # A stand-in with TF-GAN's Inception interface (no real weights exist on this machine):
    # it checks the loading, the resize to 299 and the grey-to-RGB tiling for real.
    module = tf.Module()

    @tf.function(input_signature=[tf.TensorSpec([None, 299, 299, 3], tf.float32)])
    def serve(images):
        pooled = tf.reduce_mean(images, axis=[1, 2])
        return {"pool_3": tf.concat([pooled, pooled ** 2], -1)[:, None, None, :],
                "logits": tf.concat([pooled, -pooled], -1)}
    module.serve = serve
    tf.saved_model.save(module, str(tmp_path / "inception"),
                        signatures={"serving_default": serve})
    extractor = features.load("inception", str(tmp_path / "inception"), 32, 1, "mnist5k")
    out = extractor.call(tf.fill([4, 32, 32, 1], 0.5))
    assert out["features"].shape == (4, 6) and out["logits"].shape == (4, 6)
    assert np.allclose(out["features"].numpy()[:, :3], 0.5)
    assert extractor.names["frechet"] == "fid"


def test_auto_extractor_is_fid_for_colour_fcd_for_grey_or_a_set_classifier():
    assert features.resolve_kind("auto", 3, None) == "inception"
    assert features.resolve_kind("auto", 1, None) == "classifier"
    assert features.resolve_kind("auto", 3, "runs/clf") == "classifier"  # never ignored
    assert features.resolve_kind("inception", 1, "runs/clf") == "inception"
    with pytest.raises(ConfigError, match="eval.feature_extractor='fid' must be one of"):
        features.resolve_kind("fid", 3, None)


def test_missing_or_mismatched_extractor_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="eval.classifier_path is not set.*train_classifier"):
        features.load("classifier", None, 32, 1, "mnist5k")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / classifier.INFO_FILE).write_text(json.dumps(
        dict(dataset="fashion_mnist", resolution=32, channels=1)))
    with pytest.raises(ConfigError, match="was trained for .*fashion_mnist"):
        features.load("classifier", str(tmp_path / "c"), 32, 1, "mnist5k")


def test_classifier_reports_held_out_accuracy(mnist_classifier):
    _, info = mnist_classifier
    assert info["test_set"] == "held-out 500 of the train split"
    assert info["test_accuracy"] > 0.8  # two epochs on 4,500 digits; chance is 0.1


def test_eval_binary_on_a_tiny_checkpoint_then_as_a_sidecar(tiny_gin, tmp_path,
                                                            mnist_classifier):
    path, _ = mnist_classifier
    tiny_gin("train.total_steps = 4")  # checkpoints at steps 2 and 4
    loop.train(experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0")), str(tmp_path))
    flags = [f"--model_dir={tmp_path}", f"--gin_bindings=eval.classifier_path='{path}'",
             "--gin_bindings=eval.num_samples=200", "--gin_bindings=eval.num_real=200",
             "--gin_bindings=eval.batch_size=100"]
    proc = run_binary("eval.py", *flags, f"--checkpoint={tmp_path / 'ckpt-2'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["step"] == 2
    saved = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert saved["metric"] == "fcd" and [e["step"] for e in saved["evaluations"]] == [2]
    for key in ("fcd", "kcd", "classifier_score", "conditional_accuracy"):
        assert np.isfinite(saved["evaluations"][0][key]), key
    assert saved["best"]["checkpoint"].endswith(os.path.join("eval", "best", "ckpt-2"))
    assert os.path.exists(saved["best"]["checkpoint"] + ".index")
    assert list((tmp_path / "eval").glob("events.out.tfevents.*"))
    # The sidecar evaluates what is new (ckpt-4) and stops: the run has finished.
    proc = run_binary("eval.py", *flags, "--watch", "--poll_secs=0.2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = json.loads((tmp_path / "eval" / "metrics.json").read_text())
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
        evaluator = evaluator_lib.Evaluator(exp, out_dir)
        results.append(evaluator.evaluate(0))
        again = evaluator.evaluate(4)  # the traced steps and iterators are reused
        # The kept iterators read the same pass again: the same weights, the same values.
        assert again == pytest.approx(results[-1], rel=1e-6, abs=1e-9)
        timings.append(evaluator.timings)  # what the controller records in stats.jsonl
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
        experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0")), str(tmp_path))
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


def test_in_loop_evaluation_records_every_interval(tiny_gin, tmp_path, mnist_classifier):
    path, _ = mnist_classifier
    tiny_gin("train.total_steps = 4", "eval.every_steps = 2", f"eval.classifier_path = '{path}'",
             "eval.num_samples = 100", "eval.num_real = 100", "eval.batch_size = 50")
    result = loop.train(experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0")),
                        str(tmp_path))
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
    stats = records.read(str(tmp_path))
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
    evaluator = evaluator_lib.Evaluator(exp, str(tmp_path / "eval"))
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


def test_precision_recall_density_coverage_match_their_definitions():
    """1-D features, k = 1: each real sample's ball reaches its nearest real neighbour (1)."""
    real = np.array([[0.0], [1.0], [2.0], [3.0]])
    generated = np.array([[0.5], [10.0], [11.0]])  # one inside the real balls, two far
    out = metrics.precision_recall_density_coverage(real, generated, nearest_k=1)
    # precision: 0.5 lies in the balls of 0 and 1, 10 and 11 in none -> 1/3.
    # recall: 0.5's ball reaches its nearest generated neighbour (10, radius 9.5): it holds
    # all 4 reals -> 1. density: (2 balls + 0 + 0) / (k * 3 samples) = 2/3.
    # coverage: the balls of reals 0 and 1 hold a generated sample -> 2/4.
    assert out == pytest.approx(dict(precision=1 / 3, recall=1.0, density=2 / 3, coverage=0.5))
    far = metrics.precision_recall_density_coverage(real, generated + 100.0, nearest_k=1)
    assert far["precision"] == 0 and far["density"] == 0 and far["coverage"] == 0


def test_intra_class_distance_averages_the_per_class_distances():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(200, 3)), rng.normal(size=(200, 3))
    labels = np.repeat([0, 1], 200)
    real = np.concatenate([a, b])
    generated = np.concatenate([a, b + 2.0])  # class 0 identical; class 1 shifted by 2
    out = metrics.intra_class_frechet(real, labels, generated, labels)
    # class 0: 0; class 1: ||shift||^2 = 3 * 4 = 12 (the covariances are equal).
    assert out == pytest.approx((0.0 + 12.0) / 2, abs=1e-6)
    # The pooled distance mixes the classes and is not their mean: a negative control.
    assert metrics.frechet_distance(real, generated) != pytest.approx(out, abs=0.5)


def test_soft_class_weights_equal_integer_labels_so_class_interpolation_is_exact(tiny_gin):
    tiny_gin()
    g = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0")).generator_ema
    z = tf.random.stateless_normal([3, g.dim_z], [1, 2])
    labels = tf.constant([0, 4, 9])
    hard = g((z, labels), training=False)
    soft = g((z, tf.one_hot(labels, g.num_classes)), training=False)
    np.testing.assert_allclose(hard.numpy(), soft.numpy(), atol=1e-5)


def test_sample_binary_draws_interpolations(tiny_gin, tmp_path):
    tiny_gin("train.total_steps = 2")
    loop.train(experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0")), str(tmp_path))
    proc = run_binary("sample.py", f"--model_dir={tmp_path}", "--mode=class_interpolation",
                      "--classes=0,5,9", "--per_class=6", "--standing_stats_batches=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    from PIL import Image  # pylint: disable=import-outside-toplevel
    grid = Image.open(tmp_path / "samples" / "class_interpolation.png")
    assert grid.size == (6 * 34 + 2, 2 * 34 + 2)  # 2 pairs x 6 steps of 32 px, 2 px borders


def test_exported_generator_runs_in_a_fresh_process_without_paragan_tf(tiny_gin, tmp_path):
    tiny_gin()
    g = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0")).generator_ema
    path = export.export_generator(g, str(tmp_path / "generator"), dict(step=0))
    z = tf.random.stateless_normal([4, g.dim_z], [3, 4])
    labels = tf.constant([1, 2, 3, 4])
    expected = g((z, labels), training=False).numpy()
    np.save(tmp_path / "z.npy", z.numpy())
    script = textwrap.dedent(f"""
        import sys
        sys.modules["paragan_tf"] = None  # importing it anywhere below would fail
        import numpy as np, tensorflow as tf
        serve = tf.saved_model.load({path!r}).signatures["serving_default"]
        z = tf.constant(np.load({str(tmp_path / 'z.npy')!r}))
        images = serve(z=z, labels=tf.constant([1, 2, 3, 4]))["images"]
        np.save({str(tmp_path / 'images.npy')!r}, images.numpy())
        """)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TF_USE_LEGACY_KERAS")}
    proc = subprocess.run([PYTHON, "-c", script], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_allclose(np.load(tmp_path / "images.npy"), expected, atol=1e-5)
    info = json.loads((tmp_path / "generator" / export.INFO_FILE).read_text())
    assert info["dim_z"] == g.dim_z and info["resolution"] == 32


def test_quality_binary_end_to_end_on_the_tiny_config(tmp_path):
    proc = run_binary("quality.py", f"--output_dir={tmp_path}", "--gin_file=gin/tiny.gin",
                      "--classifier_epochs=1", "--gin_bindings=eval.every_steps=2",
                      "--gin_bindings=eval.num_samples=50", "--gin_bindings=eval.num_real=50",
                      "--gin_bindings=eval.batch_size=50")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "metrics.json").read_text())
    assert result["steps"] == 4 and result["fcd_start"] > 0 and result["fcd_end"] > 0
    # The FID beside the FCD, against stored statistics of the same real images; mnist5k
    # has no held-out split, so no real-vs-real floor.
    assert result["fid_start"] > 0 and result["fid_end"] > 0 and result["fid_floor"] is None
    assert result["fid_protocol"]["name"] == "fid0.05k_train0.05k"
    assert result["fid_protocol"]["reference_stats"] == str(tmp_path / "fid" / "train.npz")
    fid_history = json.loads((tmp_path / "fid" / "metrics.json").read_text())
    assert [e["step"] for e in fid_history["evaluations"]] == [0, 4]
    assert result["fcd_ratio"] == pytest.approx(result["fcd_end"] / result["fcd_start"])
    assert set(result["targets_met"]) == {"classifier_test_accuracy", "conditional_accuracy",
                                          "fcd_ratio"}
    assert os.path.exists(result["grid"])  # the final EMA sample grid
