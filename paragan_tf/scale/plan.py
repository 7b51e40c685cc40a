"""The scale plan: time, memory and efficiency of a run per device kind and count.

For an experiment and a target (a catalogue device, scale/devices.py, times a
count N) the plan works out, per replica:

- batch and accumulation: the effective batch of one update (train.batch_size x
  train.accumulation, the recipe's) split N ways, then into the fewest
  micro-batches whose memory (scale/memory.py's plan at the device's
  precision) fits the device, first without recompute, then with it;
- seconds per train step, in parts:
    compute     the step's FLOPs at that micro-batch (scale/flops.py) /
                (device peak at the precision x the family's efficiency)
    all-reduce  every update all-reduces its network's float32 gradients once
                (d_steps x D + G per step): ring 2(N-1)/N x bytes / bandwidth,
                or hierarchical (a ring inside each host over its fast links,
                then one across hosts over the NICs, each device carrying
                1/per_host of the bytes); `overlap` of it hidden under compute
    input       real images per step / (input hosts x images/s one host supplies);
                the pipeline prefetches, so the step takes the larger of this
                and compute + exposed all-reduce
    stragglers  a synchronous step waits for its slowest replica: with each
                replica slowed `straggler_slowdown`-fold on a fraction
                `straggler_probability` of its steps, the expected step is
                1 + (s-1)(1-(1-p)^N) times longer; the asynchronous variant
                (parameter servers) pays only the mean, 1 + (s-1)p: its
                `async_gain` (before any cost of stale gradients, which this
                plan does not model);
- weak-scaling efficiency: the replica's own compute (with its own mean
  straggling) over the step, i.e. throughput at N over N x one replica's;
- wall clock and device-hours to train.total_steps;
- the bottleneck (the largest part) and what to change;
- the model-parallel modes (`modes`), each with the fewest micro-batches that fit and its
  extra traffic per step:
    shard  Adam's moments 1/N per replica (model_parallel.shard_optimizer,
           train/sharded_adam.py); the new weights are all-gathered after every update,
           (N-1)/N of the network's float32 bytes;
    split  each replica spans two devices, G and EMA G on one and D on the other
           (model_parallel.placement='split', distribute/placement.py): count / 2 replicas,
           G's images moved to D and their gradients back;
    stagesS the split with each network's blocks in S pipeline stages (S in STAGES;
           model_parallel.stages, models/staging.py): count / 2S replicas, each stage
           boundary's activations moved forward and their gradients back;
  and the mode the target needs: the first of data parallelism, shard, split and the
  stages that fits without recompute, else with it (each later one costs more traffic).
  The split's and the stages' step time is not planned: it depends on how far the
  devices' work overlaps, which has not been measured on accelerators here.

Every number it assumes is named: the device catalogue and efficiencies in
scale/devices.py, the rest in `Assumptions` (gin: `plan.*`). docs/scale.md
explains how to read a plan and how far it is from published runs.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional, Tuple

import gin

from paragan_tf.errors import ConfigError
from paragan_tf.scale import devices as devices_lib
from paragan_tf.scale import flops as flops_lib
from paragan_tf.scale import memory as memory_lib

GRADIENT_BYTES = 4  # gradients are all-reduced in float32 under every layout


@gin.configurable("plan")
@dataclasses.dataclass(frozen=True)
class Assumptions:
    """The plan's named numbers beyond the catalogue (see the module doc)."""

    all_reduce: str = "hierarchical"  # or "ring"
    # Our synchronous step all-reduces after the backward pass (train/step.py), so
    # nothing is hidden; 0.5-0.9 is typical of frameworks that overlap by buckets.
    overlap: float = 0.0
    # One replica-step in 10,000 at half speed: our reading, not a measurement (we have
    # no cluster traces); it costs 8 V100 0.08 % and 1,024 replicas 10 %.
    # bin/bench.py --suite=straggler measures what one slow worker does to a run here.
    # ParaGAN's 91 % at 1,024 TPU cores is met only for 1.6e-5 to 1.4e-4
    # (tests/scale/test_plan.py): that check rests on this reading, it does not confirm it.
    straggler_probability: float = 1e-4
    straggler_slowdown: float = 2.0

    def __post_init__(self):
        if self.all_reduce not in ("ring", "hierarchical"):
            raise ConfigError(f"plan.all_reduce={self.all_reduce!r}: ring or hierarchical")
        if not 0.0 <= self.overlap <= 1.0 or not 0.0 <= self.straggler_probability <= 1.0:
            raise ConfigError("plan.overlap and plan.straggler_probability must be in [0, 1]")
        if self.straggler_slowdown < 1.0:
            raise ConfigError("plan.straggler_slowdown must be >= 1")


