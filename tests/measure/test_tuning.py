"""The layout measured on the machine: candidates per hardware and pins, the choice from
injected timings, the cache and its key, and one real tuning run of bin/train.py."""

from __future__ import annotations

import json
import os
import re
import threading
import types

import pytest

from paragan_tf.layout import rules as layout_lib
from paragan_tf.layout import cache as layout_cache
from paragan_tf.layout import env as layout_env
from paragan_tf.train import experiment
from paragan_tf.layout import candidates as layout_candidates
from paragan_tf.measure import timing as layout_timing
from paragan_tf.measure import tuning as layout_tuning
from tests.helpers.clusters import run_while_progressing
from tests.helpers.repo import PYTHON, REPO, relative

Candidate = layout_candidates.Candidate
CPU_AVX2 = layout_lib.Hardware("cpu", frozenset({"sse2", "avx2", "fma"}),
                               cpu_model="AMD EPYC (family 25 model 1)", cores=2)
CPU_AVX512_BF16 = layout_lib.Hardware("cpu", frozenset({"avx2", "avx512f", "avx512_bf16",
                                                        "avx512_vnni"}),
                                      cpu_model="AMD EPYC (family 25 model 17)", cores=2)
CPU_AMX = layout_lib.Hardware("cpu", frozenset({"avx512f", "avx512_bf16", "amx_bf16",
                                                "amx_tile"}), cpu_model="Xeon", cores=2)
GPU_VOLTA = layout_lib.Hardware("gpu", frozenset({"avx2"}), (7, 0), cores=8)
GPU_AMPERE = layout_lib.Hardware("gpu", frozenset({"avx2"}), (8, 0), cores=8)
TPU = layout_lib.Hardware("tpu", cores=96)


def _strategy(kind="one_device", intra=0, inter=0, logical_cpus=0):
    """What candidates() reads of a StrategyConfig."""
    return types.SimpleNamespace(kind=kind, intra_op_threads=intra, inter_op_threads=inter,
                                 num_logical_cpus=logical_cpus)


@pytest.fixture
def no_env_pins(monkeypatch):
    for name in (layout_lib.ONEDNN_ENV,) + layout_lib.THREAD_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("hardware,onednns,xlas", [
    (CPU_AVX2, [False, True], [False, True]),  # TensorFlow's default (off here) first
    (CPU_AVX512_BF16, [True, False], [False, True]),
    (CPU_AMX, [True, False], [False, True]),
    (GPU_VOLTA, [None], [False, True]),
    (GPU_AMPERE, [None], [False, True]),
])
def test_first_stage_is_xla_by_onednn(no_env_pins, hardware, onednns, xlas):
    stage, notes = layout_candidates.candidates(hardware, {}, _strategy(), "float32")
    assert [(c.onednn, c.xla) for c in stage] == [(o, x) for o in onednns for x in xlas]
    assert all(c.intra_op_threads == 0 == c.inter_op_threads for c in stage)
    assert ("oneDNN not tried" in " ".join(notes)) == (onednns == [None])


def test_pinned_and_impossible_candidates_are_not_tried_and_the_notes_say_why(
        no_env_pins, monkeypatch):
    stage, notes = layout_candidates.candidates(CPU_AVX2, {"xla": "off"}, _strategy(), "float32")
    assert [c.xla for c in stage] == [False, False] and "XLA pinned off" in notes[0]
    stage, notes = layout_candidates.candidates(CPU_AVX2, {}, _strategy("mirrored", logical_cpus=2),
                                                "float32")
    assert not any(c.xla for c in stage) and notes[0] == (
        "XLA not tried: MirroredStrategy on CPU devices does not support XLA")
    # One replica (mirrored over the one CPU device): XLA compiles, so it is tried.
    stage, _ = layout_candidates.candidates(CPU_AVX2, {}, _strategy("mirrored"), "float32")
    assert {c.xla for c in stage} == {False, True}
    stage, notes = layout_candidates.candidates(CPU_AVX2, {"onednn": "on"}, _strategy(),
                                                "float32")
    assert {c.onednn for c in stage} == {True} and "layout.onednn" in notes[0]
    stage, notes = layout_candidates.candidates(CPU_AVX2, {}, _strategy(intra=1), "float32")
    assert {c.intra_op_threads for c in stage} == {1} and "strategy" in notes[-1]
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")  # the user's: a pin
    stage, notes = layout_candidates.candidates(CPU_AVX2, {}, _strategy(), "float32")
    assert {c.onednn for c in stage} == {False} and "TF_ENABLE_ONEDNN_OPTS=0" in notes[0]


