"""The layout measured on the machine it runs on (docs/design.md section 5).

What does not change the numbers beyond round-off (XLA on or off, oneDNN on or off
on x86 CPUs, TensorFlow's thread counts) is chosen by timing the experiment's own
training step under each candidate, never from a table. oneDNN and the thread
counts must be set before TensorFlow loads, so every candidate is a child process
(train/layout_probe.py) that builds the run, compiles and warms up its step, then
times steps when asked. Children start as many at a time as there are cores, the rules'
candidate first; each times one step alone once its group is ready, and one over twice
the best so far is dropped then (`measure`). The survivors are asked A B C, A B C, ...
(interleaved rounds, so a noisy neighbour hits every candidate alike), each candidate's
median counting.

Two stages (their candidates: train/layout_candidates.py): first XLA x oneDNN at
TensorFlow's thread counts; then the winner against itself with one inter-op thread,
and against float32 where the rule picked bfloat16 (the rule stands unless bfloat16
is timed slower). The whole tuning keeps to `layout.tune_seconds` (90 s by default),
counted from the first child's start: what would not fit is not started, a child not
ready by then is stopped (only the rules' candidate may overrun, so that something is
measured), and the log says so. One line per candidate and one for the choice go to
the log.

The result is kept in a readable JSON cache (paragan_tf/layout_cache.py), keyed by
the hardware signature, TensorFlow's version, the step's shape and what the run pinned
(`pinned`); `layout.tune='auto'` measures only when the key has no entry, 'again'
re-measures, 'off' uses the cache or the rules. One run measures at a time per cache; a
cache that cannot be read or written costs a warning line, never the run.

Tuning runs for one-process strategies only: every worker of a multi-worker job
would measure alone and might choose differently. Those use the cache entry of the
same step shape and strategy, or the rules.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from absl import logging
import gin
import tensorflow as tf

from paragan_tf import layout as layout_lib
from paragan_tf import layout_cache
from paragan_tf import layout_env
from paragan_tf.errors import ConfigError
from paragan_tf.train import layout_candidates

ONE_PROCESS_KINDS = ("one_device", "mirrored")
TUNE_ENV = "PARAGAN_TF_LAYOUT_TUNE"  # "off": never measure (test suites set it)
MEASURE_SECONDS = 1.5  # the length of one timing of one candidate
DROP_OVER = 2.0  # a candidate whose first step is this much slower than the best is dropped
STARTUP_TIMEOUT = 900  # seconds for a child to build and compile its step


def step_shape(settings, precision: str) -> Dict[str, object]:
    """What the step's speed depends on, beside the hardware and TensorFlow's version."""
    cfg = settings.train
    return dict(resolution=settings.data.resolution, batch_size=cfg.batch_size,
                d_steps=cfg.d_steps, accumulation=cfg.accumulation,
                recompute=cfg.recompute, precision=precision,
                strategy=settings.strategy.kind,
                generator_ch=settings.model.generator_ch,
                discriminator_ch=settings.model.discriminator_ch, dim_z=settings.model.dim_z,
                # Which input-gradient penalties run and how often, not their weights:
                # a sweep over R1's strength is one step shape, tuned once.
                penalties=dict(r1=settings.penalties.r1_gamma > 0,
                               r2=settings.penalties.r2_gamma > 0,
                               every=settings.penalties.lazy_interval),
                augment=bool(settings.augment.transforms or settings.augment.ada_target))


def pinned(pins: Dict[str, object], strategy) -> Dict[str, object]:
    """What the user fixed of what tuning would otherwise try (layout.xla, .onednn and
    .precision, the strategy's thread counts, the environment's oneDNN and threads): it
    joins the cache key, so that a pinned run's winner, chosen among fewer candidates, is
    never read by a run that pinned less (or other things)."""
    out: Dict[str, object] = {name: pins[name] for name in ("xla", "onednn", "precision")
                              if pins.get(name, "auto") != "auto"}
    out.update(layout_env.environment_pins())
    for name in ("intra_op_threads", "inter_op_threads"):
        if getattr(strategy, name):
            out[f"strategy.{name}"] = getattr(strategy, name)
    return out


def cache_key(hardware: layout_lib.Hardware, shape: Dict[str, object],
              pins: Dict[str, object]) -> Tuple[str, dict]:
    """(key, the readable facts it hashes)."""
    facts = dict(schema=layout_cache.SCHEMA, hardware=hardware.signature(),
                 tensorflow=tf.__version__, step=shape, pins=pins)
    text = json.dumps(facts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16], facts


def cached(key: str) -> Optional[Tuple[layout_candidates.Candidate, dict]]:
    """(the choice, the entry) cached under `key`; None when there is none, or (after one
    warning line) when the entry is not one this module wrote."""
    entry = layout_cache.read(key)
    if entry is None:
        return None
    try:
        if not isinstance(entry, dict):
            raise ValueError(f"it is a JSON {type(entry).__name__}")
        return layout_candidates.Candidate.from_cache(entry.get("choice")), entry
    except ValueError as e:
        layout_cache.warn_once(f"layout cache {layout_cache.path()}: the entry {key} is "
                               f"malformed ({e}): measuring anew")
        return None


class _Probe:
    """A child process holding one candidate's built and compiled step."""

    def __init__(self, candidate: layout_candidates.Candidate, config_file: str,
                 count_flops: bool = False):
        self.candidate = candidate
        # The candidate's process settings alone (it carries the user's pins), not this
        # process's, which may come from an earlier choice.
        env = {k: v for k, v in os.environ.items()
               if k not in (layout_lib.ONEDNN_ENV,) + layout_lib.THREAD_ENV}
        env.update(candidate.environment(), PARAGAN_TF_PROBE_FLOPS=str(int(count_flops)),
                   **{TUNE_ENV: "off"})
        bindings = [f"layout.xla = '{'on' if candidate.xla else 'off'}'",
                    f"layout.precision = '{candidate.precision}'",
                    "layout.tune = 'off'"]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "paragan_tf.train.layout_probe", config_file, *bindings],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, text=True)
        self.ready: Optional[dict] = None

    def read(self, timeout: float = STARTUP_TIMEOUT) -> dict:
        """The child's next JSON line; an error when it exits or stays silent `timeout` s."""
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else None
        if line is None:
            self.process.kill()
            return dict(error=f"no answer in {timeout:.0f} s")
        if not line:
            return dict(error=f"exited with code {self.process.wait()}")
        return json.loads(line)

    def time_steps(self, steps: int, timeout: float) -> dict:
        try:
            self.process.stdin.write(f"{steps}\n")
            self.process.stdin.flush()
        except OSError as e:
            return dict(error=f"its input closed ({e})")
        return self.read(timeout)

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.process.stdin.write("quit\n")
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def measure(stage: Sequence[layout_candidates.Candidate], config_file: str, rounds: int,
            deadline: float, progress: Callable[[str], None], at_once: int = 1,
            drop_over: Optional[float] = DROP_OVER, first_may_overrun: bool = True
            ) -> List[dict]:
    """Each candidate's step seconds over interleaved rounds (as many as `deadline` allows,
    at most `rounds`; where none fits, its one timed step): a row per candidate.

    Children start `at_once` at a time (their start-up, mostly tracing in one thread, fills
    a core each), in `stage`'s order: the first is the one to beat. Once a group is ready,
    each of its candidates times one step alone; one slower than `drop_over` x the fastest
    so far is dropped at once (None: none is). A group that would start after `deadline`,
    judged by the first group's start-up, is not started, and a child not ready by then is
    stopped; only the first candidate may overrun (`first_may_overrun`), so that there is
    a measured choice at all. Idle children wait on their input and use no CPU.
    """
    rows: Dict[str, dict] = {}
    live: List[_Probe] = []
    begun: List[_Probe] = []
    warm: Dict[str, float] = {}
    first_startup: Optional[float] = None
    # Starting children and their first steps stop this early: one round of timings keeps
    # the rest of the budget.
    starts_by = deadline - len(stage) * MEASURE_SECONDS

    def row(candidate, error=None, startup=None, probe=None):
        rows[candidate.name] = dict(
            candidate=dataclasses.asdict(candidate), name=candidate.name,
            seconds_per_step=None, rounds=[], steps_per_timing=None,
            startup_seconds=None if startup is None else round(startup, 1),
            train_step_flops=(probe.ready or {}).get("train_step_flops") if probe else None,
            error=error)

    try:
        for begin in range(0, len(stage), max(1, at_once)):
            group = stage[begin:begin + max(1, at_once)]
            if first_startup is not None and time.monotonic() + _cost(
                    first_startup, len(group)) > starts_by:
                progress("layout tuning: not timed within the time budget: "
                         + ", ".join(c.name for c in stage[begin:])
                         + f" (a start-up took {first_startup:.0f} s)")
                for candidate in stage[begin:]:
                    row(candidate, error="not timed: the time budget")
                break
            started = time.monotonic()
            probes = [_Probe(c, config_file, count_flops=begin + i == 0)
                      for i, c in enumerate(group)]
            begun += probes
            for i, probe in enumerate(probes):
                may_overrun = first_may_overrun and begin + i == 0
                timeout = STARTUP_TIMEOUT if may_overrun else max(0.0, starts_by -
                                                                 time.monotonic())
                probe.ready = probe.read(timeout)
                startup = time.monotonic() - started
                if "error" in probe.ready:
                    error = ("not ready within the time budget" if "no answer" in
                             probe.ready["error"] and not may_overrun else probe.ready["error"])
                    progress(f"layout candidate {probe.candidate.name}: failed ({error}); "
                             f"not chosen")
                    row(probe.candidate, error=error, startup=startup, probe=probe)
                    probe.close()
                    continue
                row(probe.candidate, startup=startup, probe=probe)
            first_startup = first_startup or time.monotonic() - started
            # One step timed alone (the group's warm-ups overlapped), uncounted: the
            # candidate's pace, and whether it is worth timing at all.
            for i, probe in enumerate(probes):
                name = probe.candidate.name
                if rows[name]["error"]:
                    continue
                may_overrun = first_may_overrun and begin + i == 0
                answer = probe.time_steps(1, timeout=STARTUP_TIMEOUT if may_overrun else
                                          max(0.0, starts_by - time.monotonic()))
                seconds = answer.get("seconds")
                best = min(warm.values(), default=None)
                if seconds is None:
                    rows[name]["error"] = ("not timed within the time budget" if not
                                           may_overrun and "no answer" in answer.get(
                                               "error", "") else answer.get("error"))
                elif drop_over and best and seconds > drop_over * best:
                    rows[name]["error"] = (f"dropped: its first step took {seconds:.3f} s, "
                                           f"over {drop_over:g}x the fastest so far "
                                           f"({best:.3f} s)")
                    rows[name]["rounds"] = [seconds]
                else:
                    warm[name] = max(seconds, 1e-3)
                    live.append(probe)
                    continue
                progress(f"layout candidate {name}: {rows[name]['error']}; not chosen")
                probe.close()
        if not live:
            raise ConfigError("layout tuning: no candidate built and timed its step: " +
                              "; ".join(f"{r['name']}: {r['error']}" for r in rows.values()))
        # Each candidate times ~MEASURE_SECONDS of steps a round, interleaved (A B C, A B C):
        # a noisy neighbour hits every candidate alike.
        steps = {name: max(1, round(MEASURE_SECONDS / w)) for name, w in warm.items()}
        for index in range(rounds):
            one_round = sum(steps[p.candidate.name] * warm[p.candidate.name] for p in live)
            if time.monotonic() + one_round > deadline:
                progress(f"layout tuning: {index} round(s) of {rounds} fit the time budget"
                         + ("" if index else "; each candidate's one timed step stands"))
                break
            for probe in list(live):
                name = probe.candidate.name
                answer = probe.time_steps(steps[name], timeout=60 + 20 * steps[name] * warm[name])
                if "seconds" in answer:
                    rows[name]["rounds"].append(answer["seconds"] / answer["steps"])
                else:  # it died or hung mid-way: its earlier timings do not count either
                    progress(f"layout candidate {name}: failed ({answer.get('error')}); "
                             f"not chosen")
                    rows[name].update(error=answer.get("error"), rounds=[])
                    live.remove(probe)
        for name, r in rows.items():
            if name in warm and not r["error"]:
                timed = r["rounds"] or [warm[name]]  # no round fitted: its one timed step
                r.update(seconds_per_step=statistics.median(timed),
                         steps_per_timing=steps[name] if r["rounds"] else 1, rounds=timed)
    finally:
        for probe in begun:
            probe.close()
    return [rows[c.name] for c in stage]


