"""The feature extractors (eval/features.py): loading one, choosing one, refusing a wrong one."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.errors import ConfigError
from paragan_tf.eval import classifier
from paragan_tf.eval import features


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