def test_first_stage_times_the_rule_then_its_float32_twin_then_one_change_at_a_time(
        no_env_pins):
    stage, _ = layout_candidates.first_stage(CPU_AMX, {}, _strategy(), "mixed_bfloat16")
    assert [(c.xla, c.onednn, c.precision) for c in stage] == [
        (False, True, "mixed_bfloat16"), (False, True, "float32"),  # the precision first
        (False, False, "mixed_bfloat16"), (True, True, "mixed_bfloat16"),
        (True, False, "mixed_bfloat16")]
    # A pinned precision is not second-guessed; float32 by the rule has no twin.
    for pins, precision in (({"precision": "mixed_bfloat16"}, "mixed_bfloat16"),
                            ({}, "float32")):
        stage, _ = layout_candidates.first_stage(CPU_AMX, pins, _strategy(), precision)
        assert len(stage) == 4 and {c.precision for c in stage} == {precision}


def test_second_stage_tries_one_inter_op_thread_against_the_winner():
    winner = Candidate(True, True, 0, 0, "mixed_bfloat16")
    stage, _ = layout_candidates.second_stage(winner, CPU_AVX512_BF16)
    assert stage == [winner, Candidate(True, True, 2, 1, "mixed_bfloat16")]
    stage, notes = layout_candidates.second_stage(Candidate(True, True, 1, 0, "float32"),
                                                  CPU_AVX512_BF16)
    assert len(stage) == 1 and "pinned" in notes[0]
    one_core = layout_lib.Hardware("cpu", frozenset({"avx2"}), cores=1)
    stage, notes = layout_candidates.second_stage(Candidate(False, False, 0, 0, "float32"),
                                                  one_core)
    assert len(stage) == 1 and "one core" in notes[0]


def _fake_measure(seconds_of, calls):
    """A measure() that times nothing: seconds per step from `seconds_of(candidate)`."""
    def measure(stage, config_file, rounds, deadline, progress, **_):
        assert os.path.exists(config_file)  # the children would parse it
        calls.append(list(stage))
        return [dict(candidate=c.settings(), name=c.name,
                     seconds_per_step=seconds_of(c), rounds=[seconds_of(c)] * rounds,
                     steps_per_timing=5, startup_seconds=1.0, error=None) for c in stage]
    return measure


def _seconds(candidate: Candidate) -> float:
    """Injected timings of an AVX2 CPU like the issue's: oneDNN and XLA each ~2.3x, not
    both; one inter-op thread 5 % faster; bfloat16 emulated, slower than float32."""
    base = 2.1
    if candidate.onednn != candidate.xla:
        base = 0.91 if candidate.onednn else 0.92
    elif candidate.onednn and candidate.xla:
        base = 1.19
    if candidate.inter_op_threads == 1:
        base *= 0.95
    return base * (1.6 if candidate.precision == "mixed_bfloat16" else 1.0)