def _cost(startup: float, children: int) -> float:
    """Seconds a group of children needs at least: its start-up, then each child's first
    step and one round of timings (~MEASURE_SECONDS each)."""
    return startup + children * 2 * MEASURE_SECONDS


@contextlib.contextmanager
def parsed_config_file():
    """The parsed gin config as a file, for the children to parse as they are."""
    with tempfile.NamedTemporaryFile("w", suffix=".gin") as f:
        f.write(gin.config_str())
        f.flush()
        yield f.name


def fastest(rows: Sequence[dict]) -> dict:
    timed = [r for r in rows if r["seconds_per_step"]]
    if not timed:
        raise ConfigError("layout tuning: no candidate finished a timing: " + "; ".join(
            f"{r['name']}: {r['error']}" for r in rows))
    return min(timed, key=lambda r: r["seconds_per_step"])


def tune(settings, hardware: layout_lib.Hardware, pins: Dict[str, object],
         precision: str, budget_seconds: float, rounds: int = 3,
         progress: Callable[[str], None] = logging.info
         ) -> Tuple[layout_candidates.Candidate, dict]:
    """Measures the candidates for the parsed gin config within `budget_seconds` from the
    first child's start (the rules' candidate first: the one to beat, and the one kept
    when nothing else fits); (the fastest, the record)."""
    started = time.monotonic()
    deadline = started + budget_seconds
    stage, notes = layout_candidates.candidates(hardware, pins, settings.strategy, precision)
    # The rules' candidate first, then one change at a time (oneDNN flipped starts as fast
    # as it; XLA's compilation makes its candidates the slowest to start), both last.
    rule = layout_candidates.rule_candidate(hardware, stage)
    stage = sorted(stage, key=lambda c: (c != rule, c.xla != rule.xla, c.onednn != rule.onednn))
    for note in notes:
        progress(f"layout tuning: {note}")
    record = dict(stages=[], notes=notes)
    at_once = max(1, min(hardware.cores, layout_lib.usable_cores()))
    with parsed_config_file() as config_file:
        winner = stage[0]
        if len(stage) > 1:
            progress(f"layout tuning: timing {len(stage)} candidates of this step, "
                     f"{at_once} starting at a time (budget {budget_seconds:.0f} s)")
            rows = measure(stage, config_file, rounds, deadline, progress, at_once=at_once)
            record["stages"].append(rows)
            _report(rows, progress)
            winner = layout_candidates.Candidate(**fastest(rows)["candidate"])
        second, more = layout_candidates.second_stage(winner, hardware, pins, precision)
        record["notes"] += more
        startup = min((r["startup_seconds"] for stage_rows in record["stages"]
                       for r in stage_rows if r["startup_seconds"]), default=0.0)
        left = deadline - time.monotonic()
        if len(second) > 1 and left < _cost(startup, min(at_once, len(second))):
            progress(f"layout tuning: thread and precision variants skipped ({left:.0f} s of "
                     f"the budget left, a start-up took {startup:.0f} s)")
        elif len(second) > 1:
            rows = measure(second, config_file, rounds, deadline, progress, at_once=at_once,
                           first_may_overrun=False)
            record["stages"].append(rows)
            if any(r["seconds_per_step"] for r in rows):
                _report(rows, progress)
                winner = layout_candidates.Candidate(**fastest(rows)["candidate"])
            else:
                progress("layout tuning: thread and precision variants not timed within "
                         "the time budget")
    record["seconds"] = round(time.monotonic() - started, 1)
    return winner, record


