"""Timing layout candidates in child processes (measure/tuning.py decides what to
time and what to keep; docs/design.md section 5).

Each candidate is a child process (measure/probe.py) started with its own
environment (oneDNN, thread counts: read only as TensorFlow loads) that builds the run,
compiles and warms up its step, then times steps when asked. `measure` starts them as
many at a time as asked, the first candidate first, drops a hopeless one after its first
step, keeps to a deadline, and times the survivors in interleaved rounds.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence


from paragan_tf.layout import rules as layout_lib
from paragan_tf.errors import ConfigError
from paragan_tf.layout import candidates as layout_candidates

TUNE_ENV = "PARAGAN_TF_LAYOUT_TUNE"  # "off": never measure (test suites set it)
MEASURE_SECONDS = 1.5  # the length of one timing of one candidate
DROP_OVER = 2.0  # a candidate whose first step is this much slower than the best is dropped
STARTUP_TIMEOUT = 900  # seconds for a child to build and compile its step


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
            [sys.executable, "-m", "paragan_tf.measure.probe", config_file, *bindings],
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
    a measured choice at all. Idle children wait on their input and use no CPU. A stage
    where nothing was timed returns its rows with their errors (`fastest` raises on them);
    the caller decides whether that fails anything.
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
            candidate=candidate.settings(), name=candidate.name,
            seconds_per_step=None, rounds=[], steps_per_timing=None,
            startup_seconds=None if startup is None else round(startup, 1),
            train_step_flops=(probe.ready or {}).get("train_step_flops") if probe else None,
            replicas=(probe.ready or {}).get("replicas") if probe else None,
            error=error)

    try:
        for begin in range(0, len(stage), max(1, at_once)):
            group = stage[begin:begin + max(1, at_once)]
            if first_startup is not None and time.monotonic() + cost(
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
                timeout = STARTUP_TIMEOUT if may_overrun else _left(starts_by)
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
                                          _left(starts_by))
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


def _left(until: float) -> float:
    """Seconds to wait for a child until `until` (a finite wait: select() takes no inf)."""
    return min(float(STARTUP_TIMEOUT), max(0.0, until - time.monotonic()))


def cost(startup: float, children: int) -> float:
    """Seconds a group of children needs at least: its start-up, then each child's first
    step and one round of timings (~MEASURE_SECONDS each)."""
    return startup + children * 2 * MEASURE_SECONDS


@contextlib.contextmanager
def parsed_config_file(text: str):
    """The parsed gin config (`text`: train/settings.py's Settings.parsed) as a file, for the
    children to parse as they are."""
    with tempfile.NamedTemporaryFile("w", suffix=".gin") as f:
        f.write(text)
        f.flush()
        yield f.name


def fastest(rows: Sequence[dict]) -> dict:
    timed = [r for r in rows if r["seconds_per_step"]]
    if not timed:
        raise ConfigError("layout tuning: no candidate finished a timing: " + "; ".join(
            f"{r['name']}: {r['error']}" for r in rows))
    return min(timed, key=lambda r: r["seconds_per_step"])
