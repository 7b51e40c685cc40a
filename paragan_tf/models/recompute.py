"""Rematerialisation of residual blocks (`train.recompute`): activations for memory.

At 512-1024 px the activations kept for the backward pass, not the weights,
decide what fits on a device. With recompute a block keeps only its inputs;
its inner activations are computed again, block by block, during the backward
pass (tf.recompute_grad), for about one more forward pass of compute.

Our blocks are not pure functions: a training call also advances state outside
the optimizers (the spectral-norm vectors `u`, the BN moving statistics). Run
twice, the recomputation would start from the state the first run left, compute
a different sigma and so different gradients. So the block first puts that
state back to a snapshot taken before its forward pass; in the forward pass
that is a no-op, in the recomputation it makes the second run identical to the
first (same sigma, same outputs, same state afterwards). The snapshot is a few
vectors per layer.
"""

from __future__ import annotations

from typing import Callable, Sequence

import tensorflow as tf


def call(fn: Callable[..., tf.Tensor], tensors: Sequence[tf.Tensor],
         state: Sequence[tf.Variable]) -> tf.Tensor:
    """fn(*tensors), with its inner activations rematerialised in the backward pass.

    Args:
      fn: the block; reads trainable variables and may assign `state`.
      tensors: fn's float inputs (gradients flow to them); integer inputs such
        as class ids belong in fn's closure.
      state: every variable fn assigns (non-trainable float variables).
    """
    snapshot = [tf.identity(tf.convert_to_tensor(v)) for v in state]

    def replayable(*args):
        for variable, value in zip(state, snapshot):
            variable.assign(value)
        return fn(*args)
    return tf.recompute_grad(replayable)(*tensors)


def block_state(*layers) -> list:
    """The float state a training call of these layers assigns (SN vectors, BN statistics)."""
    return [v for layer in layers if layer is not None
            for v in layer.non_trainable_variables if v.dtype.is_floating]
