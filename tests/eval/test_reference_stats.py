"""Stored FID reference statistics (eval/reference_stats.py, bin/eval.py --write_stats):
written once, reused only under the same protocol, files from elsewhere accepted."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from paragan_tf.errors import ConfigError
from paragan_tf.eval import inception
from paragan_tf.eval import metrics
from paragan_tf.eval import reference_stats
from tests.helpers.repo import REPO, run_binary

# 20 synthetic RGB images: the Inception features of so few are cheap, and the FID on
# them is still a real one (fewer samples than dimensions: eval/metrics.py).
SYNTHETIC = ("dataset.name = 'synthetic'", "eval.num_samples = 20", "eval.num_real = 20",
             "eval.batch_size = 10")


def _evaluator(tiny_gin, output_dir, *bindings):
    from paragan_tf.eval import evaluator as evaluator_lib
    from paragan_tf.train import experiment
    tiny_gin(*SYNTHETIC, *bindings)
    return evaluator_lib.Evaluator(experiment.eval_subject(experiment.build()), str(output_dir))


def test_stored_statistics_give_the_fid_of_the_real_images_and_refuse_another_protocol(
        tiny_gin, tmp_path):
    direct = _evaluator(tiny_gin, tmp_path / "direct")
    stats = str(tmp_path / "stats" / "synthetic_test.npz")
    written = direct.write_stats(stats)
    assert written.protocol["real"] == 20 and written.protocol["extractor_sha1"] == \
        inception.SHA1 and written.protocol["dataset"] == "synthetic"

    stored = _evaluator(tiny_gin, tmp_path / "stored", f"eval.reference_stats = '{stats}'")
    result = stored.evaluate(0)
    assert set(result) == {"fid", "d_logit_gap"}  # no per-sample metrics without features
    # The FID of the same generated samples against the real images' own features.
    generated = stored._generated()["features"]  # pylint: disable=protected-access
    expected = metrics.frechet_distance(direct.real_features()["features"], generated)
    assert result["fid"] == pytest.approx(expected, rel=1e-6)
    protocol = stored.protocol
    assert protocol["name"] == "fid0.02k_test0.02k" and protocol["real"] == 20
    assert protocol["reference_stats"] == stats
    assert protocol["reference_stats_sha1"] == written.sha1
    assert "synthetic_test.npz (sha1 " + written.sha1[:12] in stored.describe()

    with pytest.raises(ConfigError, match=r"measured with real=20, this evaluation has "
                                          r"real=19; write statistics"):
        _evaluator(tiny_gin, tmp_path / "x", "eval.num_real = 19",
                   f"eval.reference_stats = '{stats}'")
    for key, value in [("classes", [3]), ("extractor", "classifier"), ("resize", "nearest"),
                       ("dataset", "cifar10"), ("reference_split", "train"),
                       ("extractor_sha1", "0" * 40)]:
        with pytest.raises(ConfigError, match=f"measured with {key}="):
            reference_stats.read(stats, dict(written.protocol, **{key: value}),
                                 inception.FEATURES)


def test_statistics_from_elsewhere_are_used_unverified_and_a_wrong_size_is_refused(
        tiny_gin, tmp_path):
    """clean-fid and TTUR publish `mu` and `sigma` alone."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(4096, inception.FEATURES))
    path = str(tmp_path / "cifar10_legacy_tensorflow_train_32.npz")
    np.savez(path, mu=features.mean(0), sigma=np.cov(features, rowvar=False))
    evaluator = _evaluator(tiny_gin, tmp_path / "eval", f"eval.reference_stats = '{path}'")
    assert evaluator.protocol["name"] == "fid0.02k_cifar10_legacy_tensorflow_train_32"
    assert evaluator.protocol["real"] is None
    assert evaluator.protocol["reference_split"].startswith("unknown")
    assert evaluator.reference.protocol is None and evaluator.reference.mu.shape == (2048,)

    np.savez(path, mu=np.zeros(64), sigma=np.eye(64))
    with pytest.raises(ConfigError, match=r"holds mu \(64,\) and sigma \(64, 64\); the "
                                          r"inception features have 2048 dimensions"):
        _evaluator(tiny_gin, tmp_path / "x", f"eval.reference_stats = '{path}'")
    with pytest.raises(ConfigError, match=r"does not exist; write it with bin/eval.py "
                                          r"--write_stats="):
        reference_stats.read(str(tmp_path / "missing.npz"), evaluator.protocol, 2048)
    with pytest.raises(ConfigError, match="has no protocol .* only with the Inception"):
        reference_stats.read(path, dict(evaluator.protocol, extractor="classifier"), 64)


def test_write_stats_from_the_command_line_with_a_relative_path(tmp_path):
    """As a user types it: a gin file, bindings and a relative output path."""
    result = run_binary("eval.py", "--gin_file=gin/tiny.gin",
                        *[f"--gin_bindings={b}" for b in SYNTHETIC],
                        f"--write_stats={os.path.relpath(tmp_path, REPO)}/s.npz")
    assert result.returncode == 0, result.stderr[-3000:]
    printed = json.loads(result.stdout.strip().splitlines()[-1])
    assert printed["path"] == str(tmp_path / "s.npz") and printed["real"] == 20
    with np.load(tmp_path / "s.npz") as stored:
        assert stored["mu"].shape == (inception.FEATURES,)
        assert json.loads(str(stored["protocol"]))["reference_split"] == "test"
    missing = run_binary("eval.py", "--write_stats=x.npz")
    assert missing.returncode == 2 and "--write_stats needs --model_dir" in missing.stderr
