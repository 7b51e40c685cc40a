"""What layout tuning may choose (layout/tuning.py times them): the candidates.

A `Candidate` is one setting of XLA, oneDNN, the thread counts and the precision, with
the environment its child process starts TensorFlow with. The stages decide which
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
from paragan_tf.layout import env as layout_env


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One setting of what tuning may choose."""

    xla: bool
    onednn: Optional[bool]
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    precision: str = ""

    @property
    def name(self) -> str:
        parts = [f"xla={'on' if self.xla else 'off'}"]
        if self.onednn is not None:
            parts.append(f"onednn={'on' if self.onednn else 'off'}")
        parts.append(f"threads={self.intra_op_threads or 'default'}/"
                     f"{self.inter_op_threads or 'default'}")
        parts.append(self.precision)
        return ",".join(parts)

    @classmethod
    def from_cache(cls, choice: object) -> "Candidate":
        """A cache entry's choice, checked field by field: ValueError when it is not one
        this module wrote (a hand-edited or foreign file must not steer a run)."""
        fields = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(choice, dict) or set(choice) != fields:
            raise ValueError(f"its choice is not one of {sorted(fields)}: {choice!r}")
        threads = [choice["intra_op_threads"], choice["inter_op_threads"]]
        if not (isinstance(choice["xla"], bool) and choice["onednn"] in (None, True, False)
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                        for n in threads)
                and choice["precision"] in layout_lib.PRECISIONS[1:]):
            raise ValueError(f"its choice has a value of the wrong kind: {choice!r}")
        return cls(**choice)

    def environment(self) -> Dict[str, str]:
        env = {}
        if self.onednn is not None:
            env[layout_lib.ONEDNN_ENV] = "1" if self.onednn else "0"
        for name, value in zip(layout_lib.THREAD_ENV,
                               (self.intra_op_threads, self.inter_op_threads)):
            if value:
                env[name] = str(value)
        return env

    def measured(self, source: str, seconds: Optional[float], run_precision: str
                 ) -> layout_lib.Measured:
        return layout_lib.Measured(
            xla=self.xla, onednn=self.onednn, intra_op_threads=self.intra_op_threads,
            inter_op_threads=self.inter_op_threads,
            precision=self.precision if self.precision != run_precision else None,
            source=source, seconds_per_step=seconds)


def candidates(hardware: layout_lib.Hardware, pins: Dict[str, object], strategy,
               precision: str) -> Tuple[List[Candidate], List[str]]:
    """The first stage's candidates (XLA x oneDNN) and why anything was not tried;
    `strategy`: the run's StrategyConfig (its kind, its pinned thread counts)."""
    notes, kind = [], strategy.kind
    env_pins = layout_env.environment_pins()
    if "xla" in pins:
        xlas = [pins["xla"] == "on"]
        notes.append(f"XLA pinned {pins['xla']} (layout.xla)")
    elif hardware.accelerator == "cpu" and kind == "mirrored":
        xlas = [False]
        notes.append("XLA not tried: MirroredStrategy on CPU devices does not support XLA")
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
    xla = hardware.accelerator in ("gpu", "tpu")
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
