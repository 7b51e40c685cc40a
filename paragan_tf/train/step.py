"""The per-replica GAN step: `d_steps` discriminator updates, then one generator update.

This is the function `strategy.run` executes on every replica, unchanged under
OneDevice, Mirrored, MultiWorkerMirrored and TPU strategies. Gradients are
all-reduced by hand (then clipped, then applied with aggregation skipped) so
clipping by global norm acts on the global gradient, not on each replica's part.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence, Tuple

import tensorflow as tf
import tf_keras as keras

from paragan_tf import losses as losses_lib
from paragan_tf import regularizers

Batch = Tuple[tf.Tensor, tf.Tensor]


def average_over_global_batch(per_example: tf.Tensor, global_batch_size: int) -> tf.Tensor:
    """Sum of per-example losses divided by the *global* batch size.

    Each replica sees global_batch_size / num_replicas examples; the gradients
    of all replicas are then summed. Dividing by the local batch (a plain
    reduce_mean) would make the update num_replicas times too large: the classic
    multi-replica bug. tf.nn.compute_average_loss does this division.
    """
    return tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)


@dataclasses.dataclass
class StepConfig:
    """What one train step does; built from TrainConfig."""

    global_batch_size: int  # examples per micro-batch, across all replicas
    d_steps: int = 1
    accumulation: int = 1  # micro-batches per update (gradient accumulation)
    clip_norm: float = 0.0  # 0: no clipping
    ortho_reg: float = 0.0  # BigGAN's orthogonal regularisation strength for G


class GANStep:
    """Holds the networks, optimizers and loss, and computes one replica's step."""

    def __init__(self, generator: keras.Model, discriminator: keras.Model,
                 g_optimizer, d_optimizer, loss_fn: losses_lib.LossFn, config: StepConfig):
        self.generator, self.discriminator = generator, discriminator
        self.g_optimizer, self.d_optimizer = g_optimizer, d_optimizer
        self.loss_fn, self.config = loss_fn, config

    @property
    def real_batches_per_step(self) -> int:
        return self.config.d_steps * self.config.accumulation

    @property
    def noise_batches_per_step(self) -> int:
        return (self.config.d_steps + 1) * self.config.accumulation

    def _apply(self, optimizer, grads: List[tf.Tensor], variables) -> tf.Tensor:
        ctx = tf.distribute.get_replica_context()
        grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        norm = tf.linalg.global_norm(grads)
        if self.config.clip_norm > 0:
            grads, _ = tf.clip_by_global_norm(grads, self.config.clip_norm, use_norm=norm)
        optimizer.apply_gradients(zip(grads, variables), skip_gradients_aggregation=True)
        return norm

    def _d_micro(self, real: Batch, noise: Batch):
        images, labels = real
        z, fake_labels = noise
        fakes = tf.stop_gradient(self.generator((z, fake_labels), training=True))
        with tf.GradientTape() as tape:
            # One D call on real+fake: one SN power iteration per update, one big batch.
            logits = self.discriminator(
                (tf.concat([tf.cast(fakes, images.dtype), images], 0),
                 tf.concat([fake_labels, labels], 0)), training=True)
            fake_logits, real_logits = tf.split(logits, 2)
            d_loss, _ = self.loss_fn(real_logits, fake_logits, fake_logits)
            loss = average_over_global_batch(d_loss, self.config.global_batch_size)
            loss /= self.config.accumulation
        grads = tape.gradient(loss, self.discriminator.trainable_variables)
        return loss, grads, real_logits, fake_logits

    def _g_micro(self, noise: Batch):
        z, fake_labels = noise
        with tf.GradientTape() as tape:
            fakes = self.generator((z, fake_labels), training=True)
            logits = self.discriminator((fakes, fake_labels), training=True)
            _, g_loss = self.loss_fn(logits, logits, logits)
            loss = average_over_global_batch(g_loss, self.config.global_batch_size)
            loss /= self.config.accumulation
            total = loss
            if self.config.ortho_reg > 0:
                total += tf.nn.scale_regularization_loss(
                    self.config.ortho_reg * regularizers.orthogonal(self.generator))
        return loss, tape.gradient(total, self.generator.trainable_variables)

    @staticmethod
    def _add(acc, grads):
        # Embedding gradients arrive as IndexedSlices; the tables are small, densify.
        grads = [tf.convert_to_tensor(g) for g in grads]
        return grads if acc is None else [a + g for a, g in zip(acc, grads)]

    def __call__(self, real: Sequence[Batch], noise: Sequence[Batch]) -> Dict[str, tf.Tensor]:
        """One train step on this replica. `real`/`noise` hold the step's micro-batches.

        Returns per-replica metrics; losses are this replica's share of the
        global mean, so a SUM over replicas gives the global value.
        """
        cfg = self.config
        real, noise = list(real), list(noise)
        d_loss = d_norm = 0.0
        real_mean = fake_mean = 0.0
        for d in range(cfg.d_steps):
            grads, step_loss = None, 0.0
            for a in range(cfg.accumulation):
                i = d * cfg.accumulation + a
                loss, g, real_logits, fake_logits = self._d_micro(real[i], noise[i])
                grads, step_loss = self._add(grads, g), step_loss + loss
                real_mean += tf.reduce_sum(real_logits)
                fake_mean += tf.reduce_sum(fake_logits)
            d_norm = self._apply(self.d_optimizer, grads, self.discriminator.trainable_variables)
            d_loss += step_loss / cfg.d_steps
        grads, g_loss = None, 0.0
        for a in range(cfg.accumulation):
            loss, g = self._g_micro(noise[cfg.d_steps * cfg.accumulation + a])
            grads, g_loss = self._add(grads, g), g_loss + loss
        g_norm = self._apply(self.g_optimizer, grads, self.generator.trainable_variables)
        seen = float(cfg.global_batch_size * cfg.accumulation * cfg.d_steps)
        return {"loss/D": d_loss, "loss/G": g_loss,
                "grad_norm/D": d_norm, "grad_norm/G": g_norm,
                "logits/real": real_mean / seen, "logits/fake": fake_mean / seen}