def test_tune_picks_the_fastest_of_both_stages(no_env_pins, monkeypatch, tiny_gin):
    tiny_gin("layout.xla = 'auto'")
    calls = []
    monkeypatch.setattr(layout_timing, "measure", _fake_measure(_seconds, calls))
    settings = experiment.Settings.read()
    winner, record = layout_tuning.tune(settings, CPU_AVX512_BF16, {}, "mixed_bfloat16", 90.0,
                                        progress=lambda m: None)
    assert len(calls) == 2 and len(calls[0]) == 5  # XLA x oneDNN, and the rule at float32
    # oneDNN alone at float32 (bfloat16 timed slower) wins stage one; one inter-op thread
    # wins stage two.
    assert calls[1][0] == Candidate(False, True, 0, 0, "float32")
    assert winner == Candidate(False, True, 2, 1, "float32")
    assert len(record["stages"]) == 2


def test_settle_measures_once_then_uses_the_cache_keyed_by_step_and_machine(
        no_env_pins, monkeypatch, tiny_gin, tmp_path):
    monkeypatch.setenv("PARAGAN_TF_LAYOUT_CACHE", str(tmp_path / "layouts.json"))
    monkeypatch.delenv(layout_tuning.TUNE_ENV, raising=False)
    monkeypatch.setattr(layout_lib, "detect", lambda strategy=None: CPU_AVX2)
    calls, lines = [], []
    monkeypatch.setattr(layout_timing, "measure", _fake_measure(_seconds, calls))
    tiny_gin("layout.xla = 'auto'", "layout.precision = 'auto'")
    settings = experiment.Settings.read()
    first = layout_tuning.settle(settings, progress=lines.append)
    assert first.source == "measured" and (first.xla, first.onednn) == (False, True)
    assert (first.intra_op_threads, first.inter_op_threads) == (2, 1)
    assert len(calls) == 2 and any("layout tuning chose" in line for line in lines)
    cache = json.load(open(tmp_path / "layouts.json"))
    (entry,) = cache.values()  # readable: the machine, TensorFlow, the step, the choice
    assert entry["hardware"]["cpu_model"] == "AMD EPYC (family 25 model 1)"
    assert entry["step"]["batch_size"] == 8 and entry["tensorflow"]
    assert entry["choice"]["onednn"] is True
    again = layout_tuning.settle(settings, progress=lines.append)
    assert again.source == "cache" and len(calls) == 2  # nothing measured the second time
    assert (again.xla, again.onednn, again.inter_op_threads) == (False, True, 1)
    # The restart wants what the process lacks.
    env = layout_tuning.restart_environment(settings, again)
    assert env.get("TF_NUM_INTEROP_THREADS") == "1"
    # Another step shape is another key: measured anew.
    tiny_gin("layout.xla = 'auto'", "train.batch_size = 16")
    layout_tuning.settle(experiment.Settings.read(), progress=lines.append)
    assert len(calls) == 4 and len(json.load(open(tmp_path / "layouts.json"))) == 2
    # A penalty's weight is not: R1 at another strength reads R1's entry; R1's interval is.
    tiny_gin("layout.xla = 'auto'", "penalties.r1_gamma = 0.1")
    layout_tuning.settle(experiment.Settings.read(), progress=lines.append)
    tiny_gin("layout.xla = 'auto'", "penalties.r1_gamma = 1.0")
    assert layout_tuning.settle(experiment.Settings.read(),
                                progress=lines.append).source == "cache"
    tiny_gin("layout.xla = 'auto'", "penalties.r1_gamma = 1.0", "penalties.lazy_interval = 16")
    layout_tuning.settle(experiment.Settings.read(), progress=lines.append)
    assert len(calls) == 8 and len(json.load(open(tmp_path / "layouts.json"))) == 4
    # 'again' re-measures; 'off' and a dry run never measure.
    tiny_gin("layout.xla = 'auto'", "layout.tune = 'again'")
    layout_tuning.settle(experiment.Settings.read(), progress=lines.append)
    assert len(calls) == 10
    tiny_gin("layout.xla = 'auto'", "train.batch_size = 4", "layout.tune = 'off'")
    assert layout_tuning.settle(experiment.Settings.read(), progress=lines.append) is None
    tiny_gin("layout.xla = 'auto'", "train.batch_size = 4")
    assert layout_tuning.settle(experiment.Settings.read(), allow_measuring=False,
                                progress=lines.append) is None
    assert "a dry run measures nothing" in lines[-1] and len(calls) == 10
    # Multi-worker jobs never measure (each worker would alone), nor detect anything.
    monkeypatch.setattr(layout_lib, "detect", None)
    tiny_gin("layout.xla = 'auto'", "train.batch_size = 4",
             "strategy.kind = 'multi_worker_mirrored'")
    assert layout_tuning.settle(experiment.Settings.read(), progress=lines.append) is None
    assert "multi-process job" in lines[-1]


