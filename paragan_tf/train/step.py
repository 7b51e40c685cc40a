"""The per-replica GAN step: `d_steps` discriminator updates, then one generator update.

This is the function `strategy.run` executes on every replica, unchanged under
OneDevice, Mirrored, MultiWorkerMirrored and TPU strategies. It reads as the story
(`__call__`): for each D step, D's gradients over the accumulated micro-batches (with D's
penalties), checked and applied by the NaN guard (train/nan_guard.py:
all-reduced, applied only while the step is healthy) and followed by the state that tracks
D's outputs; then G's gradients, checked and applied; the EMA follows in the trainer's
bookkeeping. Each network's precision (paragan_tf/precision.py) scales its loss and
unscales its gradients; the parallel mode (distribute/mode.py) gives the device scopes.
What depends on the GAN family (what G and D take and return, the losses, D's penalties
and the state that follows D's outputs) is its objective's (paragan_tf/families/
contract.py). An objective that `reuses_fakes` (pix2pix's) has G run once per
micro-batch: the last D update judges G's images and G's update differentiates that same
forward pass, as the reference's iteration does.

With a split placement (distribute/model_parallel.py) G's ops run on G's device and D's on
D's, and G's update is differentiated in two parts: D's tape to the images on D's
device, then G's tape from those image gradients on G's device. Without one both
scopes are no-ops; the two-part backward is the same arithmetic either way.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import tensorflow as tf
import tf_keras as keras

from paragan_tf.distribute import mode as mode_lib
from paragan_tf.families import contract
from paragan_tf.objective import regularizers
from paragan_tf.train import nan_guard
from paragan_tf import precision as precision_lib

Batch = Tuple[tf.Tensor, tf.Tensor]


def _sum_beside(acc: tf.Tensor, grad: tf.Tensor) -> tf.Tensor:
    """acc + grad on grad's device (a tensor without one: the enclosing scope's)."""
    with tf.device(grad.device):
        return acc + grad


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
    ortho_reg: float = 0.0  # BigGAN's orthogonal regularisation strength for G, per update
    # ParaGAN's asynchronous update inside a synchronous strategy: the last D
    # update and the G update are computed from the same snapshot of G and D,
    # then both applied (G_{t+1} against D_t instead of D_{t+1}).
    simultaneous: bool = False


def for_experiment(exp, d_steps: Optional[int] = None) -> "GANStep":
    """The step of the run `exp` (a train/experiment.py Experiment) describes, built here for
    both trainers: every setting the step reads comes from `exp`. The asynchronous trainer's
    closures take one D update each (`d_steps`=1; its check_settings refuses what it cannot
    run, such as LeCam and the simultaneous update, by name)."""
    cfg = exp.settings.train
    return GANStep(
        exp.generator, exp.discriminator, exp.g_optimizer, exp.d_optimizer,
        exp.objective,
        StepConfig(cfg.batch_size, cfg.d_steps if d_steps is None else d_steps,
                   cfg.accumulation, cfg.clip_norm, cfg.ortho_reg, cfg.simultaneous),
        mode=exp.mode)


class GANStep:
    """Holds the networks, optimizers and objective, and computes one replica's step.

    objective: the family's objective (paragan_tf/families/contract.py), with D's extra
      terms.
    mode: the parallel mode (distribute/mode.py): the devices of G's and D's ops in this
      replica, and how an update is applied (default: replicated, on the replica's device).
    """

    def __init__(self, generator: keras.Model, discriminator: keras.Model,
                 g_optimizer, d_optimizer, objective: contract.Objective, config: StepConfig,
                 mode: mode_lib.Mode = mode_lib.Mode()):
        self.mode = mode
        self.generator, self.discriminator = generator, discriminator
        self.g_optimizer, self.d_optimizer = g_optimizer, d_optimizer
        # Each network's loss scaling (float16), decided by its optimizer once, here.
        self.g_precision = precision_lib.Precision(g_optimizer)
        self.d_precision = precision_lib.Precision(d_optimizer)
        self.objective, self.config = objective, config

    @property
    def real_batches_per_step(self) -> int:
        return self.config.d_steps * self.config.accumulation

    @property
    def noise_batches_per_step(self) -> int:
        return (self.config.d_steps + 1) * self.config.accumulation

    def _generate(self, real: Optional[Batch], noise: Batch, taped: bool):
        """(G's images for one micro-batch, the tape of G's forward pass or None)."""
        with self.mode.on_g():
            if not taped:
                return self.objective.generate(self.generator, real, noise), None
            with tf.GradientTape() as tape:
                return self.objective.generate(self.generator, real, noise), tape

    def d_micro(self, real: Batch, noise: Batch, fakes=None):
        """One micro-batch of D's update: (loss, gradients, per-example real and fake
        logits). The plans trace this very method, and g_micro (measure/traced.py)."""
        if fakes is None:  # else made earlier by some G (the sample buffer, a G to reuse)
            fakes, _ = self._generate(real, noise, taped=False)
        with self.mode.on_d():
            fakes = tf.stop_gradient(fakes)
            with tf.GradientTape() as tape:
                real_logits, fake_logits, seen = self.objective.judge(
                    self.discriminator, fakes, real, noise)
                d_loss = self.objective.d_loss(real_logits, fake_logits, seen, noise)
                loss = average_over_global_batch(d_loss, self.config.global_batch_size)
                loss /= self.config.accumulation
                scaled = self.d_precision.scale(loss)
            grads = self.d_precision.unscale(
                tape.gradient(scaled, self.discriminator.trainable_variables))
        return (loss, grads, self.objective.per_example(real_logits),
                self.objective.per_example(fake_logits))

    def g_micro(self, noise: Batch, real: Optional[Batch] = None, made=None):
        """real: the real batch for objectives that read it in G's update (pix2pix's
        inputs and targets, a relativistic loss's partners). made: (G's images, the tape
        of their forward pass) of D's update, to reuse; None: G makes them now.

        Differentiated in two parts (see the module doc): D's tape gives the loss's
        gradient with respect to G's images, G's tape takes it from there.
        """
        fakes, g_tape = made if made is not None else self._generate(real, noise, taped=True)
        with self.mode.on_d():
            with tf.GradientTape(watch_accessed_variables=False) as d_tape:
                d_tape.watch(fakes)
                gen_logits, real_logits = self.objective.judge_fakes(
                    self.discriminator, fakes, real, noise)
                g_loss = self.objective.g_loss(gen_logits, real_logits, fakes, real)
                loss = average_over_global_batch(g_loss, self.config.global_batch_size)
                loss /= self.config.accumulation
                scaled = self.g_precision.scale(loss)
            fake_grads = d_tape.gradient(scaled, fakes)
        with self.mode.on_g():
            grads = self.g_precision.unscale(
                g_tape.gradient(fakes, self.generator.trainable_variables,
                                output_gradients=fake_grads))
        return loss, grads, fakes

    def _ortho_gradients(self) -> List[tf.Tensor]:
        """The orthogonal regulariser's gradient for G, once per update (as the reference).

        Divided by the replica count: every replica adds it and the sum is all-reduced.
        """
        variables = self.generator.trainable_variables
        with self.mode.on_g():
            with tf.GradientTape() as tape:
                reg = tf.nn.scale_regularization_loss(
                    self.config.ortho_reg * regularizers.orthogonal(self.generator))
            return tape.gradient(reg, variables,
                                 unconnected_gradients=tf.UnconnectedGradients.ZERO)

    def _add(self, acc, grads):
        # Embedding gradients arrive as IndexedSlices; the tables are small, densify.
        grads = [tf.convert_to_tensor(g) for g in grads]
        if acc is None:
            return grads
        if not self.mode.spread:
            return [a + g for a, g in zip(acc, grads)]
        # A spread replica: each running sum beside its gradient, on its network's or
        # stage's device (unplaced, it would land on the first device).
        return [_sum_beside(a, g) for a, g in zip(acc, grads)]

    def d_gradients(self, real: Sequence[Batch], noise: Sequence[Batch], fakes=None):
        """One D update's loss, gradients and logit sums over its micro-batches.

        Returns (loss, grads, sum of real logits, sum of fake logits, sum of the signs
        of the real logits: ADA's statistic).
        fakes: the micro-batches' generated images, made earlier (the sample buffer);
        None: G makes them from `noise` now.
        """
        grads, loss_sum, real_sum, fake_sum, sign_sum = None, 0.0, 0.0, 0.0, 0.0
        fakes = fakes or [None] * len(real)
        for real_batch, noise_batch, fake in zip(real, noise, fakes):
            loss, g, real_logits, fake_logits = self.d_micro(real_batch, noise_batch, fake)
            grads, loss_sum = self._add(grads, g), loss_sum + loss
            real_sum += tf.reduce_sum(real_logits)
            fake_sum += tf.reduce_sum(fake_logits)
            sign_sum += tf.reduce_sum(tf.sign(real_logits))
        return loss_sum, grads, real_sum, fake_sum, sign_sum

    def g_gradients(self, noise: Sequence[Batch], fakes_out: Optional[list] = None,
                    real: Optional[Sequence[Batch]] = None, made: Optional[list] = None):
        """One G update's loss and gradients over its micro-batches.

        fakes_out: a list that receives the images G generated (the sample buffer).
        real: real micro-batches for a loss that pairs them with G's (relativistic).
        made: per micro-batch, the images and forward tape of D's update to reuse.
        """
        grads, loss_sum = None, 0.0
        for noise_batch, real_batch, made_batch in zip(noise, real or [None] * len(noise),
                                                       made or [None] * len(noise)):
            loss, g, fakes = self.g_micro(noise_batch, real_batch, made_batch)
            grads, loss_sum = self._add(grads, g), loss_sum + loss
            if fakes_out is not None:
                fakes_out.append(fakes)
        if self.config.ortho_reg > 0:
            grads = self._add(grads, self._ortho_gradients())
        return loss_sum, grads

    def _forward_state(self) -> List[tf.Variable]:
        """State the forward passes change outside the optimizers (SN vectors, BN statistics)."""
        return [v for v in self.generator.non_trainable_variables +
                self.discriminator.non_trainable_variables if v.dtype.is_floating]

    def _guard(self) -> nan_guard.Guard:
        """A guard made before this update's forward passes (it keeps what they change)."""
        return nan_guard.Guard(self._forward_state(), self.mode, self.config.clip_norm)

    def d_update(self, real: Sequence[Batch], noise: Sequence[Batch],
                 fakes=None) -> Dict[str, tf.Tensor]:
        """One guarded D update (an asynchronous D closure): metrics as __call__'s.

        fakes: generated images made earlier (see d_gradients); None: G makes them now.
        """
        guard = self._guard()
        loss, grads, real_sum, fake_sum, _ = self.d_gradients(real, noise, fakes)
        norm = guard.update(self.d_precision, self.discriminator, loss, grads)
        guard.restore_if_skipped()
        seen = float(self.config.global_batch_size * len(real))
        return {"loss/D": loss, "grad_norm/D": norm, "logits/real": real_sum / seen,
                "logits/fake": fake_sum / seen, "health/skipped": guard.skipped()}

    def g_update(self, noise: Sequence[Batch], on_fakes=None) -> Dict[str, tf.Tensor]:
        """One guarded G update (an asynchronous G closure).

        on_fakes(fakes, healthy): called with the micro-batches' images G generated
        before its update and whether the update was applied (the sample buffer).
        """
        guard, fakes = self._guard(), []
        loss, grads = self.g_gradients(noise, fakes)
        norm = guard.update(self.g_precision, self.generator, loss, grads)
        guard.restore_if_skipped()
        if on_fakes is not None:
            on_fakes(fakes, guard.healthy)
        return {"loss/G": loss, "grad_norm/G": norm, "health/skipped": guard.skipped()}

    def __call__(self, real: Sequence[Batch], noise: Sequence[Batch]) -> Dict[str, tf.Tensor]:
        """One train step on this replica. `real`/`noise` hold the step's micro-batches.

        Returns per-replica metrics; losses are this replica's share of the
        global mean, so a SUM over replicas gives the global value. Under loss scaling
        also `health/loss_scale_lowered`: 1 when the step lowered G's or D's scale.
        """
        cfg, k = self.config, self.config.accumulation
        scaled = [p for p in (self.d_precision, self.g_precision) if p.scaling]
        scales = [p.loss_scale for p in scaled]  # read before this step's updates
        real, noise = list(real), list(noise)
        guard = self._guard()  # one for the whole step: a skip skips the rest of it
        d_loss = d_norm = real_sum = fake_sum = 0.0
        last = slice((cfg.d_steps - 1) * k, cfg.d_steps * k)  # the last D update's batches
        reuse = self.objective.reuses_fakes
        # G's update reuses the last D update's images (and their noise), or G makes new
        # ones from fresh noise; an objective that reads real batches in G's update takes
        # the last D update's.
        g_noise = noise[last] if reuse else noise[cfg.d_steps * k:]
        g_real = real[last] if self.objective.pairs_real else None
        g_grads = made = None
        for d in range(cfg.d_steps):
            batches = slice(d * k, (d + 1) * k)
            if reuse and d == cfg.d_steps - 1:  # G's forward passes, taped for G's update
                made = [self._generate(r, n, taped=True)
                        for r, n in zip(real[batches], noise[batches])]
            loss, grads, r, f, signs = self.d_gradients(
                real[batches], noise[batches], made and [fakes for fakes, _ in made])
            grads, d_norm = guard.check(loss, grads)
            d_loss, real_sum, fake_sum = d_loss + loss / cfg.d_steps, real_sum + r, fake_sum + f
            if cfg.simultaneous and d == cfg.d_steps - 1:
                # Both gradients before either update: G sees the D this D step starts from.
                g_loss, g_grads = self.g_gradients(g_noise, real=g_real, made=made)
                g_grads, g_norm = guard.check(g_loss, g_grads)
            guard.apply(self.d_precision, self.discriminator, grads, d_norm)
            self.objective.after_d_update(r, f, signs, float(cfg.global_batch_size * k),
                                          guard.healthy)
        if g_grads is None:
            g_loss, g_grads = self.g_gradients(g_noise, real=g_real, made=made)
            g_grads, g_norm = guard.check(g_loss, g_grads)
        guard.apply(self.g_precision, self.generator, g_grads, g_norm)
        guard.restore_if_skipped()
        seen = float(cfg.global_batch_size * k * cfg.d_steps)
        metrics = {"loss/D": d_loss, "loss/G": g_loss,
                   "grad_norm/D": d_norm, "grad_norm/G": g_norm,
                   "logits/real": real_sum / seen, "logits/fake": fake_sum / seen,
                   "health/skipped": guard.skipped()}
        if scaled:
            lowered = [p.lowered(before) for p, before in zip(scaled, scales)]
            metrics["health/loss_scale_lowered"] = tf.cast(tf.reduce_any(lowered), tf.float32)
        return metrics