def _report(rows: Sequence[dict], progress: Callable[[str], None]) -> None:
    best = fastest(rows)["seconds_per_step"]
    for row in rows:
        if row["seconds_per_step"]:
            progress(f"layout candidate {row['name']}: {row['seconds_per_step']:.3f} s/step "
                     f"({best / row['seconds_per_step']:.2f} of the fastest; rounds "
                     + " ".join(f"{t:.3f}" for t in row["rounds"]) + ")")


def settle(settings, allow_measuring: bool = True,
           progress: Callable[[str], None] = logging.info) -> Optional[layout_lib.Measured]:
    """`auto`'s measured settings for the parsed gin config: from the cache, or measured
    now (and cached) when tuning is allowed; None where the rules decide."""
    kind = settings.strategy.kind
    if kind not in ONE_PROCESS_KINDS:
        progress(f"layout: the rules decide under strategy.kind={kind!r} (every worker of "
                 f"a multi-process job would measure alone)")
        return None
    blocker = settings.model_parallel.xla_blocker()
    if blocker:
        progress(f"layout: the rules decide: {blocker} (tuning tries XLA)")
        return None
    pins = layout_lib.configured()
    hardware = layout_lib.detect()  # physical devices only: TensorFlow stays uninitialised
    precision = layout_lib.run_precision(hardware, pins.get("precision", "auto"))
    key, facts = cache_key(hardware, step_shape(settings, precision),
                           pinned(pins, settings.strategy))
    mode = pins.get("tune", "auto")
    if os.environ.get(TUNE_ENV) == "off":
        mode = "off" if mode != "again" else mode
    if mode != "again":
        found = _from_cache(key, precision, progress)
        if found:
            return found
    why_not = ("a dry run measures nothing" if not allow_measuring else
               "layout.tune='off'" if pins.get("tune") == "off" else
               f"{TUNE_ENV}=off" if mode == "off" else
               "TPUs compile every step anyway" if hardware.accelerator == "tpu" else None)
    if why_not:
        progress(f"layout: no measurement of this step on this machine (key {key}); the "
                 f"rules decide ({why_not})")
        return None
    with layout_cache.measuring(progress):
        # A first run of this step elsewhere may have measured it while this one waited.
        found = _from_cache(key, precision, progress) if mode != "again" else None
        if found:
            return found
        winner, record = tune(settings, hardware, pins, precision,
                              float(pins.get("tune_seconds", 90.0)), progress=progress)
        rows = [r for stage in record["stages"] for r in stage]
        seconds = next((r["seconds_per_step"] for r in rows
                        if layout_candidates.Candidate(**r["candidate"]) == winner), None)
        flops = next((r["train_step_flops"] for r in rows if r.get("train_step_flops")), None)
        unwritten = layout_cache.write(key, dict(
            facts, choice=dataclasses.asdict(winner), seconds_per_step=seconds,
            train_step_flops=flops, date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            record=record))
    untimed = sum("time budget" in (r.get("error") or "") for r in rows)
    progress(f"layout tuning chose {winner.name} ({seconds or float('nan'):.3f} s/step) in "
             f"{record['seconds']:.0f} s; " + ("not cached" if unwritten else
                                               f"cached in {layout_cache.path()} (key {key})")
             + (f"; {untimed} candidate(s) not timed within the budget (layout.tune = 'again' "
                f"with a larger layout.tune_seconds times them)" if untimed else ""))
    return winner.measured("measured", seconds, precision)