class _Clock:
    """Virtual seconds: the fake children below advance it as real ones would take time."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now


def _fake_children(monkeypatch, startup_of, step_of):
    """_Probe stand-ins on a virtual clock: a child is ready `startup_of(candidate)` s after
    its group started (children of a group start together), and times steps at
    `step_of(candidate)` s each. Returns (the clock, the names of the children started)."""
    clock, started = _Clock(), []

    class Probe:
        def __init__(self, candidate, config_file, count_flops=False):
            assert os.path.exists(config_file)
            self.candidate, self.began, self.ready = candidate, clock.now, None
            self.count_flops = count_flops
            started.append(candidate.name)

        def read(self, timeout):
            assert 0 <= timeout <= layout_timing.STARTUP_TIMEOUT  # what select() can wait
            ready_at = self.began + startup_of(self.candidate)
            if ready_at - clock.now > timeout:
                clock.now += timeout
                return dict(error=f"no answer in {timeout:.0f} s")
            clock.now = max(clock.now, ready_at)
            return dict(ready=True, warmup_seconds=[1.0, step_of(self.candidate)],
                        train_step_flops=1e9 if self.count_flops else None)

        def time_steps(self, steps, timeout):
            assert 0 <= timeout < float("inf")
            if steps * step_of(self.candidate) > timeout:
                clock.now += timeout
                return dict(error=f"no answer in {timeout:.0f} s")
            clock.now += steps * step_of(self.candidate)
            return dict(seconds=steps * step_of(self.candidate), steps=steps)

        def close(self):
            pass

    monkeypatch.setattr(layout_timing, "_Probe", Probe)
    for module in (layout_timing, layout_tuning):
        monkeypatch.setattr(module, "time", types.SimpleNamespace(
            monotonic=clock.monotonic, strftime=lambda fmt: "2026-11-28 00:00:00 UTC"))
    return clock, started


def test_tuning_keeps_its_budget_from_the_first_start_and_drops_a_hopeless_candidate(
        no_env_pins, monkeypatch, tiny_gin):
    """The issue's first run on a 2-core Xeon: XLA's candidates start slowly, oneDNN off runs
    50x slower. The rules' candidate starts first; the hopeless one is dropped after one
    step; what would start after the budget does not; the tuning ends within it."""
    tiny_gin("layout.xla = 'auto'")

    def startup(c):
        return 40.0 if c.xla else 20.0

    def step(c):
        return 0.3 * (50 if c.onednn is False else 1) * (0.9 if c.inter_op_threads else 1)
    clock, started = _fake_children(monkeypatch, startup, step)
    lines = []
    winner, record = layout_tuning.tune(experiment.Settings.read(), CPU_AMX, {}, "float32",
                                        90.0, progress=lines.append)
    rule = layout_candidates.rule_candidate(CPU_AMX, layout_candidates.candidates(
        CPU_AMX, {}, _strategy(), "float32")[0])
    assert started[0] == rule.name and (rule.xla, rule.onednn) == (False, True)
    assert record["seconds"] <= 90.0 and clock.now <= 90.0, (clock.now, "\n".join(lines))
    first = {r["name"]: r for r in record["stages"][0]}
    hopeless = first["xla=off,onednn=off,threads=default/default,float32"]
    assert hopeless["error"] == ("dropped: its first step took 15.000 s, over 2x the fastest "
                                 "so far (0.300 s)")
    assert hopeless["seconds_per_step"] is None and len(hopeless["rounds"]) == 1
    # The XLA pair starts after it; its oneDNN-off candidate's first step outlasts the budget.
    assert first["xla=on,onednn=off,threads=default/default,float32"]["error"] == \
        "not timed within the time budget"
    assert first["xla=on,onednn=on,threads=default/default,float32"]["seconds_per_step"]
    assert winner.onednn and not winner.xla
    # Stage two (one inter-op thread) fit in what was left, or the log says why not.
    assert len(record["stages"]) == 2 or any("variant skipped" in line for line in lines)


def test_a_tuning_whose_first_start_up_fills_the_budget_keeps_the_rules_candidate(
        no_env_pins, monkeypatch, tiny_gin):
    tiny_gin("layout.xla = 'auto'")
    clock, started = _fake_children(monkeypatch, lambda c: 120.0, lambda c: 0.3)
    lines = []
    winner, record = layout_tuning.tune(experiment.Settings.read(), CPU_AMX, {}, "float32",
                                        90.0, progress=lines.append)
    # The first group (two cores: two children) is waited for; nothing more starts.
    assert len(started) == 2 and (winner.xla, winner.onednn) == (False, True)
    assert any("not timed within the time budget" in line for line in lines), lines
    assert any("variant skipped" in line for line in lines), lines
    assert clock.now < 130.0


def test_a_second_stage_whose_children_are_not_ready_in_time_keeps_stage_ones_winner(
        no_env_pins, monkeypatch, tiny_gin):
    """The issue's repro: stage one's children start in 20 s, stage two's in 25 s, a 57 s
    budget. Stage two starts only where its children can be ready and timed in the budget;
    whatever it does, stage one's measured winner is kept (it was: "no candidate built and
    timed its step", and the run exited 2)."""
    tiny_gin("layout.xla = 'off'")
    clock, started = _fake_children(monkeypatch, lambda c: 25.0 if c.inter_op_threads else 20.0,
                                    lambda c: 0.3)
    lines = []
    winner, record = layout_tuning.tune(experiment.Settings.read(), CPU_AMX, {"xla": "off"},
                                        "float32", 57.0, progress=lines.append)
    first = layout_timing.fastest(record["stages"][0])
    assert winner == Candidate(**first["candidate"]) and first["seconds_per_step"]
    assert any("thread variant" in line for line in lines), lines
    assert clock.now <= 57.0 + 1e-9, (clock.now, "\n".join(lines))


