"""The model-parallel modes of the scale plan (scale/plan.py): per target, each mode's
memory per device, the fewest micro-batches that fit and its extra traffic per step:

  shard    Adam's moments 1/N per replica (model_parallel.shard_optimizer,
           distribute/sharded_adam.py); the new weights are all-gathered after every update,
           (N-1)/N of the network's float32 bytes;
  split    each replica spans two devices, G and EMA G on one and D on the other
           (model_parallel.placement='split', distribute/mode.py): count / 2 replicas,
           G's images moved to D and their gradients back;
  stagesS  the split with each network's blocks in S pipeline stages (S in STAGES;
           model_parallel.stages, distribute/staging.py): count / 2S replicas, each stage
           boundary's activations moved forward and their gradients back;

and the mode the target needs: the first of data parallelism, shard, split and the stages
that fits without recompute, else with it (each later one costs more traffic). The
split's and the stages' step time is not planned: it depends on how far the devices' work
overlaps, which has not been measured on accelerators here.

`model` arguments are scale/plan.py's Model.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Tuple

from paragan_tf.distribute import staging
from paragan_tf.scale import memory as memory_lib

GRADIENT_BYTES = 4  # gradients are all-reduced in float32 under every layout
PLAN_BATCH = 16  # examples per replica at which the stages' balance is estimated
STAGES = (2, 4)  # pipeline stages per network the plan considers


def plan_modes(model, memory: memory_lib.Plan, count: int, examples: int,
               budget_bytes: int) -> Dict[str, dict]:
    """Each mode's plan on `count` devices of `budget_bytes`, `examples` per device."""
    modes = {"shard": shard_mode(model, memory, count, examples, budget_bytes),
             "split": split_mode(model, memory, count, budget_bytes) if memory.sides else {}}
    modes.update({f"stages{k}": stages_mode(model, memory, count, k, budget_bytes)
                  for k in STAGES})
    return modes


def fit(memory: memory_lib.Plan, examples: int, budget_bytes: int
        ) -> Optional[Tuple[int, int, bool]]:
    """(accumulation, micro-batch, recompute): the fewest micro-batches that fit, without
    recompute if possible; None if one example does not fit even with recompute."""
    return _fewest(examples, lambda accumulation, micro, recompute: dataclasses.replace(
        memory, accumulation=accumulation).total_bytes(micro, recompute) <= budget_bytes)


