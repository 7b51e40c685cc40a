"""The memory plan of a run: what one replica holds, from the models and a traced step.

At 512-1024 px the activations kept for the backward pass decide what fits,
not the weights. The plan counts, per replica:

- parameters: every variable of G and D (float32 master weights);
- optimizer state: the optimizers' slot variables (Adam: two per weight);
- EMA: the EMA generator's variables;
- the step: the peak of the tensors alive during D's update (G's forward for
  the fakes, D on real + fake, D's backward) and during G's update (G then D
  forward, backward into G), found by tracing each update (nothing runs) and
  replaying its graph in program order: every op allocates its outputs, and a
  buffer is freed after its last reader (ops that only relabel a buffer, such
  as Identity or Reshape, share their input's). That covers the activations
  kept for the backward pass, the gradients in flight and, with recompute,
  the insides of the block being recomputed. The network's gradients are
  outputs, alive to the end; with accumulation their running sum is added.

Tensors grow linearly with the per-replica batch: the updates are traced
(measure/traced.py) at a batch of PROBE_BATCH examples, tensors whose leading axis
is that batch (or the real+fake concatenation, twice it) are per-example, the rest
fixed, so the peak at any batch is the maximum over the replay of fixed +
per-example x batch. The largest batch that fits a memory budget follows. What the replay
does not see (the runtime's scratch buffers and reordered copies, an executor
running independent ops at once) is the measured RUNTIME_FACTOR (scale/calibration.py:
its machine, date and command); benchmarks/memory.py measures the real peak beside this
estimate.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from paragan_tf.distribute import strategy as strategy_lib
from paragan_tf.distribute.mode import GIB, fewest
from paragan_tf.scale import calibration
from paragan_tf.scale import graphs as graphs_lib

PROBE_BATCH = graphs_lib.PROBE_BATCH
# The runtime holds more than the replayed live bytes (oneDNN's reordered copies of conv
# inputs and weights, the next update's ops started while the last one finishes): a
# factor measured on one CPU, calibration.TABLE["runtime_factor"] says which and how
# (`bin/bench.py --suite=memory` re-measures it); GPUs and TPUs have other runtimes, so
# treat it as a CPU figure.
RUNTIME_FACTOR = calibration.RUNTIME_FACTOR
SIDE_DEVICES = graphs_lib.SIDE_DEVICES  # the device labels of G's and D's ops
# Ops whose output is their first input's buffer (no allocation).
_ALIASES = graphs_lib.ALIASES
# Ops whose outputs are not activations: variable storage (counted as parameters).
_NO_BUFFER = {"ReadVariableOp", "VarHandleOp", "Const", "NoOp", "AssignVariableOp",
              "AssignAddVariableOp", "AssignSubVariableOp"}


def _bytes(tensor: tf.Tensor) -> int:
    shape = tensor.shape
    if tensor.dtype in (tf.resource, tf.variant) or not shape.is_fully_defined():
        return 0
    return shape.num_elements() * tensor.dtype.size


@dataclasses.dataclass
class Activations:
    """Live bytes of one update over its replay: fixed[t] + per_example[t] * batch."""

    fixed: np.ndarray
    per_example: np.ndarray

    def at(self, batch: int) -> int:
        return int(np.max(self.fixed + self.per_example * batch))


@functools.lru_cache(maxsize=None)
def _index(device: str) -> int:
    return tf.DeviceSpec.from_string(device).device_index


def _replay(graph: tf.Graph, outputs: Sequence[tf.Tensor], batch_sizes,
            device: Optional[str] = None) -> Activations:
    """Live bytes after each op when the graph runs in program (creation) order.

    device: count only the buffers of ops placed there (an op without a device counts
    on SIDE_DEVICES["G"], the first, where TensorFlow would put it); None: all.
    """
    ops = graph.get_operations()
    buffer_of: Dict[str, str] = {}  # tensor name -> name of the tensor owning its buffer
    size: Dict[str, Tuple[int, int]] = {}  # buffer -> (fixed, per-example x PROBE_BATCH)
    last_use: Dict[str, int] = {}
    for i, op in enumerate(ops):
        for inp in op.inputs:
            buf = buffer_of.get(inp.name, inp.name)
            last_use[buf] = max(last_use.get(buf, -1), i)
        elsewhere = (device is not None and
                     _index(op.device or SIDE_DEVICES["G"]) != _index(device))
        for out in op.outputs:
            if op.type in _ALIASES and op.inputs and out.dtype == op.inputs[0].dtype:
                buffer_of[out.name] = buffer_of.get(op.inputs[0].name, op.inputs[0].name)
            else:
                buffer_of[out.name] = out.name
                n = 0 if op.type in _NO_BUFFER or elsewhere else _bytes(out)
                per = bool(out.shape.rank) and out.shape[0] in batch_sizes
                size[out.name] = (0, n) if per else (n, 0)
            buf = buffer_of[out.name]
            last_use[buf] = max(last_use.get(buf, -1), i)
    for out in outputs:  # returned: alive to the end
        last_use[buffer_of.get(out.name, out.name)] = len(ops)
    frees: Dict[int, List[str]] = {}
    for buf, i in last_use.items():
        frees.setdefault(i, []).append(buf)
    live_fixed = live_per = 0
    fixed, per_example = np.zeros(len(ops), np.int64), np.zeros(len(ops), np.float64)
    for i, op in enumerate(ops):
        for out in op.outputs:
            if buffer_of[out.name] == out.name:
                f, p = size[out.name]
                live_fixed, live_per = live_fixed + f, live_per + p
        fixed[i], per_example[i] = live_fixed, live_per / PROBE_BATCH
        for buf in frees.get(i, ()):
            f, p = size.get(buf, (0, 0))
            live_fixed, live_per = live_fixed - f, live_per - p
    return Activations(fixed, per_example)


def _measure(graph: tf.Graph) -> Dict[Optional[str], Activations]:
    """{None: the whole replay, side: the replay of that side's device} of a traced update."""
    return {side: _replay(graph, graph.outputs, graphs_lib.BATCH_AXES, device)
            for side, device in [(None, None)] + list(SIDE_DEVICES.items())}


def update_activations(graphs: graphs_lib.UpdateGraphs
                       ) -> Dict[Optional[str], Dict[str, Activations]]:
    """Live bytes of D's update and G's over the replay of their traced `graphs`
    (measure/traced.py), per side: {None: the whole replica, 'G': G's device, 'D': D's}."""
    replays = {name: _measure(graph) for name, graph in graphs.items()}
    return {side: {name: replay[side] for name, replay in replays.items()}
            for side in [None] + list(SIDE_DEVICES)}


def variable_bytes(variables) -> int:
    return int(sum(v.shape.num_elements() * v.dtype.size for v in variables))


def bytes_by_device(variables) -> Dict[str, int]:
    """The bytes of `variables` on each device of this process, per local copy: a
    mirrored variable counts once per replica, a sharded one (distribute/sharded_adam.py) its
    slice per replica."""
    found: Dict[str, int] = {}
    for variable in variables:
        for copy in strategy_lib.local_copies(variable):
            found[copy.device] = found.get(copy.device, 0) + copy.shape.num_elements() * \
                copy.dtype.size
    return dict(sorted(found.items()))


@dataclasses.dataclass
class Plan:
    """Per-replica memory of a run, in bytes."""

    parameter_bytes: int
    optimizer_bytes: int
    ema_bytes: int
    gradient_bytes: Dict[str, int]  # per update: the updated network's gradients
    activations: Dict[str, Activations]  # per update, blocks kept
    activations_recompute: Dict[str, Activations]  # per update, blocks rematerialised
    accumulation: int = 1
    # G's and D's devices' own plans when the two are split ({"G": ..., "D": ...}).
    sides: Dict[str, "Plan"] = dataclasses.field(default_factory=dict)

    def share(self, fraction: float) -> "Plan":
        """`fraction` of every byte of this plan: one pipeline stage's estimate, its
        blocks' share of the network's (distribute/staging.py balances the stages by it)."""
        def part(acts):
            return {u: Activations(a.fixed * fraction, a.per_example * fraction)
                    for u, a in acts.items()}
        return dataclasses.replace(
            self, parameter_bytes=int(self.parameter_bytes * fraction),
            optimizer_bytes=int(self.optimizer_bytes * fraction),
            ema_bytes=int(self.ema_bytes * fraction),
            gradient_bytes={u: int(b * fraction) for u, b in self.gradient_bytes.items()},
            activations=part(self.activations),
            activations_recompute=part(self.activations_recompute), sides={})

    @property
    def fixed_bytes(self) -> int:
        return self.parameter_bytes + self.optimizer_bytes + self.ema_bytes

    def activation_bytes(self, update: str, batch: int, recompute: bool) -> int:
        """Peak live bytes of one update (its gradients included)."""
        return (self.activations_recompute if recompute else self.activations)[update].at(batch)

    def step_bytes(self, batch: int, recompute: bool) -> int:
        """Peak of one train step beyond the fixed state: the larger of D's and G's update.

        With accumulation the running sum of the gradients is held too.
        """
        running_sum = 1 if self.accumulation > 1 else 0
        return int(RUNTIME_FACTOR * max(
            self.gradient_bytes[u] * running_sum + self.activation_bytes(u, batch, recompute)
            for u in ("d_update", "g_update")))

    def total_bytes(self, batch: int, recompute: bool) -> int:
        return self.fixed_bytes + self.step_bytes(batch, recompute)

    def largest_batch(self, budget_bytes: int, recompute: bool) -> int:
        """The largest per-replica batch whose total stays within `budget_bytes` (0: none)."""
        if self.total_bytes(1, recompute) > budget_bytes:
            return 0
        lo, hi = 1, 2
        while self.total_bytes(hi, recompute) <= budget_bytes and hi < 1 << 24:
            lo, hi = hi, hi * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.total_bytes(mid, recompute) <= budget_bytes else (lo, mid)
        return lo

    def fit(self, examples: int, budget_bytes: int) -> Optional[Tuple[int, int, bool]]:
        """(accumulation, micro-batch, recompute): the fewest micro-batches of `examples`
        that fit `budget_bytes`, without recompute if possible; None if one example does
        not fit even with recompute."""
        return fewest(examples, lambda accumulation, micro, recompute: dataclasses.replace(
            self, accumulation=accumulation).total_bytes(micro, recompute) <= budget_bytes)

    def report(self, batch: int, budget_bytes: Optional[int]) -> dict:
        """The facts `--dry_run` prints, in GiB."""
        def gib(n):
            return round(n / GIB, 3)
        report = {
            "per_replica_batch": batch,
            "parameter_gib": gib(self.parameter_bytes),
            "optimizer_state_gib": gib(self.optimizer_bytes),
            "ema_gib": gib(self.ema_bytes),
            "step_gib": gib(self.step_bytes(batch, False)),  # activations, gradients
            "step_gib_recompute": gib(self.step_bytes(batch, True)),
            "total_gib": gib(self.total_bytes(batch, False)),
            "total_gib_recompute": gib(self.total_bytes(batch, True)),
        }
        if budget_bytes:
            report["memory_gib"] = gib(budget_bytes)
            report["largest_batch"] = self.largest_batch(budget_bytes, False)
            report["largest_batch_recompute"] = self.largest_batch(budget_bytes, True)
        return report


def plan(generator, discriminator, generator_ema, g_optimizer, d_optimizer,
         side_of: Callable[[str], str], graphs: graphs_lib.UpdateGraphs,
         graphs_recompute: graphs_lib.UpdateGraphs, accumulation: int = 1) -> Plan:
    """The memory plan of built models and optimizers, their updates as the train step
    computes them: `graphs` and `graphs_recompute`, the step's two updates traced
    (measure/traced.py) with the models' blocks kept and rematerialised (runs nothing).

    Its `sides` are the plans of G's and D's devices when the two are split
    (model_parallel.placement='split'): each holds the variables the parallel mode's
    `side_of(owner)` gives it (distribute/mode.py; G's: G, EMA G and G's optimizer state)
    and its network's side of both updates.
    """
    kept, recomputed = update_activations(graphs), update_activations(graphs_recompute)
    g_grads = variable_bytes(generator.trainable_variables)
    d_grads = variable_bytes(discriminator.trainable_variables)
    # Per side: (parameter, optimizer, EMA) bytes.
    state = {"G": [0, 0, 0], "D": [0, 0, 0]}
    for owner, kind, variables in (
            ("generator", 0, generator.variables), ("discriminator", 0, discriminator.variables),
            ("g_optimizer", 1, g_optimizer.variables()),
            ("d_optimizer", 1, d_optimizer.variables()),
            ("generator_ema", 2, generator_ema.variables)):
        state[side_of(owner)][kind] += variable_bytes(variables)
    state[None] = [g + d for g, d in zip(state["G"], state["D"])]
    gradients = {None: {"d_update": d_grads, "g_update": g_grads},
                 "G": {"d_update": 0, "g_update": g_grads},
                 "D": {"d_update": d_grads, "g_update": 0}}
    plans = {side: Plan(parameter_bytes=state[side][0], optimizer_bytes=state[side][1],
                        ema_bytes=state[side][2], gradient_bytes=gradients[side],
                        activations=kept[side], activations_recompute=recomputed[side],
                        accumulation=accumulation)
             for side in (None, "G", "D")}
    whole = plans.pop(None)
    whole.sides = plans
    return whole


def device_memory_bytes(accelerator: str) -> Optional[int]:
    """Memory of one device of this kind: RAM for CPU, nvidia-smi's total for GPU.

    TensorFlow reports a GPU's current and peak use (get_memory_info), not its
    size; TPU HBM is not reported here at all: pass --memory_gib there.
    """
    if accelerator == "cpu":
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemTotal:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
    if accelerator == "gpu":
        import subprocess  # pylint: disable=import-outside-toplevel
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total",
                                  "--format=csv,noheader,nounits"], capture_output=True,
                                 text=True, timeout=10, check=True).stdout
            return int(out.split()[0]) * 1024 * 1024
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            return None
    return None