def test_a_run_with_every_setting_pinned_times_its_one_candidate_past_the_budget(
        no_env_pins, monkeypatch, tiny_gin):
    """XLA, oneDNN and precision pinned (one candidate) and a start-up of 100 s against the
    90 s budget: the one candidate is waited for and timed, never failed by the deadline."""
    tiny_gin("layout.xla = 'off'")
    clock, started = _fake_children(monkeypatch, lambda c: 100.0, lambda c: 0.3)
    lines = []
    pins = {"xla": "off", "onednn": "on", "precision": "float32"}
    winner, record = layout_tuning.tune(experiment.Settings.read(), CPU_AMX, pins, "float32",
                                        90.0, progress=lines.append)
    assert (winner.xla, winner.onednn, winner.precision) == (False, True, "float32")
    timed = [r for stage in record["stages"] for r in stage
             if Candidate(**r["candidate"]) == winner]
    assert timed and timed[0]["seconds_per_step"] == 0.3, (record, "\n".join(lines))


def test_the_benchmark_times_every_candidate_without_a_budget_or_a_drop(monkeypatch):
    """bin/bench.py --suite=layout: no deadline (waits stay finite) and nothing dropped."""
    _fake_children(monkeypatch, lambda c: 50.0 if c.xla else 20.0,
                   lambda c: 15.0 if c.onednn is False else 0.3)
    stage, _ = layout_candidates.first_stage(CPU_AVX2, {}, _strategy(), "float32")
    with layout_timing.parsed_config_file("") as config_file:
        rows = layout_timing.measure(stage, config_file, 3, float("inf"), lambda line: None,
                                     at_once=2, drop_over=None)
    assert all(r["error"] is None and len(r["rounds"]) == 3 for r in rows), rows


