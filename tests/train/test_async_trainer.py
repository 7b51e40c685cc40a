"""The asynchronous (parameter-server) trainer's rules, on real server processes on 127.0.0.1."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import subprocess

import gin
import numpy as np
import pytest
import tensorflow as tf

import clusters
from conftest import PYTHON, REPO
from paragan_tf.distribute import launcher
from paragan_tf.errors import ConfigError
from paragan_tf.train import async_loop
from paragan_tf.train import experiment

pytestmark = pytest.mark.slow


@contextlib.contextmanager
def _servers(workers: int = 2, ps: int = 1):
    """A parameter-server cluster's server tasks (bin/train.py serving); yields TF_CONFIG of
    its chief, for a coordinator run as a subprocess."""
    spec = {"chief": [f"127.0.0.1:{launcher.free_port()}"],
            "worker": [f"127.0.0.1:{launcher.free_port()}" for _ in range(workers)],
            "ps": [f"127.0.0.1:{launcher.free_port()}" for _ in range(ps)]}
    procs = []
    try:
        for job in ("ps", "worker"):
            for index in range(len(spec[job])):
                env = dict(os.environ, TF_CONFIG=json.dumps(
                    {"cluster": spec, "task": {"type": job, "index": index}}))
                procs.append(subprocess.Popen(
                    [PYTHON, "bin/train.py", "--model_dir=/nonexistent",
                     "--gin_bindings=strategy.kind='parameter_server'"], cwd=REPO, env=env,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield json.dumps({"cluster": spec, "task": {"type": "chief", "index": 0}})
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _coordinate(script: str, argument, folder) -> dict:
    """Runs `script` as the chief of a fresh cluster; its last output line, as JSON. No
    deadline: it may take as long as it needs while it keeps printing (clusters.py); a
    script that announces a hold of N s ("gives up after N s") gets twice that."""
    stdout, stderr = (os.path.join(str(folder), f"coordinator.{n}") for n in ("out", "err"))

    def output():
        with open(stdout) as out, open(stderr) as err:
            return out.read() + err.read()

    def floor():
        hold = re.search(r"gives up after (\d+) s", output())
        return max(clusters.STALL_FLOOR, 2 * float(hold.group(1)) if hold else 0.0)
    with _servers() as chief, open(stdout, "w") as out, open(stderr, "w") as err:
        proc = subprocess.Popen([PYTHON, script, str(argument)], cwd=REPO,
                                env=dict(os.environ, TF_CONFIG=chief), stdout=out,
                                stderr=err, text=True)
        try:
            code = clusters.wait_while_progressing(proc.poll, output, script, floor)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    with open(stdout) as out, open(stderr) as err:
        stdout, stderr = out.read(), err.read()
    assert code == 0, stderr[-3000:]
    report = json.loads(stdout.strip().splitlines()[-1])
    print(report)  # the numbers, for the closing note (pytest -s)
    return report


def _chance_bound(a: int, b: int, population: int) -> float:
    """Examples two independent uniform draws of a and b share, plus 6 standard deviations."""
    mean = a * b / population
    return mean + 6 * mean ** 0.5 + 1


def test_each_worker_reads_its_own_permutation_and_the_pid_offset_scheme_did_not(tmp_path):
    batches = 4  # 256 examples per worker out of 5,000: ~13 shared by chance
    report = _coordinate("tests/ps_streams.py", batches, tmp_path)
    assert report["reproducible"], "a rebuilt input gave a worker other examples"
    # 256 distinct examples per worker. Not asserted of the replaced scheme: when a pid %
    # 5,000 falls in an epoch's last 256 examples, its window runs into the next epoch's
    # reshuffle and repeats a few (a make test run saw 253 and 253).
    assert report["worker_seed"]["examples"] == [batches * 64] * 2
    new, old = report["worker_seed"], report["pid_offset"]
    bound = _chance_bound(*new["examples"], new["dataset"])
    assert new["overlap"] <= bound, report
    # The negative control: consecutive pids shift one permutation by a few examples.
    assert old["overlap"] > bound, report


def test_d_closures_train_on_the_buffer_while_a_g_closure_is_still_running(tmp_path):
    # The order of events, from counters on the parameter server (tests/ps_buffer.py), each
    # [G closures started, G closures finished, D closures finished] in the trial. The G
    # closure is held until the D closures finish (or a stall): whether they can finish
    # while it runs, not which is faster on this machine, decides.
    report = _coordinate("tests/ps_buffer.py", 60, tmp_path)
    free, handoff = report["free"], report["handoff"]
    # The G closure started before any D closure finished; each D closure finished while it
    # was running (started, not finished), on the fakes the buffer was filled with (no G
    # update yet: age 0); when G finished, all three D closures had.
    assert free["g_start"] == [1, 0, 0], free
    assert [d[:2] for d in free["d_end"]] == [[1, 0]] * 3, free
    assert free["g_end"] == [1, 1, 3], free
    assert free["sample_age"] == [0.0, 0.0, 0.0]
    # The negative control: D closures handed G's result finish only after G did.
    assert handoff["g_end"] == [1, 1, 0], handoff
    assert [d[:2] for d in handoff["d_end"]] == [[1, 1]] * 3, handoff


def test_sync_only_settings_are_refused_or_warned_about_by_name(tiny_gin, caplog):
    def check(*bindings):
        gin.clear_config()
        tiny_gin(*bindings)
        exp = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
        async_loop.check_settings(exp, exp.settings.async_train)

    for binding, name in (("train.simultaneous = True", "train.simultaneous=True"),
                          ("train.profile_steps = 2", "train.profile_steps=2"),
                          ("eval.every_steps = 2", "eval.every_steps=2"),
                          ("input_pipeline.service_workers = 1",
                           "input_pipeline.service_workers=1"),
                          ("penalties.lecam_weight = 0.3", "penalties.lecam_weight=0.3"),
                          ("augment.ada_target = 0.6", "augment.ada_target=0.6"),
                          ("loss.fn = @relativistic", "loss.fn='@relativistic'")):
        with pytest.raises(ConfigError, match=re.escape(name) + " is not available under "
                           "strategy.kind='parameter_server'"):
            check(binding)
    with pytest.raises(ConfigError, match=r"train.accumulation=2 is not available with "
                       r"async_train.mode='sample_buffer'"):
        check("train.accumulation = 2", "async_train.mode = 'sample_buffer'")
    gin.clear_config()
    tiny_gin()
    exp = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
    gin.clear_config()  # read, not built: train.deterministic would switch on op determinism
    tiny_gin("train.resume_input = 'reshuffle'", "train.deterministic = True",
             "async_train.mode = 'sample_buffer'", "async_train.max_staleness = 3")
    settings = experiment.Settings.read()
    exp = dataclasses.replace(exp, settings=settings, config=settings.train)
    with caplog.at_level("WARNING", logger="absl"):
        async_loop.check_settings(exp, settings.async_train)
    warned = " ".join(r.getMessage() for r in caplog.records)
    for name in ("train.steps_per_loop=2", "train.resume_input='reshuffle'",
                 "train.deterministic=True", "async_train.max_staleness=3"):
        assert f"{name} does not apply under strategy.kind='parameter_server'" in warned, name
    caplog.clear()
    with caplog.at_level("WARNING", logger="absl"):  # the negative control: left unbound
        check()
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "train.steps_per_loop=2 does not apply" in warned  # gin/tiny.gin binds it
    assert "resume_input" not in warned and "deterministic" not in warned
    assert "max_staleness" not in warned and "buffer_depth" not in warned


def _ps_launch(model_dir, *bindings):
    from clusters import Launch
    return Launch(model_dir, "--num_ps=1", "--gin_bindings=strategy.kind='parameter_server'",
                  *[f"--gin_bindings={b}" for b in bindings])


def test_async_nan_guard_counts_skipped_rounds_and_stops_a_diverged_run(tmp_path):
    # As the synchronous test, D's learning rate makes every later D update non-finite
    # (spectral norm's power iteration overflows on weights near 1e30). The closures also
    # run DiffAugment and the lazy R1 and bCR penalties (they work in closures; LeCam and
    # the relativistic loss are refused, above). 1e30, not the synchronous test's 1e38:
    # closures that read D before another closure's update landed apply finite updates of
    # about the learning rate each, and a few of 1e38 add up past float32's 3.4e38 (a
    # loaded run once stopped on a non-finite weight at its second checkpoint instead).
    model_dir = tmp_path / "diverge"
    run = _ps_launch(model_dir, "train.total_steps=200", "train.log_every=1",
                     "train.checkpoint_every=1", "train.max_consecutive_skips=3",
                     "train.max_to_keep=300", "D/optimizer.learning_rate=1e30",
                     "augment.policy='color,translation,cutout'", "penalties.r1_gamma=1.0",
                     "penalties.lazy_interval=2", "penalties.bcr_real=1.0")
    assert run.finish() == 1, run.output()[-3000:]
    out = run.output()
    assert re.search(r"train.py: error: 3 consecutive rounds \(to round \d+\) had an update "
                     r"with a non-finite loss or gradient, skipped \(train."
                     r"max_consecutive_skips=3\); the newest checkpoint \(\S+ckpt-\d+\)", out)
    written = tf_checkpoints(model_dir)
    assert written
    for path in written:  # the skipped updates left no non-finite weights or SN vectors
        reader = tf.train.load_checkpoint(path)
        for name, dtype in reader.get_variable_to_dtype_map().items():
            if dtype.is_floating:
                assert np.all(np.isfinite(reader.get_tensor(name))), (path, name)
    events = tf.io.gfile.glob(os.path.join(str(model_dir), "events.out.tfevents.*"))
    skipped = [tf.make_ndarray(v.tensor).item() for e in events
               for ev in tf.compat.v1.train.summary_iterator(e) for v in ev.summary.value
               if v.tag == "health/skipped_steps"]
    assert skipped and max(skipped) >= 1, skipped


def tf_checkpoints(model_dir):
    state = tf.train.get_checkpoint_state(str(model_dir))
    return list(state.all_model_checkpoint_paths) if state else []
