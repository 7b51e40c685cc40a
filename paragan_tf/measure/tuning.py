"""The layout measured on the machine it runs on (docs/design.md section 5).

What does not change the numbers beyond round-off (XLA on or off, oneDNN on or off
on x86 CPUs, TensorFlow's thread counts) is chosen by timing the experiment's own
training step under each candidate, never from a table. oneDNN and the thread
counts must be set before TensorFlow loads, so every candidate is a child process
(measure/probe.py) that builds the run, compiles and warms up its step, then
times steps when asked. Children start as many at a time as there are cores, the rules'
candidate first; each times one step alone once its group is ready, and one over twice
the best so far is dropped then (timing.py). The survivors are asked A B C, A B C, ...
(interleaved rounds, so a noisy neighbour hits every candidate alike), each candidate's
median counting.

Two stages (their candidates: layout/candidates.py): first XLA x oneDNN at
TensorFlow's thread counts, with the rules' candidate at float32 second where the rule
picked bfloat16 (so the precision is timed before anything else: bfloat16 stays unless
timed slower); then the winner against itself with one inter-op thread. The whole
tuning keeps to `layout.tune_seconds` (90 s by default), counted from the first child's
start: what would not fit is not started, a child not ready by then is stopped (only
the rules' candidate may overrun, so that something is measured), and the log says so.
One line per candidate and one for the choice go to the log.

The result is kept in a readable JSON cache (paragan_tf/layout/cache.py), keyed by
the hardware signature, TensorFlow's version, the step's shape and what the run pinned
(`pinned`); `layout.tune='auto'` measures only when the key has no entry, 'again'
re-measures, 'off' uses the cache or the rules. One run measures at a time per cache; a
cache that cannot be read or written costs a warning line, never the run.

Tuning runs for one-process strategies only: every worker of a multi-worker job
would measure alone and might choose differently. Those use the cache entry of the
same step shape and strategy, or the rules.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Callable, Dict, Optional, Sequence, Tuple

from absl import logging
import tensorflow as tf

from paragan_tf import families
from paragan_tf.layout import rules as layout_lib
from paragan_tf.layout.choice import Choice
from paragan_tf.layout import cache as layout_cache
from paragan_tf.layout import env as layout_env
from paragan_tf.layout import candidates as layout_candidates
from paragan_tf.measure import timing as layout_timing
from paragan_tf.scale import devices as devices_lib

ONE_PROCESS_KINDS = ("one_device", "mirrored")
TUNE_ENV = layout_timing.TUNE_ENV


def step_shape(settings, precision: str) -> Dict[str, object]:
    """What the step's speed depends on, beside the hardware and TensorFlow's version: the
    shared shape and what identifies the run's GAN family's networks (its
    `cache_identity`)."""
    cfg = settings.train
    family = families.family_class(settings.model.family)(settings.model.options)
    return dict(resolution=settings.data.resolution, batch_size=cfg.batch_size,
                d_steps=cfg.d_steps, accumulation=cfg.accumulation,
                recompute=cfg.recompute, precision=precision,
                strategy=settings.strategy.kind,
                # Which input-gradient penalties run and how often, not their weights:
                # a sweep over R1's strength is one step shape, tuned once.
                penalties=dict(r1=settings.penalties.r1_gamma > 0,
                               r2=settings.penalties.r2_gamma > 0,
                               every=settings.penalties.lazy_interval),
                augment=bool(settings.augment.transforms or settings.augment.ada_target),
                **family.cache_identity(settings))


def pinned(pins: Dict[str, str], strategy) -> Dict[str, object]:
    """What the user fixed of what tuning would otherwise try (`pins`: layout.xla, .onednn
    and .precision; the strategy's thread counts; the environment's oneDNN and threads): it
    joins the cache key, so that a pinned run's winner, chosen among fewer candidates, is
    never read by a run that pinned less (or other things)."""
    out: Dict[str, object] = dict(pins)
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


def tune(settings, hardware: layout_lib.Hardware, pins: Dict[str, object],
         precision: str, budget_seconds: float, rounds: int = 3,
         progress: Callable[[str], None] = logging.info
         ) -> Tuple[layout_candidates.Candidate, dict]:
    """Measures the candidates for the parsed gin config within `budget_seconds` from the
    first child's start (the rules' candidate first: the one to beat, and the one kept
    when nothing else fits); (the fastest, the record)."""
    started = time.monotonic()
    deadline = started + budget_seconds
    stage, notes = layout_candidates.first_stage(hardware, pins, settings.strategy, precision)
    for note in notes:
        progress(f"layout tuning: {note}")
    record = dict(stages=[], notes=notes)
    at_once = max(1, min(hardware.cores, layout_lib.usable_cores()))
    with layout_timing.parsed_config_file(settings.parsed) as config_file:
        winner = stage[0]
        if len(stage) > 1:
            progress(f"layout tuning: timing {len(stage)} candidates of this step, "
                     f"{at_once} starting at a time (budget {budget_seconds:.0f} s)")
            rows = layout_timing.measure(stage, config_file, rounds, deadline, progress,
                                         at_once=at_once)
            record["stages"].append(rows)
            _report(rows, progress)
            winner = layout_candidates.Candidate(**layout_timing.fastest(rows)["candidate"])
        second, more = layout_candidates.second_stage(winner, hardware)
        record["notes"] += more
        # Stage two is started only where its children, judged by the slowest start-up of
        # stage one, can be ready and timed in the budget; whatever it does, stage one's
        # winner stands. With nothing timed yet (XLA, oneDNN and precision pinned: one
        # candidate) it times that candidate, which may overrun the budget.
        timed = any(r["seconds_per_step"] for rows in record["stages"] for r in rows)
        startup = max((r["startup_seconds"] or 0.0 for rows in record["stages"]
                       for r in rows), default=0.0)
        left = deadline - time.monotonic()
        if timed and len(second) > 1 and left < layout_timing.cost(
                startup, min(at_once, len(second))):
            progress(f"layout tuning: the thread variant skipped ({left:.0f} s of "
                     f"the budget left, a start-up took {startup:.0f} s)")
        elif len(second) > 1 or not timed:
            rows = layout_timing.measure(second, config_file, rounds, deadline, progress,
                                         at_once=at_once, first_may_overrun=not timed)
            record["stages"].append(rows)
            if any(r["seconds_per_step"] for r in rows):
                _report(rows, progress)
                winner = layout_candidates.Candidate(**layout_timing.fastest(rows)["candidate"])
            else:
                progress("layout tuning: the thread variant not timed within the time "
                         "budget; stage one's choice stands")
    record["seconds"] = round(time.monotonic() - started, 1)
    return winner, record


def _report(rows: Sequence[dict], progress: Callable[[str], None]) -> None:
    best = layout_timing.fastest(rows)["seconds_per_step"]
    for row in rows:
        if row["seconds_per_step"]:
            progress(f"layout candidate {row['name']}: {row['seconds_per_step']:.3f} s/step "
                     f"({best / row['seconds_per_step']:.2f} of the fastest; rounds "
                     + " ".join(f"{t:.3f}" for t in row["rounds"]) + ")")


def settle(settings, allow_measuring: bool = True,
           progress: Callable[[str], None] = logging.info) -> Optional[Choice]:
    """`auto`'s measured settings for the parsed gin config: from the cache, or measured
    now (and cached) when tuning is allowed; None where the rules decide."""
    kind = settings.strategy.kind
    if kind not in ONE_PROCESS_KINDS:
        progress(f"layout: the rules decide under strategy.kind={kind!r} (every worker of "
                 f"a multi-process job would measure alone)")
        return None
    parallel = settings.model_parallel
    blocker = parallel.mode_class(parallel).xla_blocker()
    if blocker:
        progress(f"layout: the rules decide: {blocker} (tuning tries XLA)")
        return None
    config = settings.layout
    pins = config.pins()
    hardware = layout_lib.detect()  # physical devices only: TensorFlow stays uninitialised
    precision = layout_lib.run_precision(hardware, config.precision)
    key, facts = cache_key(hardware, step_shape(settings, precision),
                           pinned(pins, settings.strategy))
    mode = config.tune
    if os.environ.get(TUNE_ENV) == "off":
        mode = "off" if mode != "again" else mode
    if mode != "again":
        found = _from_cache(key, progress)
        if found:
            return found
    why_not = ("a dry run measures nothing" if not allow_measuring else
               "layout.tune='off'" if config.tune == "off" else
               f"{TUNE_ENV}=off" if mode == "off" else
               "TPUs compile every step anyway" if hardware.accelerator == "tpu" else None)
    if why_not:
        progress(f"layout: no measurement of this step on this machine (key {key}); the "
                 f"rules decide ({why_not})")
        return None
    with layout_cache.measuring(progress):
        # A first run of this step elsewhere may have measured it while this one waited.
        found = _from_cache(key, progress) if mode != "again" else None
        if found:
            return found
        winner, record = tune(settings, hardware, pins, precision,
                              config.tune_seconds, progress=progress)
        rows = [r for stage in record["stages"] for r in stage]
        seconds = next((r["seconds_per_step"] for r in rows
                        if layout_candidates.Candidate(**r["candidate"]) == winner), None)
        counted = next((r for r in rows if r.get("train_step_flops")), {})
        flops, replicas = counted.get("train_step_flops"), counted.get("replicas")
        unwritten = layout_cache.write(key, dict(  # `device`: scale/measured.py reads it
            facts, device=devices_lib.detected_name(hardware.accelerator),
            choice=winner.settings(), seconds_per_step=seconds,
            train_step_flops=flops, replicas=replicas,
            date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            record=record))
    untimed = sum("time budget" in (r.get("error") or "") for r in rows)
    progress(f"layout tuning chose {winner.name} ({seconds or float('nan'):.3f} s/step) in "
             f"{record['seconds']:.0f} s; " + ("not cached" if unwritten else
                                               f"cached in {layout_cache.path()} (key {key})")
             + (f"; {untimed} candidate(s) not timed within the budget (layout.tune = 'again' "
                f"with a larger layout.tune_seconds times them)" if untimed else ""))
    return winner.timed("measured", seconds)


def _from_cache(key: str, progress: Callable[[str], None]) -> Optional[Choice]:
    found = cached(key)
    if not found:
        return None
    chosen, entry = found
    progress(f"layout: {chosen.name} from the cache {layout_cache.path()} (key {key}, "
             f"measured {entry.get('date', 'at an unrecorded date')})")
    seconds = entry.get("seconds_per_step")
    return chosen.timed("cache", seconds if isinstance(seconds, (int, float)) else None)


def restart_environment(settings, measured: Optional[Choice]
                        ) -> Dict[str, str]:
    """The variables this process lacks for its layout (empty: it has what it needs)."""
    onednn = settings.layout.onednn
    if measured is None and onednn == "auto":
        return {}  # TensorFlow's defaults: nothing to detect or set
    hardware = layout_lib.detect()
    strategy = settings.strategy
    wanted = layout_env.environment(
        hardware, onednn=onednn, measured=measured,
        threads_pinned=bool(strategy.intra_op_threads or strategy.inter_op_threads))
    current = {layout_lib.ONEDNN_ENV: None}
    onednn = layout_lib.onednn_in_effect(hardware)
    if onednn is not None:
        current[layout_lib.ONEDNN_ENV] = "1" if onednn else "0"
    for name, value in zip(layout_lib.THREAD_ENV, layout_lib.threads_in_effect()):
        current[name] = str(value) if value else None
    return {k: v for k, v in wanted.items() if current.get(k) != v}