@pytest.fixture
def settle_here(no_env_pins, monkeypatch, tiny_gin, tmp_path):
    """settle() on this AVX2 CPU with injected timings, its cache in tmp_path: a function of
    extra bindings returning (the Choice, the lines it logged); `.calls`, each stage
    measure() was asked to time."""
    monkeypatch.setenv("PARAGAN_TF_LAYOUT_CACHE", str(tmp_path / "layouts.json"))
    monkeypatch.delenv(layout_tuning.TUNE_ENV, raising=False)
    monkeypatch.setattr(layout_lib, "detect", lambda strategy=None: CPU_AVX2)
    calls = []
    monkeypatch.setattr(layout_timing, "measure", _fake_measure(_seconds, calls))

    def settle(*bindings, progress=None):
        tiny_gin("layout.xla = 'auto'", "layout.precision = 'auto'", *bindings)
        lines = []
        measured = layout_tuning.settle(experiment.Settings.read(),
                                         progress=progress or lines.append)
        return measured, lines
    settle.calls = calls
    return settle


def test_a_pinned_runs_choice_is_never_read_by_a_run_that_pinned_less(settle_here,
                                                                     monkeypatch, tmp_path):
    """A pin narrows the candidates, so it joins the key: the unpinned run after a pinned
    one measures, and each reads its own entry afterwards."""
    pinned, _ = settle_here("layout.onednn = 'off'")
    assert pinned.source == "measured" and pinned.onednn is False
    assert {c.onednn for stage in settle_here.calls for c in stage} == {False}
    unpinned, _ = settle_here()
    assert unpinned.source == "measured" and unpinned.onednn is True  # the faster, timed
    for bindings in (("layout.onednn = 'off'",), ()):
        assert settle_here(*bindings)[0].source == "cache"
    # The strategy's and the environment's pins are pins too.
    assert settle_here("strategy.intra_op_threads = 1")[0].source == "measured"
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    assert settle_here()[0].source == "measured"
    assert len(settle_here.calls) == 2 + 2 + 1 + 2  # pinned threads: no second stage
    entries = json.load(open(tmp_path / "layouts.json")).values()
    assert sorted(json.dumps(e["pins"], sort_keys=True) for e in entries) == [
        '{"TF_ENABLE_ONEDNN_OPTS": "0"}', '{"onednn": "off"}',
        '{"strategy.intra_op_threads": 1}', "{}"]
    assert {e["schema"] for e in entries} == {layout_cache.SCHEMA}


def _warnings(caplog) -> list:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


@pytest.mark.parametrize("content,warning", [
    ("[]", "holds a JSON list, not an object of entries"),
    ("{\"k\": ", "unreadable (Expecting value"),
])
def test_a_malformed_cache_file_is_one_warning_and_the_run_measures_and_writes_it_anew(
        settle_here, caplog, tmp_path, content, warning):
    cache = tmp_path / "layouts.json"
    cache.write_text(content)
    measured, _ = settle_here()
    assert measured.source == "measured"
    [line] = _warnings(caplog)
    assert warning in line and str(cache) in line
    assert len(json.load(open(cache))) == 1  # this run's entry, in a file of ours again
    assert (tmp_path / "layouts.json.unreadable").read_text() == content  # kept, not lost
    assert settle_here()[0].source == "cache"


