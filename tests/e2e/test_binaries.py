"""The absl binaries end to end, in fresh processes: train, sample, dry run, bad input, SIGTERM."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys

import gin
import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.errors import ConfigError
from paragan_tf.measure import built
from paragan_tf.train import driver
from paragan_tf.train import experiment
from paragan_tf.measure import tuning as layout_tuning
from tests.helpers import clusters
from tests.helpers.clusters import run_binary  # waits while the run prints, no fixed timeout
from tests.helpers.repo import PYTHON, REPO

pytestmark = pytest.mark.slow


def _tags(model_dir):
    tags = set()
    for path in glob.glob(os.path.join(model_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(v.tag for v in event.summary.value)
    return tags


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    model_dir = str(tmp_path_factory.mktemp("tiny_run"))
    result = run_binary("train.py", "--gin_file=gin/tiny.gin", f"--model_dir={model_dir}")
    assert result.returncode == 0, result.stderr[-3000:]
    return model_dir, result


def test_train_binary_writes_checkpoints_summaries_samples_and_config(tiny_run):
    model_dir, result = tiny_run
    assert tf.train.latest_checkpoint(model_dir).endswith("ckpt-4")
    assert os.path.exists(os.path.join(model_dir, "ckpt-2.index"))
    assert os.path.exists(os.path.join(model_dir, "samples", "step_0000004.png"))
    with open(os.path.join(model_dir, "operative_config.gin")) as f:
        operative = f.read()
    assert "train.total_steps = 4" in operative and "loss.fn = @hinge" in operative
    expected = {"loss/G", "loss/D", "grad_norm/G", "grad_norm/D", "lr/G", "lr/D",
                "perf/images_per_sec", "perf/step_images_per_sec", "perf/input_wait_frac",
                "samples/ema", "config/operative_gin"}
    assert expected <= _tags(model_dir)
    assert "step 4/4" in result.stderr and "img/s" in result.stderr and "ETA" in result.stderr
    # The last window (steps 2-4) holds step 2's checkpoint: the wall-time rate counts it,
    # the pure step rate does not.
    with open(os.path.join(model_dir, "train_result.json")) as f:
        final = json.load(f)
    assert 0 < final["perf/images_per_sec"] < final["perf/step_images_per_sec"]


def test_sample_binary_writes_a_class_row_grid(tiny_run, tmp_path):
    model_dir, _ = tiny_run
    output = str(tmp_path / "grid.png")
    result = run_binary("sample.py", f"--model_dir={model_dir}", f"--output={output}",
                        "--per_class=4", "--truncation=1.0", "--classes=0,3,7")
    assert result.returncode == 0, result.stderr[-3000:]
    grid = tf.io.decode_png(tf.io.read_file(output)).numpy()
    assert grid.shape == (3 * 34 + 2, 4 * 34 + 2, 1)  # 32-pixel tiles, 2-pixel gutters
    assert grid[2:34, 2:34].std() > 0  # a generated tile, not blank
    bad = run_binary("sample.py", f"--model_dir={model_dir}", "--classes=12")
    assert bad.returncode != 0 and "--classes [12] out of range" in bad.stderr


def test_dry_run_prints_the_reference_cifar10_counts(tmp_path, monkeypatch):
    # This machine's step measured once (a layout cache entry, as the tuner writes it):
    # the plan of this_cpu reads its efficiency from there, and says when there is none.
    from paragan_tf.layout import rules as layout_lib  # pylint: disable=import-outside-toplevel
    from paragan_tf.layout import cache as layout_cache  # pylint: disable=import-outside-toplevel
    cache = tmp_path / "layouts.json"
    signature = layout_lib.detect().signature()
    precision = "mixed_bfloat16" if layout_lib.detect().bf16_unit else "float32"
    cache.write_text(json.dumps({"k": dict(
        schema=layout_cache.SCHEMA, hardware=signature, step=dict(precision=precision, resolution=32, batch_size=32),
        choice=dict(precision=precision), seconds_per_step=0.5, train_step_flops=2.0e10,
        date="2026-11-27 00:00:00 UTC")}))
    # Without an entry the plan says so: the dry run's own steps (bin/train.py's _main),
    # in this process on gin/tiny.gin (float32 pinned): a second cifar10 process cost ~20 s.
    monkeypatch.setenv("PARAGAN_TF_LAYOUT_CACHE", str(tmp_path / "empty.json"))
    experiment.parse(["gin/tiny.gin"], [])
    settings = experiment.Settings.read()
    tiny = experiment.build(check_data=False, settings=settings,
                            measured=layout_tuning.settle(settings, allow_measuring=False))
    assert built.plan_line(tiny, built.memory_of(tiny)).startswith(
        "no plan: this_cpu has no measured step at float32")
    assert experiment.summary(tiny)["layout"]["source"] == "rule"
    gin.clear_config()
    result = run_binary("train.py", "--gin_file=gin/biggan_cifar10.gin", "--dry_run",
                        env={"PARAGAN_TF_LAYOUT_CACHE": str(cache)})
    assert result.returncode == 0, result.stderr[-3000:]
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    assert facts["generator_params"] == 4_304_387
    assert facts["discriminator_params"] == 4_207_361
    assert facts["strategy"] == "OneDeviceStrategy" and facts["num_replicas"] == 1
    assert facts["global_batch_size"] == 50
    assert facts["data_ready"] is False and "tfds build cifar10" in facts["data_error"]
    # The scale plan of this run on this machine, one line (paragan_tf/scale/plan.py).
    assert facts["plan"].startswith("this_cpux1 ") and " s/step " in facts["plan"]
    assert "(measured on this_cpu 2026-11-27 00:00:00 UTC)" in facts["plan"]  # the entry's


BAD_INPUT = {
    "unknown dataset": (["dataset.name = 'mnist6k'"], "dataset.name='mnist6k'"),
    "missing data_dir": (["dataset.name = 'image_folder'", "dataset.data_dir = '/no/such/dir'"],
                         "dataset.data_dir='/no/such/dir'"),
    "tfds not prepared": (["dataset.name = 'tfds:mnist'", "dataset.data_dir = '/no/such/tfds'"],
                          "dataset.data_dir='/no/such/tfds'"),
    "batch not divisible": (["strategy.kind = 'mirrored'", "strategy.num_logical_cpus = 2",
                             "train.batch_size = 7"], "train.batch_size=7"),
    "non-positive learning rate": (["D/optimizer.learning_rate = 0.0"],
                                   "D/optimizer.learning_rate=0.0"),
    "unknown binding": (["train.no_such_option = 1"], "no_such_option"),
    "unknown configurable": (["Generatr.ch = 8"], "Generatr"),
    # No TPU here: the factory must say so (tpu='local' never asks a cloud metadata service).
    "no TPU": (["strategy.kind = 'tpu'", "strategy.tpu = 'local'"], "no TPU reachable"),
    "malformed TF_CONFIG": (["strategy.kind = 'multi_worker_mirrored'"],
                            "TF_CONFIG is not valid JSON", {"TF_CONFIG": '{"cluster": {'}),
    # A one-worker cluster (port 0: any free one); each worker's clock would pick its own
    # last step.
    "time budget under multi-worker": (["strategy.kind = 'multi_worker_mirrored'",
                                        "train.max_minutes = 1.0"],
                                       "train.max_minutes=1.0 is not available under "
                                       "strategy.kind='multi_worker_mirrored'",
                                       {"TF_CONFIG": '{"cluster": {"worker": ["127.0.0.1:0"]}, '
                                                     '"task": {"type": "worker", "index": 0}}'}),
    "missing Slurm variable": (["strategy.kind = 'multi_worker_mirrored'",
                                "cluster.source = 'slurm'"], "SLURM_STEP_NODELIST is not set",
                               {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2",
                                "SLURM_STEP_TASKS_PER_NODE": "2"}),
}


# Refused in this process, through the steps of bin/train.py's _main that reach them (a
# process each would cost ~5 CPU s of TensorFlow import): the ConfigError whose first line
# common.absl_main prints as the binary's one error line, exit code 2. The binary itself
# turns every ConfigError the same way, as the other cases show end to end, one per phase
# of _main: gin parsing, the cluster (TF_CONFIG, Slurm), the strategy (TPU), the data
# check, the driver. Not in-process: those that would build a multi-worker or TPU
# strategy in this process if the refusal were gone.
IN_PROCESS = ("unknown dataset", "tfds not prepared", "batch not divisible",
              "non-positive learning rate", "unknown configurable")


def _refused_in_process(bindings, model_dir) -> str:
    """bin/train.py's _main up to its first step, here: its ConfigError's first line."""
    gin.clear_config()
    try:
        with pytest.raises(ConfigError) as refused:
            experiment.parse(["gin/tiny.gin"], bindings)  # common.parse_gin
            settings = experiment.Settings.read()
            measured = layout_tuning.settle(settings, allow_measuring=False)
            exp = experiment.build(check_data=True, settings=settings, measured=measured)
            driver.train(exp, model_dir)
    finally:
        gin.clear_config()
    return str(refused.value).strip().splitlines()[0]


def test_bad_input_exits_non_zero_with_one_line_naming_the_setting(tmp_path):
    procs = {}
    for name, (bindings, _, *env) in BAD_INPUT.items():  # all at once: mostly TF import
        if name in IN_PROCESS:
            continue
        args = [PYTHON, os.path.join(REPO, "bin", "train.py"), "--gin_file=gin/tiny.gin",
                f"--model_dir={tmp_path / name.replace(' ', '_')}"]
        args += [f"--gin_bindings={b}" for b in bindings]
        environ = {k: v for k, v in os.environ.items()
                   if not k.startswith("SLURM_") and k != "TF_CONFIG"}
        environ.update(*env)
        with open(tmp_path / f"{name.replace(' ', '_')}.err", "w") as err:
            procs[name] = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL,
                                           stderr=err, text=True, env=environ)

    def stderr_of(name):
        return (tmp_path / f"{name.replace(' ', '_')}.err").read_text()
    try:
        for name in IN_PROCESS:  # while the binaries import TensorFlow
            bindings, setting = BAD_INPUT[name]
            model_dir = tmp_path / name.replace(" ", "_")
            assert setting in _refused_in_process(bindings, str(model_dir)), name
            assert not glob.glob(str(model_dir / "ckpt-*")), name
        # Six processes on however many cores: no deadline, as long as they keep printing.
        clusters.wait_while_progressing(
            lambda: True if all(p.poll() is not None for p in procs.values()) else None,
            lambda: "".join(stderr_of(name) for name in procs), "the bad-input runs")
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for name, proc in procs.items():
        stderr = stderr_of(name)
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert proc.returncode == 2, (name, stderr[-2000:])
        assert lines[-1].startswith("train.py: error: "), (name, lines[-1])
        assert BAD_INPUT[name][1] in lines[-1], (name, lines[-1])
        assert "Traceback" not in stderr, name
        assert not glob.glob(str(tmp_path / name.replace(" ", "_") / "ckpt-*")), name


def test_sigterm_saves_a_checkpoint_and_a_relaunch_finishes_and_both_release_the_lock(
        tmp_path):
    model_dir = str(tmp_path)
    args = [PYTHON, os.path.join(REPO, "bin", "train.py"), "--gin_file=gin/tiny.gin",
            f"--model_dir={model_dir}", "--gin_bindings=train.total_steps = 100000",
            "--gin_bindings=train.checkpoint_every = 100000",
            "--gin_bindings=train.sample_every = 0"]
    proc = subprocess.Popen(args, cwd=REPO, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:  # wait until training is really under way
        seen.append(line)
        if "step 4/100000" in line:
            break
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM, "".join(seen)[-2000:] + rest[-2000:]
    assert "stopped by signal 15" in rest
    # A clean stop releases the folder's lock and clears its record: the relaunch takes it
    # over without naming a previous holder (only a killed run's record is left behind).
    assert open(os.path.join(model_dir, ".lock")).read() == ""
    latest = tf.train.latest_checkpoint(model_dir)
    stopped_at = int(latest.rsplit("-", 1)[1])
    assert stopped_at >= 4
    # The relaunch under op determinism too: its loop must not time the input wait
    # (tf.timestamp is refused there: at 53f528d this run failed on while/Timestamp).
    result = run_binary("train.py", "--gin_file=gin/tiny.gin", f"--model_dir={model_dir}",
                        f"--gin_bindings=train.total_steps = {stopped_at + 2}",
                        "--gin_bindings=train.deterministic = True")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resumed from {latest} at step {stopped_at}" in result.stderr
    assert "the input wait is not measured" in result.stderr
    assert "taking over the lock" not in result.stderr
    assert tf.train.latest_checkpoint(model_dir).endswith(f"ckpt-{stopped_at + 2}")
    assert open(os.path.join(model_dir, ".lock")).read() == ""  # a normal end too


def test_1024px_config_trains_a_step_with_recompute(tmp_path):
    """gin/biggan_1024.gin's architecture (narrow: ch 4 / 8, a two-class folder of small
    PNGs resized to 1024 px) end to end: a bf16-or-auto step (one D update, one G update)
    with every block rematerialised, a checkpoint and a sample grid. Mechanics only: no
    1024 px dataset installs here. Two classes, not ten: the grid is drawn eagerly, 1024 px
    a row."""
    rng = np.random.default_rng(0)
    for cls in ("a", "b"):
        os.makedirs(tmp_path / "images" / cls)
        for i in range(2):
            image = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
            tf.io.write_file(str(tmp_path / "images" / cls / f"{i}.png"), tf.io.encode_png(image))
    model_dir = str(tmp_path / "run")
    result = run_binary(
        "train.py", "--gin_file=gin/biggan_1024.gin", f"--model_dir={model_dir}",
        "--gin_bindings=dataset.name='image_folder'",
        f"--gin_bindings=dataset.data_dir='{tmp_path / 'images'}'",
        "--gin_bindings=Generator.ch=4",
        "--gin_bindings=Discriminator.ch=8", "--gin_bindings=Generator.shared_dim=8",
        "--gin_bindings=Generator.dim_z=18", "--gin_bindings=train.batch_size=2",
        "--gin_bindings=train.accumulation=1", "--gin_bindings=train.total_steps=1",
        "--gin_bindings=train.d_steps=1",
        "--gin_bindings=train.steps_per_loop=1", "--gin_bindings=train.log_every=1",
        "--gin_bindings=train.checkpoint_every=1", "--gin_bindings=train.sample_every=1",
        "--gin_bindings=train.ema_start_step=0", "--gin_bindings=dataset.shuffle_buffer=8",
        "--gin_bindings=layout.graph_optimizer=False")  # one step: see gin/tiny.gin
    assert result.returncode == 0, result.stderr[-3000:]
    with open(os.path.join(model_dir, "operative_config.gin")) as f:
        operative = f.read()
    assert "train.recompute = True" in operative and "dataset.resolution = 1024" in operative
    assert tf.train.latest_checkpoint(model_dir).endswith("ckpt-1")
    grid = tf.io.decode_png(tf.io.read_file(os.path.join(model_dir, "samples",
                                                          "step_0000001.png"))).numpy()
    assert grid.shape[0] > 1024 and grid.shape[1] > 1024 and grid.std() > 0


_NOISY_CHILD = """
import os, sys, warnings
sys.path.insert(0, "bin")
import quiet_startup
quiet_startup.install()
os.write(2, b"I0000 00:00:1.0 1 cudart_stub.cc:31] Could not find cuda drivers on your machine\\n")
os.write(2, b"E0000 00:00:1.0 1 cuda_platform.cc:52] failed call to cuInit: UNKNOWN ERROR\\n")
os.write(2, b"E0000 00:00:1.0 1 some_kernel.cc:9] a real native error\\n")
warnings.warn("a Python warning")
raise SystemExit("the last words")
"""


@pytest.mark.parametrize("native_logs", ["", "1"])
def test_start_up_noise_is_filtered_and_everything_else_passes(native_logs):
    env = dict(os.environ, PARAGAN_TF_NATIVE_LOGS=native_logs)
    proc = subprocess.run([sys.executable, "-c", _NOISY_CHILD], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    for kept in ("a real native error", "UserWarning: a Python warning", "the last words"):
        assert kept in proc.stderr, proc.stderr
    # PARAGAN_TF_NATIVE_LOGS=1 brings the noise back: the negative control of the filter.
    assert ("cuInit" in proc.stderr) == (native_logs == "1"), proc.stderr
    assert ("cudart_stub" in proc.stderr) == (native_logs == "1"), proc.stderr
