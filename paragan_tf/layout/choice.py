"""What a layout measurement decides, as one type (docs/design.md section 5): a `Choice`
of XLA, oneDNN, the thread counts and the precision. The tuner's candidates are Choices
(layout/candidates.py), the cache keeps their settings (layout/cache.py), `auto` takes
the fastest (layout/rules.py `choose`), and a process starts TensorFlow with its
environment (layout/env.py)."""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional

from paragan_tf.layout.rules import ONEDNN_ENV, PRECISIONS, THREAD_ENV, on_off


@dataclasses.dataclass(frozen=True)
class Choice:
    """One setting of what a measurement may decide: XLA, oneDNN, the thread counts and the
    precision. The tuner times candidates of this type and hands `auto` the fastest, with
    where it came from (`source`, `seconds_per_step`: not part of its identity)."""

    xla: bool
    onednn: Optional[bool]  # None: no switch on this hardware
    intra_op_threads: int = 0  # 0: TensorFlow's default
    inter_op_threads: int = 0
    precision: str = ""
    source: str = dataclasses.field(default="cache", compare=False)  # or "measured" (now)
    seconds_per_step: Optional[float] = dataclasses.field(default=None, compare=False)

    SETTINGS = ("xla", "onednn", "intra_op_threads", "inter_op_threads", "precision")

    @property
    def name(self) -> str:
        parts = [f"xla={on_off(self.xla)}"]
        if self.onednn is not None:
            parts.append(f"onednn={on_off(self.onednn)}")
        parts.append(f"threads={self.intra_op_threads or 'default'}/"
                     f"{self.inter_op_threads or 'default'}")
        parts.append(self.precision)
        return ",".join(parts)

    def settings(self) -> Dict[str, object]:
        """The setting alone (what a cache entry and a timing row keep)."""
        return {name: getattr(self, name) for name in self.SETTINGS}

    @classmethod
    def from_cache(cls, choice: object) -> "Choice":
        """A cache entry's choice, checked field by field: ValueError when it is not one
        the tuner wrote (a hand-edited or foreign file must not steer a run)."""
        if not isinstance(choice, dict) or set(choice) != set(cls.SETTINGS):
            raise ValueError(f"its choice is not one of {sorted(cls.SETTINGS)}: {choice!r}")
        threads = [choice["intra_op_threads"], choice["inter_op_threads"]]
        if not (isinstance(choice["xla"], bool) and choice["onednn"] in (None, True, False)
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                        for n in threads)
                and choice["precision"] in PRECISIONS[1:]):
            raise ValueError(f"its choice has a value of the wrong kind: {choice!r}")
        return cls(**choice)

    def timed(self, source: str, seconds: Optional[float]) -> "Choice":
        """This choice as `auto` takes it: from the cache or measured now, at this pace."""
        return dataclasses.replace(self, source=source, seconds_per_step=seconds)

    def environment(self) -> Dict[str, str]:
        """The variables a process starts TensorFlow with for this choice."""
        env = {}
        if self.onednn is not None:
            env[ONEDNN_ENV] = "1" if self.onednn else "0"
        for name, value in zip(THREAD_ENV, (self.intra_op_threads, self.inter_op_threads)):
            if value:
                env[name] = str(value)
        return env

    def describe(self) -> str:
        threads = (f"threads {self.intra_op_threads}/{self.inter_op_threads}"
                   if self.intra_op_threads or self.inter_op_threads else "threads default")
        return (f"XLA {on_off(self.xla)}, oneDNN "
                f"{'n/a' if self.onednn is None else on_off(self.onednn)}, {threads}"
                + (f", {self.precision}" if self.precision else ""))