def _fewest(examples: int, fits) -> Optional[Tuple[int, int, bool]]:
    """The first (accumulation, micro-batch, recompute) that `fits`, fewest micro-batches
    first, without recompute before with it; None if none does."""
    divisors = [a for a in range(1, examples + 1) if examples % a == 0]
    for recompute in (False, True):
        for accumulation in divisors:
            if fits(accumulation, examples // accumulation, recompute):
                return accumulation, examples // accumulation, recompute
    return None


def _side_bytes(memory: memory_lib.Plan, accumulation: int, micro: int,
                recompute: bool) -> Dict[str, int]:
    return {side: dataclasses.replace(plan, accumulation=accumulation).total_bytes(
        micro, recompute) for side, plan in memory.sides.items()}


def fit_split(memory: memory_lib.Plan, examples: int, budget_bytes: int
              ) -> Optional[Tuple[int, int, bool, Dict[str, int]]]:
    """As `fit`, with G's side and D's side of the plan each on a device of its own:
    (accumulation, micro-batch, recompute, {side: bytes}) or None."""
    fitted = _fewest(examples, lambda *at: max(_side_bytes(memory, *at).values())
                     <= budget_bytes)
    return None if fitted is None else (*fitted, _side_bytes(memory, *fitted))


def split_mode(model, memory: memory_lib.Plan, count: int, budget_bytes: int
               ) -> dict:
    """The split placement on `count` devices: count / 2 replicas of two devices."""
    if count % 2 or model.effective_batch % (count // 2):
        return dict(possible=False, why=f"{count} device(s) do not make replicas of two "
                                        f"that split the effective batch "
                                        f"{model.effective_batch}")
    examples = model.effective_batch // (count // 2)
    fitted = fit_split(memory, examples, budget_bytes)
    if fitted is None:
        return dict(possible=True, fits=False, replicas=count // 2)
    accumulation, micro, recompute, sides = fitted
    # Per micro-batch: G's images to D for each D update, then for G's update the images
    # to D and their gradients back.
    transfers = (model.d_steps + 2) * accumulation * micro
    return dict(possible=True, fits=True, replicas=count // 2, accumulation=accumulation,
                micro_batch=micro, recompute=recompute,
                memory_gib_per_device={side: round(b / memory_lib.GIB, 2)
                                       for side, b in sides.items()},
                extra_mib_per_step=transfers * model.image_bytes / 2 ** 20)


def shard_mode(model, memory: memory_lib.Plan, count: int, examples: int,
               budget_bytes: int) -> dict:
    """Adam's moments 1/count per replica: the fit and the all-gather's bytes per step."""
    sharded = dataclasses.replace(memory, optimizer_bytes=memory.optimizer_bytes // count)
    fitted = fit(sharded, examples, budget_bytes)
    if fitted is None:
        return dict(fits=False)
    accumulation, micro, recompute = fitted
    gathered = GRADIENT_BYTES * (model.d_steps * model.d_params + model.g_params)
    return dict(fits=True, accumulation=accumulation, micro_batch=micro, recompute=recompute,
                memory_gib_per_device=round(dataclasses.replace(
                    sharded, accumulation=accumulation).total_bytes(micro, recompute)
                    / memory_lib.GIB, 2),
                extra_mib_per_step=(count - 1) / count * gathered / 2 ** 20)


def stages_mode(model, memory: memory_lib.Plan, count: int, stages: int,
                budget_bytes: int) -> dict:
    """G's and D's blocks in `stages` stages each, on devices of their own (2 x stages
    devices per replica): each side's plan times its largest stage's share of the side's
    estimated bytes (staging.balance on the blocks' costs), and the activations crossing
    stage boundaries (one forward and its gradient back per pass of a network)."""
    per_replica = 2 * stages
    if not memory.sides or count % per_replica or \
            model.effective_batch % (count // per_replica) or \
            min(len(model.g_block_costs), len(model.d_block_costs)) < stages:
        return dict(possible=False, why=f"{count} device(s) do not make replicas of "
                                        f"{per_replica} that split the effective batch, or "
                                        f"a network has fewer blocks than {stages} stages")
    shares, boundaries = {}, {}
    for side, costs, blocks in (("G", model.g_block_costs, model.g_blocks),
                                ("D", model.d_block_costs, model.d_blocks)):
        stage_of = staging.balance(costs, stages)
        totals = [sum(c for c, s in zip(costs, stage_of) if s == k) for k in range(stages)]
        shares[side] = max(totals) / sum(totals)
        # The output of each stage's last block crosses to the next stage.
        boundaries[side] = sum(4 * cout * size * size for (_, cout, size), s, nxt in zip(
            blocks, stage_of, list(stage_of[1:]) + [stage_of[-1]]) if nxt != s)
    examples = model.effective_batch // (count // per_replica)
    divisors = [a for a in range(1, examples + 1) if examples % a == 0]
    for recompute in (False, True):
        for accumulation in divisors:
            micro = examples // accumulation
            sides = {side: dataclasses.replace(plan.share(shares[side]),
                                               accumulation=accumulation
                                               ).total_bytes(micro, recompute)
                     for side, plan in memory.sides.items()}
            if max(sides.values()) <= budget_bytes:
                # G: d_steps + 1 forwards, one backward; D: d_steps updates on real and
                # fake (twice the batch) and one for G's update, each forward and backward.
                passes = {"G": model.d_steps + 2, "D": 2 * (2 * model.d_steps + 1)}
                moved = sum(passes[side] * boundaries[side] for side in passes)
                return dict(possible=True, fits=True, replicas=count // per_replica,
                            stages=stages, accumulation=accumulation, micro_batch=micro,
                            recompute=recompute,
                            memory_gib_per_device={side: round(b / memory_lib.GIB, 2)
                                                   for side, b in sides.items()},
                            extra_mib_per_step=(moved * micro * accumulation / 2 ** 20 +
                                                (model.d_steps + 2) * accumulation * micro
                                                * model.image_bytes / 2 ** 20))
    return dict(possible=True, fits=False, replicas=count // per_replica, stages=stages)


def mode_needed(data: Optional[Tuple[int, int, bool]], modes: Dict[str, dict]
                ) -> Tuple[str, str]:
    """(mode, why): the first of data parallelism and `modes` (in their order: each
    costs more traffic than the one before) that fits without recompute, else the first
    that fits with it; 'none' when nothing fits."""
    needs = {"data": None if data is None else data[2]}  # recompute, or None: no fit
    needs.update({name: mode["recompute"] if mode.get("fits") else None
                  for name, mode in modes.items()})
    for recompute in (False, True):
        for name, needed in needs.items():
            if needed is recompute:
                return name, (f"the first of {', '.join(needs)} that fits "
                              f"{'only with' if recompute else 'without'} recompute")
    return "none", "nothing fits, even with recompute"


def describe_modes(row: dict) -> str:
    """One line: the placement `row`'s target needs and why, and each mode's memory."""
    modes, shown = row["modes"], []
    for name, mode in modes.items():
        if name in ("needed", "why") or not mode:
            continue
        if mode.get("possible") is False:
            shown.append(f"{name}: not possible")
        elif not mode["fits"]:
            shown.append(f"{name}: does not fit")
        else:
            gib = mode["memory_gib_per_device"]
            memory = (f"{gib:.1f} GiB" if name == "shard" else
                      f"G's device(s) {gib['G']:.1f} GiB, D's {gib['D']:.1f} GiB")
            shown.append(f"{name}: {mode['accumulation']} x {mode['micro_batch']}"
                         f"{' with recompute' if mode['recompute'] else ''}, {memory}, "
                         f"{mode['extra_mib_per_step']:.0f} MiB more per step")
    return f"placement: {modes['needed']} ({modes['why']}); " + "; ".join(shown)
