"""Shared test set-up: tf-keras, two logical CPUs, a clean gin config per test, and the
fixtures (tiny_gin, policy, the session's mnist classifier). Helpers are in tests/helpers/.

The CPU is split into two logical devices before TensorFlow initialises, so
multi-replica code (MirroredStrategy, sync BN, cross-replica sums) runs in the
same process as single-device tests.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile

# Before TensorFlow loads, for this process and every binary the tests start:
# - layouts come from the rules (the tests' configs pin fp32 and XLA off), never from a
#   measurement or a developer's cache: one test file (measure/test_tuning.py) tunes;
# - oneDNN on for x86 CPUs unless the caller set it: TensorFlow leaves it off on CPUs
#   without AVX-512 VNNI/BF16 or AMX, where our convolutions then run 2-3x slower
#   (docs/benchmarks.md, the layout suite); where TensorFlow turns it on, this is a no-op.
os.environ.setdefault("PARAGAN_TF_LAYOUT_TUNE", "off")
os.environ.setdefault("PARAGAN_TF_LAYOUT_CACHE", os.path.join(
    tempfile.mkdtemp(prefix="paragan_layout_cache_"), "layouts.json"))
if os.uname().machine in ("x86_64", "AMD64"):
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

import paragan_tf  # noqa: F401  (pins tf-keras first)  pylint: disable=wrong-import-position

import gin
import pytest
import tensorflow as tf
import tf_keras as keras

from paragan_tf.distribute import strategy as strategy_lib

strategy_lib.split_cpu(2)


# Seconds each file took under `make test` (--durations) on the 2-core AMD EPYC
# Zen 4 machine of the README, rounded, by path under tests/; a file split out of older ones
# has its tests' estimated share of their times until it is measured again. pytest-xdist
# hands whole files to workers in collection order (the Makefile turns off its reordering
# by test count), so running the longest files first keeps one long file from starting last
# while the other worker idles (longest-processing-time-first scheduling). Unlisted files
# run after these.
_FILE_SECONDS = {
    "train/test_step.py": 515, "e2e/test_scale_out.py": 300, "e2e/test_learning_gate.py": 260,
    "e2e/test_binaries.py": 220, "eval/test_inception.py": 190, "e2e/test_readme.py": 160,
    "e2e/test_crash_resume.py": 160, "benchmarks/test_time_to_quality.py": 145,
    "eval/test_evaluator.py": 120, "measure/test_tuning.py": 120, "scale/test_plan.py": 100,
    "train/test_sweep.py": 90, "train/test_sync_trainer.py": 80, "families/test_biggan_networks.py": 75,
    "train/test_model_dir.py": 70, "benchmarks/test_step.py": 65,
    "train/test_async_trainer.py": 60, "data/test_pipeline.py": 60,
    "train/test_checkpoints.py": 55, "benchmarks/test_input.py": 55,
    "benchmarks/test_async_quality.py": 170, "data/test_records.py": 45,
    "data/test_prepare.py": 45, "train/test_sample_buffer.py": 45, "e2e/test_slurm.py": 45,
    "layout/test_rules.py": 40, "eval/test_reference_stats.py": 40, "data/test_datasets.py": 35,
    "e2e/test_tensorboard.py": 35, "benchmarks/test_small_data.py": 35,
    "data/test_service.py": 30, "models/test_recompute.py": 25, "generate/test_sampling.py": 25,
    "objective/test_ada.py": 25, "benchmarks/test_data.py": 20, "eval/test_classifier.py": 20,
    "train/test_controller.py": 15, "data/test_class_list.py": 15,
    "objective/test_regularizers.py": 10, "train/test_ema.py": 10, "generate/test_export.py": 10,
    "benchmarks/test_quality_runs.py": 5, "distribute/test_placement.py": 220,
    "e2e/test_model_parallel.py": 250, "distribute/test_sharded_adam.py": 130,
    "benchmarks/test_model_parallel.py": 60, "train/test_pix2pix_training.py": 110,
    "benchmarks/test_pix2pix_study.py": 40, "e2e/test_pix2pix_multi_worker.py": 25,
    "e2e/test_family_plugin.py": 60,
}
_TESTS = os.path.dirname(os.path.abspath(__file__))


def pytest_report_header(config):  # pylint: disable=unused-argument
    """The machine at the top of every run: a suite's time means nothing without it (the
    README's Development section tabulates them per machine)."""
    from paragan_tf.scale import cpu_peak  # pylint: disable=import-outside-toplevel
    info, clock = cpu_peak.cpuinfo(), cpu_peak.measure_clock_ghz()
    return (f"machine: {info.get('model name', 'unknown CPU')} (family "
            f"{info.get('cpu family', '?')} model {info.get('model', '?')}), "
            f"{len(os.sched_getaffinity(0))} cores, "
            + (f"{clock:.2f} GHz measured" if clock else "clock not measured"))


def pytest_collection_modifyitems(items):
    def seconds(item):
        return _FILE_SECONDS.get(os.path.relpath(str(item.path), _TESTS).replace(os.sep, "/"), 0)
    items.sort(key=lambda item: -seconds(item))  # stable: keeps order


@pytest.fixture(autouse=True)
def clean_gin():
    gin.clear_config()
    yield
    gin.clear_config()


@pytest.fixture(autouse=True)
def graph_optimizer(request):
    """TensorFlow's graph optimiser (Grappler) off in this process unless the test is marked
    `grappler`. It rewrites every traced function on its first call without changing what
    it computes, and most tests here trace a step and call it once or twice: off, the
    training-step tests take ~10-20 % less CPU (benchmarks/probes/no_grappler.py). A test
    that builds an experiment gets its config's layout.graph_optimizer instead (gin/tiny.gin:
    off, as for the binaries the tests start on it); the learning gate runs with it on."""
    tf.config.optimizer.set_experimental_options(
        {"disable_meta_optimizer": request.node.get_closest_marker("grappler") is None})
    yield


@pytest.fixture
def tiny_gin():
    """Parses gin/tiny.gin plus extra bindings (unfinalised, so tests may add more)."""
    from tests.helpers.training import parse_tiny
    return parse_tiny


@pytest.fixture
def policy():
    """Sets a global Keras precision policy for one test and restores float32 after it."""
    yield keras.mixed_precision.set_global_policy
    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture(scope="session")
def mnist_classifier(tmp_path_factory):
    """A classifier for mnist5k at 32x32 (two epochs, ~20 s alone): (its directory, its info).

    Trained once per test run: the first xdist worker to get here trains it under a
    file lock in the run's directory, the others load it (read-only for every test).
    """
    from paragan_tf.data import config as data_config
    from paragan_tf.data import datasets
    from paragan_tf.eval import classifier
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # this run's directory, shared by its workers (not by other runs)
    path = str(root / "mnist5k_classifier")
    with open(str(root / "mnist5k_classifier.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not os.path.exists(os.path.join(path, classifier.INFO_FILE)):
            data = data_config.DatasetConfig(name="mnist5k", shuffle_buffer=100)
            model, info = classifier.train(datasets.get_source("mnist5k"), data, epochs=2,
                                           progress=lambda m: None)
            classifier.save(model, path, info)
    with open(os.path.join(path, classifier.INFO_FILE)) as f:
        return path, json.load(f)