def _from_cache(key: str, precision: str, progress: Callable[[str], None]
                ) -> Optional[layout_lib.Measured]:
    found = cached(key)
    if not found:
        return None
    chosen, entry = found
    progress(f"layout: {chosen.name} from the cache {layout_cache.path()} (key {key}, "
             f"measured {entry.get('date', 'at an unrecorded date')})")
    seconds = entry.get("seconds_per_step")
    return chosen.measured("cache", seconds if isinstance(seconds, (int, float)) else None,
                           precision)


def restart_environment(settings, measured: Optional[layout_lib.Measured]
                        ) -> Dict[str, str]:
    """The variables this process lacks for its layout (empty: it has what it needs)."""
    pins = layout_lib.configured()
    if measured is None and pins.get("onednn", "auto") == "auto":
        return {}  # TensorFlow's defaults: nothing to detect or set
    hardware = layout_lib.detect()
    strategy = settings.strategy
    wanted = layout_env.environment(
        hardware, onednn=pins.get("onednn", "auto"), measured=measured,
        threads_pinned=bool(strategy.intra_op_threads or strategy.inter_op_threads))
    current = {layout_lib.ONEDNN_ENV: None}
    onednn = layout_lib.onednn_in_effect(hardware)
    if onednn is not None:
        current[layout_lib.ONEDNN_ENV] = "1" if onednn else "0"
    for name, value in zip(layout_lib.THREAD_ENV, layout_lib.threads_in_effect()):
        current[name] = str(value) if value else None
    return {k: v for k, v in wanted.items() if current.get(k) != v}
