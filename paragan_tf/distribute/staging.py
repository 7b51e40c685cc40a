"""Pipeline stages: a residual block's forward and backward on a device of its own.

With `model_parallel.stages=S` a network's blocks are split into S contiguous stages, each on
a device of the replica (distribute/model_parallel.py's Spread chooses the devices and the
split). A staged block runs under its device's scope, its variables made there at the
first call, and its backward pass runs there too: the block's forward is recorded by a tape
of its own inside a custom gradient, and the gradient function differentiates that tape
under the device's scope. One tape over blocks on several devices would give the backward
ops no device (they would land on the first, with every block's activation gradients). The
arithmetic is the unstaged block's: the same ops, in the same order.

Combined with `train.recompute` the block inside is the rematerialised one: its forward is
recomputed in the backward pass, on the stage's device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from typing import Callable, List, Optional, Sequence

import tensorflow as tf


def call(fn: Callable[..., tf.Tensor], tensors: Sequence[tf.Tensor], device: str):
    """fn(*tensors) on `device`, differentiated there (inside `twice()`: twice, both there).

    Args:
      fn: the block; reads its variables (gradients are returned for the trainable ones).
        Returns a tensor or a list of them.
      tensors: fn's float inputs (gradients flow to them); integer inputs such as class
        ids belong in fn's closure.
      device: the stage's device.
    """
    second_order = _TWICE.depth > 0

    @tf.custom_gradient
    def staged(*inputs):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            output = fn(*inputs)

        def gradient(*upstream, variables=None):
            variables = list(variables or [])
            if second_order:
                # The backward is itself differentiated (R1's gradient of an input
                # gradient): run it as a staged call of its own, so that its backward,
                # the second-order ops, lands on this device too. It recomputes the
                # block's forward inside, once per such pass.
                grads = call(lambda *a: _first_order(fn, a[:len(inputs)], a[len(inputs):],
                                                     variables),
                             list(inputs) + list(upstream), device)
            else:
                with tf.device(device):
                    grads = _dense(tape.gradient(output, list(inputs) + variables,
                                                 output_gradients=list(upstream),
                                                 unconnected_gradients=_ZERO))
            return grads[:len(inputs)], grads[len(inputs):]
        return output, gradient

    with tf.device(device):
        return staged(*tensors)


_ZERO = tf.UnconnectedGradients.ZERO


def _first_order(fn, inputs, upstream, variables) -> List[tf.Tensor]:
    """The gradient of fn's output (times `upstream`) for its inputs and `variables`."""
    with tf.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(list(inputs) + variables)
        output = fn(*inputs)
    return _dense(tape.gradient(output, list(inputs) + variables, output_gradients=list(upstream),
                                unconnected_gradients=_ZERO))


def _dense(grads) -> List[tf.Tensor]:
    return [tf.convert_to_tensor(g) for g in grads]


class _Depth(threading.local):
    depth = 0


_TWICE = _Depth()


@contextlib.contextmanager
def twice():
    """Staged calls made inside are differentiated twice (an input-gradient penalty's
    forward): their backward is staged as well. Tracing-time state, per thread."""
    _TWICE.depth += 1
    try:
        yield
    finally:
        _TWICE.depth -= 1


def variables_on(device: Optional[str]):
    """Scope (inside strategy.scope()) creating variables on `device` (None: a no-op).

    Through the strategy's own `colocate_with` hook, the one way a strategy's scope lets a
    variable live on a device other than the replica's: a `numpy_dataset.SingleDevice`
    under OneDeviceStrategy (a plain variable there), a device list under
    MultiWorkerMirrored (a mirrored variable with one copy per worker, on that device,
    which its optimizer updates through the strategy like any other).
    """
    if device is None:
        return contextlib.nullcontext()
    # pylint: disable=import-outside-toplevel
    from tensorflow.python.distribute import numpy_dataset

    def creator(next_creator, **kwargs):
        # The innermost placement wins (a block's stage inside its network's scope), and
        # so does a colocation already asked for (an optimizer slot beside its weight).
        if kwargs.get("colocate_with") is None:
            strategy = tf.distribute.get_strategy()
            kwargs["colocate_with"] = (
                _Devices((device,)) if isinstance(strategy,
                                                  tf.distribute.MultiWorkerMirroredStrategy)
                else numpy_dataset.SingleDevice(device))
        return next_creator(**kwargs)
    return tf.variable_creator_scope(creator)


@dataclasses.dataclass(frozen=True)
class _Devices:
    """What MirroredStrategy's variable creator reads of `colocate_with`: its devices."""

    _devices: tuple


@contextlib.contextmanager
def on_device(device: Optional[str]):
    """Ops and new variables on `device` (None: a no-op)."""
    if device is None:
        yield
        return
    with tf.device(device), variables_on(device):
        yield


def balance(costs: Sequence[float], stages: int) -> List[int]:
    """The stage of each block: contiguous runs of blocks, `stages` of them, whose largest
    summed cost is the smallest possible (every stage gets at least one block)."""
    n = len(costs)
    if not 1 <= stages <= n:
        raise ValueError(f"{stages} stages for {n} blocks")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    # best[k][i]: the smallest largest stage cost of blocks [0, i) in k stages.
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for k in range(1, stages + 1):
        for i in range(k, n + 1):
            for j in range(k - 1, i):
                value = max(best[k - 1][j], prefix[i] - prefix[j])
                if value < best[k][i]:
                    best[k][i], cut[k][i] = value, j
    stage_of, i = [0] * n, n
    for k in range(stages, 0, -1):
        j = cut[k][i]
        for b in range(j, i):
            stage_of[b] = k - 1
        i = j
    return stage_of
