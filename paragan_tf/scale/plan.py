"""The scale plan: time, memory and efficiency of a run per device kind and count.

For an experiment and a target (a catalogue device, scale/devices.py, times a
count N) the plan works out, per replica:

- batch and accumulation: the effective batch of one update (train.batch_size x
  train.accumulation, the recipe's) split N ways, then into the fewest
  micro-batches whose memory (scale/memory.py's plan at the device's
  precision) fits the device, first without recompute, then with it;
- seconds per train step, in parts:
    compute     the step's FLOPs at that micro-batch (scale/flops.py) /
                (device peak at the precision x the efficiency: given in gin,
                measured on that device kind, else the family's fit:
                scale/devices.py, scale/measured.py); where the catalogue has the
                step model's constants for the family and precision (and neither a
                gin efficiency nor a measurement of another network ranks above
                them), the step's ops costed by that model instead
                (scale/step_model.py; scaled to a step of this network measured
                on the device), the efficiency then being the share of the peak
                that reaches
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
- the model-parallel modes (`modes`, scale/modes.py): each mode's memory per device,
  micro-batches and extra traffic per step, and the mode the target needs.

Every number it assumes is named: the device catalogue and efficiencies in
scale/devices.py, the rest in `Assumptions` (gin: `plan.*`). docs/scale.md
explains how to read a plan and how far it is from published runs.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional, Tuple

import gin

from paragan_tf.distribute import mode as mode_lib
from paragan_tf.errors import ConfigError
from paragan_tf.scale import devices as devices_lib
from paragan_tf.scale import flops as flops_lib
from paragan_tf.scale import memory as memory_lib
from paragan_tf.scale import modes as modes_lib
from paragan_tf.scale import roofline as roofline_lib
from paragan_tf.scale import step_model as step_model_lib

GRADIENT_BYTES = mode_lib.GRADIENT_BYTES


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
    reuses_fakes: bool = False  # G's update takes D's images (the objective's: FLOPs)
    # Per network, its blocks' (in channels, out channels, output side) and their
    # estimated bytes at PLAN_BATCH examples (families/biggan/networks.py): the stages' balance.
    g_blocks: Tuple[tuple, ...] = ()
    d_blocks: Tuple[tuple, ...] = ()
    g_block_costs: Tuple[float, ...] = ()
    d_block_costs: Tuple[float, ...] = ()
    # Per resolved precision, the step's ops with their FLOPs and bytes (scale/roofline.py):
    # what the step model costs where the catalogue has its constants.
    roofline: Dict[str, roofline_lib.StepCost] = dataclasses.field(default_factory=dict)
    # Which network it is (scale/measured.py's `network` of its step shape): a step
    # measured on a device of this network scales the step model there.
    network: Dict[str, object] = dataclasses.field(default_factory=dict)


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
    constants = (catalogue.step_model_of(device, precision, model.network,
                                         model.roofline[precision])
                 if precision in model.roofline else None)
    efficiency, efficiency_source = ((None, f"step model {constants[1]}") if constants else
                                     catalogue.efficiency_of(device, precision))
    memory = model.memory[precision]
    budget = int(device.memory_gib * memory_lib.GIB)
    fitted = memory.fit(examples, budget)
    modes = modes_lib.plan_modes(model, memory, count, examples, budget)
    mode, why = modes_lib.mode_needed(fitted, modes)
    row = dict(target=target, device=device.name, count=count, precision=precision,
               peak_tflops_per_device=peak, efficiency=efficiency,
               efficiency_source=efficiency_source,
               examples_per_replica=examples, memory_gib_per_device=device.memory_gib,
               modes=dict({name: plan.as_dict() for name, plan in modes.items()},
                          needed=mode, why=why))
    split_advice = ([f"memory: {modes[mode].setting} ({why}; "
                     f"{modes[mode].extra_mib_per_step:.0f} MiB more traffic per step)"]
                    if mode in modes else [])
    if fitted is None:
        row.update(fits=False, bottleneck="memory",
                   advice=split_advice or
                   ["memory: one example per replica does not fit even with "
                    "train.recompute=True: a device with more memory, or a smaller "
                    "model"])
        return row
    accumulation, micro, recompute = fitted
    step_flops = model.flops.at(micro).train_step(model.d_steps, accumulation,
                                                  model.reuses_fakes)
    regime = band = None
    if constants:  # the step's ops on this device (scale/step_model.py)
        point = step_model_lib.Point(target, model.roofline[precision], micro, accumulation,
                                     model.d_steps, peak * 1e12, device.memory_gbps * 1e9, 0.0)
        compute = step_model_lib.seconds(constants[0], point)
        regime = step_model_lib.regime(constants[0], point)
        efficiency = step_flops / (peak * 1e12 * compute)  # the share of the peak it reaches
        if constants[1].startswith("fitted"):  # the catalogue's: its measured error band
            band = list(devices_lib.STEP_MODEL_BAND)
    else:
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
    caveat = (devices_lib.caveat(device, precision) if efficiency_source.startswith("fitted")
              else devices_lib.STEP_MODEL_CAVEAT if efficiency_source.startswith(
                  "step model fitted") else None)
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
        efficiency=efficiency, regime=regime, model_band=band,
        wall_clock_hours=seconds / 3600,
        device_hours=seconds * count / 3600,
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
            f"bound by {row['bottleneck']}"
            + (f" ({row['regime']} step)" if row.get("regime") else "")
            + f"; efficiency {row['efficiency']:.3g} "
            f"({row['efficiency_source'].split(': ')[0].split(' (')[0]})"
            + (f", modelled {row['model_band'][0]:.2f}-{row['model_band'][1]:.2f}x of the "
               f"measured steps it was fitted and checked on" if row.get("model_band")
               else ""))


def calibrate(model: Model, device: devices_lib.Device, count: int, step_seconds: float,
              catalogue: devices_lib.Catalogue, assumptions: Assumptions) -> float:
    """The family's efficiency at which the plan's step for `count` x `device` takes
    `step_seconds` (a published run's): step = (compute at 1 / e + all-reduce) x wait."""
    precision = device.auto_precision() if model.precision == "auto" else model.precision
    key = (device.family, precision)
    ideal = dataclasses.replace(catalogue, given={**catalogue.given, key: 1.0})
    row = plan_target(model, device, count, ideal, assumptions)
    seconds = row["seconds"]
    if not row.get("fits") or row["bottleneck"] == "input":
        raise ConfigError(f"{row['target']}: cannot calibrate compute on a run the plan "
                          f"finds bound by {row['bottleneck']}")
    wait = 1 + seconds["straggler_wait"] / (seconds["compute"] + seconds["all_reduce_exposed"])
    return seconds["compute"] / (step_seconds / wait - seconds["all_reduce_exposed"])
