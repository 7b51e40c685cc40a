"""ParaGAN's sample buffer: generated batches on the parameter servers, read by D without waiting.

G closures write the batch of fakes they generated (with its labels and z) into
one of `depth` slots; D closures train on the newest slot written. Neither
waits for the other: a D closure reads whatever the buffer holds when it runs,
and how many G updates old its fakes are (`age`) is reported as
`async/sample_age`.

Each slot is one flat float32 variable holding the fakes, the labels and z
together, so a write is one assign and a read one read of the same variable:
a D closure never sees half of one batch and half of another. The version
vector says which G update (the G optimizer's iteration count when the fakes
were generated) each slot holds; -1 marks an empty slot. Round r's G closure
writes slot r % depth, and the trainer keeps at most `depth` rounds in flight,
so two G closures in flight never write the same slot.

The buffer is not checkpointed: a run (or a resumed one) fills it from the
current G before training (`fill`).
"""

from __future__ import annotations

from typing import List, Tuple

import numpy as np
import tensorflow as tf


class SampleBuffer:
    """`depth` batches of (fakes [b, r, r, c], labels [b], z [b, dim_z]) and their versions."""

    def __init__(self, strategy: tf.distribute.Strategy, depth: int, batch: int,
                 image_shape: Tuple[int, int, int], dim_z: int, near: tf.Variable):
        self.depth, self.batch = depth, batch
        self.image_shape, self.dim_z = tuple(image_shape), dim_z
        self._sizes = [batch * int(np.prod(image_shape)), batch, batch * dim_z]
        # Colocated with `near`: colocated variables are never split across parameter
        # servers, and a split slot would make its assign and read two operations.
        with strategy.scope(), strategy.extended.colocate_vars_with(near):
            self.slots: List[tf.Variable] = [
                tf.Variable(tf.zeros([sum(self._sizes)]), trainable=False,
                            name=f"sample_buffer_slot_{i}") for i in range(depth)]
            self.versions = tf.Variable(tf.fill([depth], tf.constant(-1, tf.int64)),
                                        trainable=False, name="sample_buffer_versions")

    def write(self, round_index: tf.Tensor, fakes: tf.Tensor, labels: tf.Tensor,
              z: tf.Tensor, version: tf.Tensor) -> tf.Tensor:
        """Stores a batch in slot round_index % depth, then publishes its version; True."""
        packed = tf.concat([tf.reshape(tf.cast(fakes, tf.float32), [-1]),
                            tf.cast(labels, tf.float32), tf.reshape(z, [-1])], 0)
        slot = tf.cast(round_index % self.depth, tf.int32)
        written = tf.switch_case(slot, [
            (lambda v=v: v.assign(packed, read_value=False)) for v in self.slots])
        with tf.control_dependencies([written]):
            published = self.versions.scatter_update(tf.IndexedSlices(
                tf.reshape(tf.cast(version, tf.int64), [1]), tf.reshape(slot, [1])))
        with tf.control_dependencies([published]):
            return tf.constant(True)

    def read(self) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
        """(fakes, labels, z, version) of the newest slot; call once the buffer is filled."""
        versions = self.versions.read_value()
        slot = tf.cast(tf.argmax(versions), tf.int32)
        packed = tf.switch_case(slot, [(lambda v=v: v.read_value()) for v in self.slots])
        fakes, labels, z = tf.split(packed, self._sizes)
        return (tf.reshape(fakes, (self.batch,) + self.image_shape),
                tf.cast(tf.round(labels), tf.int32),
                tf.reshape(z, [self.batch, self.dim_z]), tf.gather(versions, slot))

    def filled(self) -> int:
        """Slots holding a batch (read on the coordinator)."""
        return int(np.sum(self.versions.numpy() >= 0))
