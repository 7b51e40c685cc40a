"""Adam with its moments sharded over the replicas (ZeRO stage 1, `model_parallel.shard_optimizer`).

With N replicas each keeps Adam's first and second moments for 1/N of a network's weights
instead of all of them: the optimizer state per device falls from 2x the network's float32
weights to 2/N x. One update, in replica context, on gradients already all-reduced (the
NaN guard does that, train/nan_guard.py):

1. the network's gradients and weights, flattened into one vector and padded to N equal
   slices; replica r takes slice r;
2. Adam's update of that slice with replica r's own moments (the arithmetic of
   TensorFlow's fused Adam kernel, which the unsharded Adam uses, betas in float32:
   alpha = lr sqrt(1 - beta_2^t) / (1 - beta_1^t), m += (g - m)(1 - beta_1),
   v += (g^2 - v)(1 - beta_2), w -= alpha m / (sqrt(v) + epsilon));
3. the new slices all-gathered (`ReplicaContext.all_gather`), so every replica holds the
   whole new network, and assigned to the mirrored weights in a merge_call.

Nothing branches on the NaN guard's verdict: the update is computed every step and its
results are kept only when the step is healthy (a `tf.cond` around the collectives would
need every replica to agree on entering it, which it does, but TensorFlow orders collectives
inside branches badly). Reduce-scatter would move half the bytes of step 0's all-reduce,
but TensorFlow 2.21 registers no CPU implementation of it; the all-reduce stays.

Checkpoints hold the whole moments, gathered from every replica when saved
(`strategy.gather`), so a run resumes onto any replica count: each replica takes its slice
of the restored vectors. The moments of a sharded run are not those of keras' Adam:
checkpoints of sharded and unsharded runs do not restore into each other (the restore
fails, naming the checkpoint).
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence

import tensorflow as tf
import tf_keras as keras


def _flat(tensors: Sequence[tf.Tensor]) -> tf.Tensor:
    return tf.concat([tf.reshape(tf.cast(t, tf.float32), [-1]) for t in tensors], 0)


class _Moments(tf.__internal__.tracking.Trackable):
    """One network's Adam moments, a slice per replica; saved and restored whole."""

    def __init__(self, size: int, shard: int):
        self.size, self.shard = size, shard
        strategy = tf.distribute.get_strategy()
        # One independent value per replica: on-read synchronisation, no aggregation.
        self.m, self.v = (tf.Variable(tf.zeros([shard]), trainable=False, name=name,
                                      synchronization=tf.VariableSynchronization.ON_READ,
                                      aggregation=tf.VariableAggregation.NONE)
                          for name in ("m", "v"))
        self._strategy = strategy

    def _whole(self, variable) -> tf.Tensor:
        """Every replica's slice in replica order, unpadded."""
        if self._strategy.num_replicas_in_sync == 1:
            return tf.convert_to_tensor(variable)[:self.size]
        return self._strategy.gather(variable, axis=0)[:self.size]

    def _serialize_to_tensors(self):
        return {"m": self._whole(self.m), "v": self._whole(self.v)}

    def _restore_from_tensors(self, restored_tensors):
        ids = self._strategy.experimental_local_results(self._strategy.run(
            lambda: tf.distribute.get_replica_context().replica_id_in_sync_group))
        padded = self.shard * self._strategy.num_replicas_in_sync
        ops = []
        for name in ("m", "v"):
            whole = tf.pad(tf.reshape(restored_tensors[name], [-1]),
                           [[0, padded - self.size]])
            variable = getattr(self, name)
            for component, replica in zip(self._strategy.experimental_local_results(variable),
                                          ids):
                start = int(replica) * self.shard
                ops.append(component.assign(whole[start:start + self.shard]))
        return tf.group(ops)

    def variables(self) -> List[tf.Variable]:
        return [self.m, self.v]


class ShardedAdam(tf.Module):
    """Adam for one network with its moments sharded over the replicas (see the module doc).

    Has what the trainers read of a keras optimizer: `iterations`, `learning_rate` (the
    current rate), `build(variables)` and `variables()`.
    """

    def __init__(self, learning_rate, beta_1: float = 0.0, beta_2: float = 0.999,
                 epsilon: float = 1e-8, name: str = "sharded_adam"):
        super().__init__(name=name)
        self._rate = learning_rate  # a float or a keras LearningRateSchedule
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations",
                                      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self.moments: Optional[_Moments] = None

    @property
    def learning_rate(self) -> tf.Tensor:
        if isinstance(self._rate, keras.optimizers.schedules.LearningRateSchedule):
            return self._rate(self.iterations)
        return tf.constant(self._rate, tf.float32)

    def build(self, variables: Sequence[tf.Variable]) -> None:
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        size = sum(v.shape.num_elements() for v in variables)
        self.moments = _Moments(size, math.ceil(size / replicas))

    def variables(self) -> List[tf.Variable]:
        return [self.iterations] + self.moments.variables()

    def apply(self, healthy: tf.Tensor, grads: Sequence[tf.Tensor],
              variables: Sequence[tf.Variable]) -> None:
        """One update from all-reduced `grads`, kept only where `healthy` (replica context)."""
        ctx = tf.distribute.get_replica_context()
        moments = self.moments
        shard, padded = moments.shard, moments.shard * ctx.num_replicas_in_sync
        start = tf.cast(ctx.replica_id_in_sync_group, tf.int32) * shard

        def my_slice(tensors):
            flat = tf.pad(_flat(tensors), [[0, padded - moments.size]])
            return tf.slice(flat, [start], [shard])
        grad, weight = my_slice(grads), my_slice(variables)
        # The betas as float32 before 1 - beta is taken, as the fused kernel the unsharded
        # Adam uses (train/optimizers.py) takes them: the same arithmetic, the same weights.
        beta_1, beta_2, epsilon = (tf.constant(x, tf.float32)
                                   for x in (self.beta_1, self.beta_2, self.epsilon))
        step = tf.cast(self.iterations + 1, tf.float32)
        alpha = (tf.cast(self.learning_rate, tf.float32) *
                 tf.sqrt(1.0 - tf.pow(beta_2, step)) / (1.0 - tf.pow(beta_1, step)))
        m, v = tf.convert_to_tensor(moments.m), tf.convert_to_tensor(moments.v)
        m_new = m + (grad - m) * (1.0 - beta_1)
        v_new = v + (tf.square(grad) - v) * (1.0 - beta_2)
        weight = weight - (m_new * alpha) / (tf.sqrt(v_new) + epsilon)
        moments.m.assign(tf.where(healthy, m_new, m))
        moments.v.assign(tf.where(healthy, v_new, v))
        whole = ctx.all_gather(weight, axis=0)[:moments.size]
        sizes = [v.shape.num_elements() for v in variables]
        new = [tf.cast(tf.reshape(w, v.shape), v.dtype)
               for w, v in zip(tf.split(whole, sizes), variables)]

        def assign(strategy, healthy, new):
            for variable, value in zip(variables, new):
                strategy.extended.update(
                    variable, lambda var, x, ok: var.assign(tf.where(ok, x, var)),
                    args=(value, healthy))
            healthy = strategy.experimental_local_results(healthy)[0]  # the same everywhere
            self.iterations.assign_add(tf.cast(healthy, tf.int64))
        ctx.merge_call(assign, args=(healthy, new))
