"""What layout tuning may choose (measure/tuning.py times them): the candidates.

A candidate is a `Choice` (layout/choice.py): one setting of XLA, oneDNN, the thread
counts and the precision, with the environment its child process starts TensorFlow with,
the type the tuner also returns. The stages decide which
candidates are worth timing on this hardware under the user's pins: XLA x oneDNN (and
float32 where the rule guessed bfloat16) first, in the order a budget should spend on
them, then the winner against one inter-op thread; anything pinned or impossible is
left out, and the notes say why. `rule_candidate` names the one the
rules alone would pick. Nothing here starts a process or times a step, so the choice of
candidates is tested, and read by benchmarks/layout.py, without measuring anything.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

from paragan_tf.layout import rules as layout_lib
from paragan_tf.layout.choice import Choice
from paragan_tf.layout import env as layout_env


# A candidate is a Choice not yet timed: the tuner's one type for a setting.
Candidate = Choice


def candidates(hardware: layout_lib.Hardware, pins: Dict[str, object], strategy,
               precision: str) -> Tuple[List[Candidate], List[str]]:
    """The first stage's candidates (XLA x oneDNN) and why anything was not tried;
    `strategy`: the run's StrategyConfig (its kind, its pinned thread counts)."""
    notes, kind = [], strategy.kind
    env_pins = layout_env.environment_pins()
    # The strategy does not exist yet: its replicas as make_strategy will make them (tuning
    # runs under one_device and mirrored only; mirrored on a CPU splits it in num_logical_cpus).
    replicas = max(1, strategy.num_logical_cpus) if kind == "mirrored" else 1
    blocker = layout_lib.blocks_xla("MirroredStrategy" if kind == "mirrored" else kind,
                                    replicas, hardware)
    if "xla" in pins:
        xlas = [pins["xla"] == "on"]
        notes.append(f"XLA pinned {pins['xla']} (layout.xla)")
    elif blocker:
        xlas = [False]
        notes.append(f"XLA not tried: {blocker}")
    else:
        xlas = [False, True]
    default = layout_env.onednn_default(hardware)
    if default is None:
        onednns: List[Optional[bool]] = [None]
        notes.append(f"oneDNN not tried: no switch on {hardware.accelerator} "
                     f"({hardware.cpu_model})")
    elif layout_lib.ONEDNN_ENV in env_pins:
        onednns = [env_pins[layout_lib.ONEDNN_ENV] not in ("0", "false", "False")]
        notes.append(f"oneDNN pinned by {layout_lib.ONEDNN_ENV}="
                     f"{env_pins[layout_lib.ONEDNN_ENV]}")
    elif "onednn" in pins:
        onednns = [pins["onednn"] == "on"]
        notes.append(f"oneDNN pinned {pins['onednn']} (layout.onednn)")
    else:
        onednns = [default, not default]  # TensorFlow's default for this CPU first
    env = [int(env_pins.get(name) or 0) for name in layout_lib.THREAD_ENV]
    threads = (strategy.intra_op_threads or env[0], strategy.inter_op_threads or env[1])
    if any(threads):
        notes.append(f"thread counts pinned {threads[0] or 'default'}/"
                     f"{threads[1] or 'default'} (strategy.*_op_threads or the environment)")
    return [Candidate(x, o, *threads, precision) for o in onednns for x in xlas], notes


def rule_candidate(hardware: layout_lib.Hardware, stage: Sequence[Candidate]) -> Candidate:
    """Of the first stage, the one the rules alone give (what `auto` was before it
    measured): XLA on accelerators only, TensorFlow's default oneDNN, where each is a
    candidate; otherwise what the stage pins."""
    xla = layout_lib.rule_xla(hardware)
    onednn = layout_env.onednn_default(hardware)
    return dataclasses.replace(
        stage[0], xla=xla if any(c.xla == xla for c in stage) else stage[0].xla,
        onednn=onednn if any(c.onednn == onednn for c in stage) else stage[0].onednn)


def first_stage(hardware: layout_lib.Hardware, pins: Dict[str, object], strategy,
                precision: str) -> Tuple[List[Candidate], List[str]]:
    """`candidates` in the order they are timed (a budget may cut the tail): the rules' own
    first, the one to beat; where the rule guessed bfloat16 (not pinned), the same at
    float32 next, so that the precision is timed, never assumed; then one change at a
    time (oneDNN flipped starts as fast as the rules'; XLA's compilation makes its
    candidates the slowest to start), both changed last."""
    stage, notes = candidates(hardware, pins, strategy, precision)
    rule = rule_candidate(hardware, stage)
    ordered = sorted(stage, key=lambda c: (c != rule, c.xla != rule.xla,
                                           c.onednn != rule.onednn))
    if "precision" not in pins and precision == "mixed_bfloat16":
        ordered.insert(1, dataclasses.replace(rule, precision="float32"))
    return ordered, notes


def second_stage(winner: Candidate, hardware: layout_lib.Hardware
                 ) -> Tuple[List[Candidate], List[str]]:
    """The winner against one inter-op thread (its precision was timed in stage one)."""
    notes, out = [], [winner]
    if winner.intra_op_threads or winner.inter_op_threads:
        notes.append("thread counts pinned")
    elif hardware.cores < 2:
        notes.append("thread counts not tried: one core")
    else:
        out.append(dataclasses.replace(winner, intra_op_threads=hardware.cores,
                                       inter_op_threads=1))
    return out, notes