def test_a_malformed_entry_is_one_warning_and_is_measured_anew(settle_here, caplog, tmp_path):
    settle_here()
    cache = tmp_path / "layouts.json"
    entries = json.load(open(cache))
    (key, entry), = entries.items()
    for broken in (dict(entry, choice=dict(entry["choice"], xla="yes")),
                   dict(entry, choice=["xla"]), "an entry"):
        caplog.clear()
        cache.write_text(json.dumps({key: broken, "other": dict(entry, schema=1)}))
        assert settle_here()[0].source == "measured"
        [line] = _warnings(caplog)
        assert f"the entry {key} is malformed" in line, line
        assert json.load(open(cache))[key]["choice"] == entry["choice"]
    # The scale plan reads entries of this schema only, and skips what is not one.
    cache.write_text(json.dumps({key: entry, "old": dict(entry, schema=1), "bad": [1]}))
    assert layout_cache.entries_for(CPU_AVX2.signature()) == [entry]


@pytest.mark.parametrize("where", ["under_a_file", "a_folder"])
def test_a_cache_that_cannot_be_written_is_one_warning_and_the_run_goes_on(
        settle_here, caplog, monkeypatch, tmp_path, where):
    (tmp_path / "file").write_text("")
    (tmp_path / "folder").mkdir()
    path = tmp_path / "file" / "layouts.json" if where == "under_a_file" else tmp_path / "folder"
    monkeypatch.setenv("PARAGAN_TF_LAYOUT_CACHE", str(path))
    measured, lines = settle_here()
    assert measured.source == "measured" and measured.onednn is True
    assert "not cached" in lines[-1]
    [line] = _warnings(caplog)
    assert "not written" in line and "holds for this run only" in line
    assert (tmp_path / "folder").is_dir() and (tmp_path / "file").read_text() == ""


def test_first_runs_of_one_step_measure_one_at_a_time(settle_here, monkeypatch, tmp_path):
    """While another process measures (here: a thread holding the measuring lock), a run
    with no entry waits, then takes the entry the other wrote instead of measuring."""
    settle_here()
    (key, entry), = json.load(open(tmp_path / "layouts.json")).items()
    monkeypatch.setenv("PARAGAN_TF_LAYOUT_CACHE", str(tmp_path / "second.json"))
    held, waiting, calls = threading.Event(), threading.Event(), len(settle_here.calls)

    def other():
        with layout_cache.measuring(lambda line: None):
            held.set()
            assert waiting.wait(60)
            layout_cache.write(key, entry)
    thread = threading.Thread(target=other)
    read = layout_cache.read

    def first_read(key):  # settle's first look finds no entry; then the other measures
        entry = read(key)
        if thread.ident is None:
            thread.start()
            assert held.wait(60)
        return entry
    monkeypatch.setattr(layout_cache, "read", first_read)
    lines = []

    def progress(line):
        lines.append(line)
        if line.startswith("layout: waiting for"):
            waiting.set()
    measured, _ = settle_here(progress=progress)
    thread.join()
    assert measured.source == "cache" and len(settle_here.calls) == calls, lines
    assert any("which is measuring a layout on this machine" in line for line in lines)


