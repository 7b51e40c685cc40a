"""The model-parallel modes in the scale plan (scale/plan.py): per target, each mode's plan
(memory per device, the fewest micro-batches that fit, the traffic it adds per step), which
each mode makes itself (`Mode.plan`, distribute/mode.py), and the mode the target needs: the
first of data parallelism and the planned modes (distribute/model_parallel.py's `PLANNED`: the
sharded optimizer state, the split, the split in stages) that fits without recompute, else
with it; each later one costs more traffic. The split's and the stages' step time is not
planned: it depends on how far the devices' work overlaps, which has not been measured on
accelerators here.

`model` arguments are scale/plan.py's Model.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from paragan_tf.distribute import mode as mode_lib
from paragan_tf.distribute import model_parallel
from paragan_tf.scale import memory as memory_lib

DATA = mode_lib.Mode()  # data parallelism alone


def plan_modes(model, memory: memory_lib.Plan, count: int, examples: int,
               budget_bytes: int) -> Dict[str, mode_lib.ModePlan]:
    """Each planned mode's plan on `count` devices of `budget_bytes`, `examples` per
    device, by name."""
    return {mode.name: mode.plan(model, memory, count, examples, budget_bytes)
            for mode in model_parallel.PLANNED}


def mode_needed(data: Optional[Tuple[int, int, bool]], modes: Dict[str, mode_lib.ModePlan]
                ) -> Tuple[str, str]:
    """(mode, why): the first of data parallelism (`data`: its fit, or None) and `modes`
    (in their order) that fits without recompute, else the first that fits with it;
    'none' when nothing fits."""
    needs = {DATA.name: None if data is None else data[2]}  # recompute, or None: no fit
    needs.update({name: mode.recompute if mode.fits else None
                  for name, mode in modes.items()})
    for recompute in (False, True):
        for name, needed in needs.items():
            if needed is recompute:
                return name, (f"the first of {', '.join(needs)} that fits "
                              f"{'only with' if recompute else 'without'} recompute")
    return "none", "nothing fits, even with recompute"


def describe_modes(row: dict) -> str:
    """One line: the mode `row`'s target needs and why, and each planned mode's memory."""
    modes, shown = row["modes"], []
    for name, mode in modes.items():
        if name in ("needed", "why"):
            continue
        if not mode["possible"]:
            shown.append(f"{name}: not possible")
        elif not mode["fits"]:
            shown.append(f"{name}: does not fit")
        else:
            memory = ", ".join(f"{where} {gib:.1f} GiB"
                               for where, gib in mode["memory_gib_per_device"].items())
            shown.append(f"{name}: {mode['accumulation']} x {mode['micro_batch']}"
                         f"{' with recompute' if mode['recompute'] else ''}, {memory}, "
                         f"{mode['extra_mib_per_step']:.0f} MiB more per step")
    return f"placement: {modes['needed']} ({modes['why']}); " + "; ".join(shown)