@dataclasses.dataclass
class Model:
    """What the plan needs of an experiment, device-independent (one per precision)."""

    precision: str  # layout.precision as configured: 'auto' is resolved per device
    memory: Dict[str, memory_lib.Plan]  # per resolved precision
    flops: flops_lib.PerExample
    g_params: int
    d_params: int
    effective_batch: int
    d_steps: int
    total_steps: int
    image_bytes: int = 0  # one generated image in float32: what a split moves per example
    # Per network, its blocks' (in channels, out channels, output side) and their
    # estimated bytes at PLAN_BATCH examples (models/biggan.py): the stages' balance.
    g_blocks: Tuple[tuple, ...] = ()
    d_blocks: Tuple[tuple, ...] = ()
    g_block_costs: Tuple[float, ...] = ()
    d_block_costs: Tuple[float, ...] = ()


PLAN_BATCH = 16  # examples per replica at which the stages' balance is estimated
STAGES = (2, 4)  # pipeline stages per network the plan considers


def detected_line(model: Model, accelerator: str, replicas: int) -> str:
    """--dry_run's one line: the plan of this run (`model`, at its one precision) on the
    hardware it was built on (layout.Hardware.accelerator, the strategy's replicas)."""
    device = devices_lib.detected(accelerator)
    if device is None:
        return (f"no catalogue row for this {accelerator}: "
                f"bin/plan.py --custom_device plans it")
    count = 1 if device.family == "cpu" else replicas
    try:
        row = plan_target(model, device, count, devices_lib.catalogue(), Assumptions())
    except ConfigError as e:
        return f"no plan: {str(e).splitlines()[0]}"
    return describe(row)


def parse_target(text: str) -> Tuple[str, int]:
    """'v100x8' -> ('v100', 8)."""
    name, x, count = text.rpartition("x")
    if not x or not name or not count.isdigit() or int(count) < 1:
        raise ConfigError(f"--devices entry {text!r}: write <device>x<count>, e.g. v100x8")
    return name, int(count)


def all_reduce_seconds(nbytes: float, count: int, device: devices_lib.Device,
                       algorithm: str) -> float:
    """Seconds to all-reduce `nbytes` over `count` devices (see the module doc)."""
    if count == 1:
        return 0.0
    per_host = min(device.per_host, count)
    hosts = math.ceil(count / per_host)
    if (hosts > 1 and not device.inter_gbps) or not device.intra_gbps:
        raise ConfigError(f"{device.name}: no interconnect bandwidth in the catalogue for "
                          f"{count} devices")
    if algorithm == "ring":
        slowest = device.inter_gbps if hosts > 1 else device.intra_gbps
        return 2 * (count - 1) / count * nbytes / (slowest * 1e9)
    inside = 2 * (per_host - 1) / per_host * nbytes / (device.intra_gbps * 1e9)
    across = (2 * (hosts - 1) / hosts * nbytes / per_host / (device.inter_gbps * 1e9)
              if hosts > 1 else 0.0)
    return inside + across


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