@pytest.mark.slow
def test_train_tunes_in_child_processes_within_its_budget_restarts_and_reads_the_cache(
        tmp_path):
    """The real thing on gin/tiny.gin (precision pinned by it, XLA left to the tuner, oneDNN
    pinned here to the opposite of TensorFlow's default for this CPU): XLA off and on timed
    in child processes within a 40 s budget (then one inter-op thread, if it fits), the
    choice cached, bin/train.py restarted for the pinned oneDNN, and a second run (a dry run)
    reading the cache."""
    default = layout_env.onednn_default(layout_lib.detect())
    assert default is not None, "this test needs an x86 CPU (oneDNN's switch)"
    pinned = "off" if default else "on"
    cache = tmp_path / "layouts.json"
    # As a user's shell has it: no oneDNN setting (the suite's conftest sets one), tuning on.
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_ENABLE_ONEDNN_OPTS", layout_tuning.TUNE_ENV)}
    env.update(PARAGAN_TF_LAYOUT_CACHE=str(cache), PYTHONUNBUFFERED="1")
    budget = 40

    def train(*args):
        return run_while_progressing([PYTHON, "bin/train.py", "--gin_file=gin/tiny.gin",
                                      f"--model_dir={relative(tmp_path / 'run')}",
                                      f"--gin_bindings=layout.onednn='{pinned}'",
                                      "--gin_bindings=layout.xla='auto'",
                                      f"--gin_bindings=layout.tune_seconds={budget}", *args],
                                     env=env)

    first = train("--gin_bindings=train.total_steps=2")
    log = first.stderr
    assert first.returncode == 0, log[-3000:]
    assert f"restarting with TF_ENABLE_ONEDNN_OPTS={int(pinned == 'on')}" in log, log[-3000:]
    (entry,) = json.load(open(cache)).values()
    assert entry["choice"]["onednn"] is (pinned == "on") and entry["train_step_flops"] > 0
    # Stage one: XLA off (the rules' pick on a CPU, first) and on, each timed or stopped by
    # the budget; the tuning kept to it, unless the rules' own candidate alone outlasted it.
    stages, seconds = entry["record"]["stages"], entry["record"]["seconds"]
    first_stage = {row["candidate"]["xla"]: row for row in stages[0]}
    assert set(first_stage) == {False, True} and stages[0][0]["candidate"]["xla"] is False
    assert first_stage[False]["seconds_per_step"] > 0
    assert all(row["seconds_per_step"] or "time budget" in row["error"]
               for row in first_stage.values()), stages[0]
    assert seconds <= max(budget, stages[0][0]["startup_seconds"] + 10), (seconds, stages)
    assert re.search(rf"layout tuning chose \S+ \([\d.]+ s/step\) in {seconds:.0f} s", log)
    threads = (f"{layout_lib.usable_cores()}/1" if entry["choice"]["inter_op_threads"] == 1
               else "default/default")
    xla = "on" if entry["choice"]["xla"] else "off"
    assert re.search(rf"layout: float32, XLA {xla}, oneDNN {pinned}, threads {threads}", log)
    assert os.path.exists(os.path.join(REPO, relative(tmp_path / "run"), "ckpt-2.index"))
    # A later run of the step reads the cache and times nothing (a dry run: the first run
    # trained with this choice already, and a second XLA compilation would double the cost).
    second = train("--gin_bindings=train.total_steps=4", "--dry_run")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "from the cache" in second.stderr and "layout candidate" not in second.stderr
    assert json.loads(second.stdout.strip().splitlines()[-1])["layout"]["source"] == "cache"


def test_a_refused_setting_is_one_line_before_any_tuning_child_starts(tmp_path):
    """Sharded Adam with SGD on a first run (a cold cache, tuning on): refused by name at
    once, tuned or pinned alike, no candidate timed and nothing cached (it was refused by
    every tuning child, once per candidate, after the tuning's seconds)."""
    cache = tmp_path / "layouts.json"
    env = {k: v for k, v in os.environ.items() if k != layout_tuning.TUNE_ENV}
    env.update(PARAGAN_TF_LAYOUT_CACHE=str(cache), PYTHONUNBUFFERED="1")
    lines = set()
    for layout in ("auto", "fp32"):
        run = run_while_progressing(
            [PYTHON, "bin/train.py", "--gin_file=gin/tiny.gin", f"--gin_file=gin/layouts/"
             f"{layout}.gin", f"--model_dir={relative(tmp_path / layout)}",
             "--gin_bindings=model_parallel.shard_optimizer=True",
             "--gin_bindings=G/optimizer.name='sgd'"], env=env)
        assert run.returncode == 2, run.stderr[-3000:]
        assert "layout candidate" not in run.stderr and "layout tuning" not in run.stderr
        lines.add(run.stderr.strip().splitlines()[-1])
    assert lines == {"train.py: error: model_parallel.shard_optimizer=True shards Adam's "
                     "moments; G/optimizer.name='sgd' is not Adam"}, lines
    assert not cache.exists()
