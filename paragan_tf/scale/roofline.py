"""The roofline of a train step: every op of its two traced updates (measure/traced.py) with
the FLOPs it computes and the bytes it moves, so a device's compute peak and memory
bandwidth bound the step's time op by op.

  FLOPs  convolutions and matrix products (forward and backward, the work of a device's
         matrix units), from their shapes: 2 x multiply-adds; the rest is counted as
         traffic only (its arithmetic is small beside its bytes)
  bytes  each op's floating-point inputs and outputs, at the dtypes the trace has (the
         layout's precision); views, variable reads and constants move none

Both are affine in the per-replica batch (a tensor whose leading axis is the probe batch
is per-example), as in the memory plan. On a device of compute peak P and bandwidth W an
op takes at least max(FLOPs / P, bytes / W); a step, the sum over its updates' ops
(`StepCost.seconds`). What the bound leaves out (achievable fractions of P and W, a
per-op launch cost, ops a compiler fuses) is what a measured step has to tell; the plan
does not use this yet: benchmarks/probes/roofline.py prints it for a gin config.
"""

from __future__ import annotations

import dataclasses
from typing import Dict

import numpy as np
import tensorflow as tf

from paragan_tf.scale import graphs as graphs_lib

# Ops whose outputs are views or storage, not traffic (as scale/memory.py counts buffers).
_NO_TRAFFIC = graphs_lib.ALIASES | {"ReadVariableOp", "VarHandleOp", "Const", "NoOp",
                                   "Placeholder"}


def _is_per_example(tensor: tf.Tensor) -> bool:
    shape = tensor.shape
    return bool(shape.rank) and shape[0] in graphs_lib.BATCH_AXES


def _matrix_flops(op) -> int:
    """2 x the multiply-adds of a convolution or matrix product at the traced shapes; 0 for
    any other op."""
    kind = op.type
    if kind in ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"):
        # A convolution's work is its output-gradient (or output) size x a kernel's window.
        out = op.outputs[0] if kind == "Conv2D" else op.inputs[2]
        kernel = (op.outputs[0] if kind == "Conv2DBackpropFilter" else op.inputs[1]).shape
        return 2 * out.shape.num_elements() * kernel[0] * kernel[1] * kernel[2]
    if kind == "MatMul":
        a = op.inputs[0].shape
        return 2 * op.outputs[0].shape.num_elements() * (
            a[0] if op.get_attr("transpose_a") else a[1])
    if kind in ("BatchMatMulV2", "BatchMatMulV3"):
        a = op.inputs[0].shape
        return 2 * op.outputs[0].shape.num_elements() * (a[-2] if op.get_attr("adj_x") else a[-1])
    return 0


def _float_bytes(tensor: tf.Tensor) -> int:
    if not tensor.dtype.is_floating or not tensor.shape.is_fully_defined():
        return 0
    return tensor.shape.num_elements() * tensor.dtype.size


@dataclasses.dataclass(frozen=True)
class UpdateCost:
    """One update's ops: FLOPs and bytes as fixed + per_example x batch, one row per op."""

    flops: np.ndarray  # [ops, 2]: fixed, per example
    bytes: np.ndarray  # [ops, 2]

    @property
    def ops(self) -> int:
        return len(self.flops)

    def at(self, batch: int):
        """(FLOPs, bytes) of each op at `batch` examples per replica."""
        return self.flops @ [1, batch], self.bytes @ [1, batch]

    def seconds(self, batch: int, peak_flops: float, bandwidth: float) -> float:
        return sum(self.bound_seconds(batch, peak_flops, bandwidth))

    def bound_seconds(self, batch: int, peak_flops: float, bandwidth: float):
        """(the seconds of the ops bound by their FLOPs, of those bound by their bytes)."""
        flops, moved = self.at(batch)
        compute, memory = flops / peak_flops, moved / bandwidth
        by_compute = compute >= memory
        return float(np.sum(compute[by_compute])), float(np.sum(memory[~by_compute]))


def _running(graph: tf.Graph) -> list:
    """The ops a run of the graph executes, in program order: those its outputs and its
    side effects (SN and BN state) need. A traced gradient also holds ops nothing needs (a
    first layer's input gradient), which the runtime prunes."""
    needed, stack = set(), [t.op for t in graph.outputs] + list(graph.control_outputs)
    while stack:
        op = stack.pop()
        if op.name not in needed:
            needed.add(op.name)
            stack.extend([t.op for t in op.inputs] + list(op.control_inputs))
    return [op for op in graph.get_operations() if op.name in needed]


def update_cost(graph: tf.Graph) -> UpdateCost:
    """The roofline rows of a traced update's ops (see the module doc)."""
    flops, moved = [], []
    for op in _running(graph):
        if op.type in _NO_TRAFFIC:
            continue
        tensors = list(op.inputs) + list(op.outputs)
        traffic = [0.0, 0.0]
        for tensor in tensors:
            traffic[_is_per_example(tensor)] += _float_bytes(tensor)
        if not any(traffic):
            continue  # shapes, indices: host-side bookkeeping
        work = float(_matrix_flops(op))
        per_example = any(_is_per_example(t) for t in op.inputs)
        flops.append([0.0, work / graphs_lib.PROBE_BATCH] if per_example else [work, 0.0])
        moved.append([traffic[0], traffic[1] / graphs_lib.PROBE_BATCH])
    return UpdateCost(np.array(flops).reshape(-1, 2), np.array(moved).reshape(-1, 2))


@dataclasses.dataclass(frozen=True)
class StepCost:
    """A train step's roofline: `d_steps` D updates and one G update, each over
    `accumulation` micro-batches (train/step.py)."""

    updates: Dict[str, UpdateCost]

    def weights(self, d_steps: int, accumulation: int) -> Dict[str, int]:
        """How often each update runs in one step."""
        return {"d_update": d_steps * accumulation, "g_update": accumulation}

    def totals(self, batch: int, d_steps: int, accumulation: int) -> dict:
        """The step's FLOPs, bytes and ops at `batch` examples per micro-batch."""
        out = dict(flops=0.0, bytes=0.0, ops=0)
        for name, times in self.weights(d_steps, accumulation).items():
            flops, moved = self.updates[name].at(batch)
            out["flops"] += times * float(flops.sum())
            out["bytes"] += times * float(moved.sum())
            out["ops"] += times * self.updates[name].ops
        return out

    def seconds(self, batch: int, d_steps: int, accumulation: int, peak_flops: float,
                bandwidth: float) -> float:
        """The roofline bound of one step on one device (FLOP/s, bytes/s)."""
        return sum(times * self.updates[name].seconds(batch, peak_flops, bandwidth)
                   for name, times in self.weights(d_steps, accumulation).items())


def cost_of(graphs: Dict[str, tf.Graph]) -> StepCost:
    """The roofline of a step's two updates, traced (measure/traced.py)."""
    return StepCost({name: update_cost(graph) for name, graph in graphs.items()})