def split_mode(model: Model, memory: memory_lib.Plan, count: int, budget_bytes: int
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


def shard_mode(model: Model, memory: memory_lib.Plan, count: int, examples: int,
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


def stages_mode(model: Model, memory: memory_lib.Plan, count: int, stages: int,
                budget_bytes: int) -> dict:
    """G's and D's blocks in `stages` stages each, on devices of their own (2 x stages
    devices per replica): each side's plan times its largest stage's share of the side's
    estimated bytes (staging.balance on the blocks' costs), and the activations crossing
    stage boundaries (one forward and its gradient back per pass of a network)."""
    # pylint: disable=import-outside-toplevel
    from paragan_tf.models import staging
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


def _advice(bottleneck: str, device: devices_lib.Device, precision: str, recompute: bool,
            accumulation: int, async_gain: float) -> List[str]:
    advice = []
    if bottleneck == "compute" and precision == "float32" and device.peak_bf16_tflops:
        advice.append("compute-bound at float32 on a device with a bfloat16 unit: "
                      "gin/layouts/auto.gin (mixed_bfloat16)")
    if bottleneck == "all-reduce":
        advice.append("all-reduce-bound: fewer, fuller devices (a larger per-replica "
                      "batch amortises each all-reduce), or the asynchronous variant "
                      "(gin/async_ps.gin) which drops the barrier")
    if bottleneck == "input":
        advice.append("input-bound: decode once with bin/prepare_dataset.py (records; "
                      "--group_by_class shards for per-class runs), then more readers "
                      "(input_pipeline.service_workers, input_pipeline.read_parallelism)")
    if bottleneck == "stragglers" or async_gain > 1.1:
        advice.append(f"stragglers cost {async_gain:.2f}x: the asynchronous variant "
                      "(gin/async_ps.gin) waits for none")
    if recompute:
        advice.append("memory: fits only with train.recompute=True (rematerialised blocks, "
                      "~1/3 more compute)")
    if accumulation > 1:
        advice.append(f"memory: {accumulation} micro-batches per update "
                      f"(train.accumulation={accumulation}) keep the recipe's batch")
    return advice


def plan_target(model: Model, device: devices_lib.Device, count: int,
                catalogue: devices_lib.Catalogue, assumptions: Assumptions) -> dict:
    """The plan for `count` devices of kind `device` (see the module doc)."""
    target = f"{device.name}x{count}"
    precision = device.auto_precision() if model.precision == "auto" else model.precision
    peak = device.peak_tflops(precision)
    if not peak:
        raise ConfigError(f"{target}: {device.name} has no {precision} unit; set "
                          f"layout.precision to 'auto' or 'float32'")
    if device.family == "cpu" and count > 1:
        raise ConfigError(f"{target}: this_cpu is one machine; plan several with a custom "
                          f"device (bin/plan.py --custom_device)")
    if model.effective_batch % count:
        raise ConfigError(f"{target}: the effective batch {model.effective_batch} (train."
                          f"batch_size x train.accumulation) does not split over {count} "
                          f"devices")
    examples = model.effective_batch // count
    efficiency = catalogue.efficiency(device, precision)
    memory = model.memory[precision]
    budget = int(device.memory_gib * memory_lib.GIB)
    fitted = fit(memory, examples, budget)
    modes = {"shard": shard_mode(model, memory, count, examples, budget),
             "split": split_mode(model, memory, count, budget) if memory.sides else {}}
    modes.update({f"stages{k}": stages_mode(model, memory, count, k, budget) for k in STAGES})
    mode, why = mode_needed(fitted, modes)
    row = dict(target=target, device=device.name, count=count, precision=precision,
               peak_tflops_per_device=peak, efficiency=efficiency,
               examples_per_replica=examples, memory_gib_per_device=device.memory_gib,
               modes=dict(modes, needed=mode, why=why))
    settings = {"shard": "model_parallel.shard_optimizer=True",
                "split": "model_parallel.placement='split'",
                **{f"stages{k}": f"model_parallel.placement='split', model_parallel.stages={k}"
                   for k in STAGES}}
    split_advice = ([f"memory: {settings[mode]} ({why}; "
                     f"{modes[mode]['extra_mib_per_step']:.0f} MiB more traffic per step)"]
                    if mode in modes else [])
    if fitted is None:
        row.update(fits=False, bottleneck="memory",
                   advice=split_advice or
                   ["memory: one example per replica does not fit even with "
                    "train.recompute=True: a device with more memory, or a smaller "
                    "model"])
        return row
    accumulation, micro, recompute = fitted
    step_flops = model.flops.at(micro).train_step(model.d_steps, accumulation)
    compute = step_flops / (peak * 1e12 * efficiency)
    if recompute:  # rematerialised blocks run their forward twice
        compute *= 4 / 3
    gradient_bytes = GRADIENT_BYTES * (model.d_steps * model.d_params + model.g_params)
    all_reduce = all_reduce_seconds(gradient_bytes, count, device, assumptions.all_reduce)
    exposed = (1 - assumptions.overlap) * all_reduce
    hosts = math.ceil(count / device.per_input_host)
    real_images = model.d_steps * model.effective_batch
    input_seconds = real_images / (hosts * device.input_per_host)
    p, s = assumptions.straggler_probability, assumptions.straggler_slowdown
    sync_wait = 1 + (s - 1) * (1 - (1 - p) ** count)
    mean_wait = 1 + (s - 1) * p
    synchronous = (compute + exposed) * sync_wait
    step = max(synchronous, input_seconds)
    asynchronous = max((compute + exposed) * mean_wait, input_seconds)
    parts = {"compute": compute, "all-reduce": exposed, "input": input_seconds,
             "stragglers": (compute + exposed) * (sync_wait - 1)}
    bottleneck = max(parts, key=parts.get)
    async_gain = step / asynchronous
    seconds = model.total_steps * step
    caveat = devices_lib.CAVEATS.get((device.family, precision))
    row.update(
        fits=True, accumulation=accumulation, micro_batch=micro, recompute=recompute,
        memory_gib_per_replica=round(
            dataclasses.replace(memory, accumulation=accumulation).total_bytes(
                micro, recompute) / memory_lib.GIB, 2),
        train_step_tflop_per_device=step_flops / 1e12,
        seconds=dict(compute=compute, all_reduce=all_reduce, all_reduce_exposed=exposed,
                     input=input_seconds, straggler_wait=parts["stragglers"], step=step),
        gradient_mib_per_step=gradient_bytes / 2 ** 20, hosts=hosts,
        input_images_per_sec=real_images / step,
        weak_scaling_efficiency=compute * mean_wait / step,
        async_gain=async_gain, total_steps=model.total_steps,
        wall_clock_hours=seconds / 3600, device_hours=seconds * count / 3600,
        bottleneck=bottleneck,
        advice=_advice(bottleneck, device, precision, recompute, accumulation, async_gain)
        + split_advice + ([f"caveat: {caveat}"] if caveat else []))
    return row


def describe(row: dict) -> str:
    """One line per plan row, for the terminal and --dry_run."""
    if not row.get("fits"):
        return f"{row['target']}: does not fit ({'; '.join(row['advice'])})"
    sec = row["seconds"]
    return (f"{row['target']} {row['precision']}: {row['examples_per_replica']}/replica as "
            f"{row['accumulation']} x {row['micro_batch']}"
            f"{' with recompute' if row['recompute'] else ''}, "
            f"{row['memory_gib_per_replica']:.1f}/{row['memory_gib_per_device']:g} GiB; "
            f"{sec['step']:.3g} s/step (compute {sec['compute']:.3g}, all-reduce "
            f"{sec['all_reduce_exposed']:.3g}, input {sec['input']:.3g}); weak-scaling "
            f"efficiency {row['weak_scaling_efficiency']:.0%}; {row['total_steps']:,} steps "
            f"in {row['wall_clock_hours']:.3g} h, {row['device_hours']:,.0f} device-hours; "
            f"bound by {row['bottleneck']}")


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


def calibrate(model: Model, device: devices_lib.Device, count: int, step_seconds: float,
              catalogue: devices_lib.Catalogue, assumptions: Assumptions) -> float:
    """The family's efficiency at which the plan's step for `count` x `device` takes
    `step_seconds` (a published run's): step = (compute at 1 / e + all-reduce) x wait."""
    precision = device.auto_precision() if model.precision == "auto" else model.precision
    ideal = dataclasses.replace(catalogue, efficiencies={
        **catalogue.efficiencies, (device.family, precision): 1.0})
    row = plan_target(model, device, count, ideal, assumptions)
    seconds = row["seconds"]
    if not row.get("fits") or row["bottleneck"] == "input":
        raise ConfigError(f"{row['target']}: cannot calibrate compute on a run the plan "
                          f"finds bound by {row['bottleneck']}")
    wait = 1 + seconds["straggler_wait"] / (seconds["compute"] + seconds["all_reduce_exposed"])
    return seconds["compute"] / (step_seconds / wait - seconds["all_reduce_exposed"])
