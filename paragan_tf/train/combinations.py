"""What may be combined, and why not: the refusals that join a run's setting to its strategy or
to another of its settings, in one table.

experiment.build checks every run against `RULES` once its strategy is known;
async_trainer.check_settings checks a run against the parameter-server rows before it trains.
docs/configuration.md shows the table as `table()` writes it (`python -m
paragan_tf.train.combinations` prints it; tests/train/test_combinations.py holds the two equal).

Not here: a bad value of one setting (its option object refuses it as it is made), what a
GAN family does not take (its `refuse`: paragan_tf/families/contract.py), what
needs the hardware or the built objects (distribute/model_parallel.py: a GPU count; the sharded
optimizer's own refusals, listed in the table from its constants), the layout's
(paragan_tf/layout/rules.py), and the input pipeline's, which is called without settings
(data/pipeline.py).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, List

from paragan_tf.distribute import model_parallel
from paragan_tf.distribute import strategy as strategy_lib
from paragan_tf.errors import ConfigError

PS = "parameter_server"


@dataclasses.dataclass(frozen=True)
class Rule:
    """`setting` is refused under strategy.kind `kind` when `value(settings)` is truthy:
    what the user set."""

    setting: str
    kind: str
    why: str
    value: Callable[..., object]
    condition: str = ""  # another setting the refusal needs, as the message names it

    def check(self, settings, strategy_kind: str) -> None:
        if strategy_kind != self.kind:
            return
        value = self.value(settings)
        if value:
            where = self.condition or f"strategy.kind={strategy_kind!r}"
            raise ConfigError(f"{self.setting}={value!r} is not available "
                              f"{'with' if self.condition else 'under'} {where}: {self.why}")


RULES: List[Rule] = [
    Rule("train.max_minutes", "multi_worker_mirrored",
         "each worker's clock would pick its own last step; use train.total_steps",
         lambda s: s.train.max_minutes),
    # Rematerialisation re-reads the variables in the backward pass: on parameter servers a
    # second round trip per block, and untested there.
    Rule("train.recompute", PS, "each block's backward would read its weights from the "
         "parameter servers again; use a synchronous strategy", lambda s: s.train.recompute),
    Rule("train.accumulation", PS, "the buffer holds single batches; use a larger "
         "train.batch_size instead",
         lambda s: s.async_train.mode == "sample_buffer" and s.train.accumulation > 1
         and s.train.accumulation, condition="async_train.mode='sample_buffer'"),
    Rule("input_pipeline.service_workers", PS, "every worker already runs its own input "
         "pipeline; set it to 0", lambda s: s.inputs.service_workers),
    Rule("eval.every_steps", PS, "the coordinator has no replicas to generate on; evaluate "
         "beside it with bin/eval.py --watch", lambda s: s.eval.every_steps),
    Rule("train.profile_steps", PS, "the steps run on the workers, the coordinator would "
         "trace only its dispatching; set it to 0", lambda s: s.train.profile_steps),
    Rule("train.simultaneous", PS, "every asynchronous G closure already reads whichever D "
         "the servers hold; set it to False", lambda s: s.train.simultaneous),
    Rule("penalties.lecam_weight", PS, "its moving averages would be read and written by "
         "concurrent D closures; set it to 0", lambda s: s.penalties.lecam_weight),
    Rule("augment.ada_target", PS, "ADA's p and r_t would be read and written by concurrent "
         "D closures; use augment.policy (DiffAugment)", lambda s: s.augment.ada_target),
]


def refuse(settings, strategy_kind: str) -> None:
    """Raises ConfigError naming the first rule the run (train/settings.py's Settings) breaks
    under `strategy_kind`."""
    for rule in RULES:
        rule.check(settings, strategy_kind)


def table() -> str:
    """The Markdown table of docs/configuration.md: these rules and the parallel modes'."""
    rows = [(r.setting + (f" with {r.condition}" if r.condition else ""), r.kind, r.why)
            for r in RULES]
    for mode_class in model_parallel.MODES:
        setting, kinds = mode_class.choosing, mode_class.strategies
        rows.append((setting, ", ".join(k for k in strategy_lib.KINDS if k not in kinds),
                     f"available under {', '.join(kinds)} only (distribute/model_parallel.py)"))
    lines = ["| setting | refused under strategy.kind | why |", "| --- | --- | --- |"]
    lines += [f"| `{setting}` | {kind} | {why} |" for setting, kind, why in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
