"""D's extra terms and the state that follows D's outputs, as one train step uses them: the
penalties added to D's loss in each micro-batch (R1/R2, LeCam, bCR: objective/penalties.py's
formulas) and, after each D update, LeCam's moving averages and ADA's r_t and p
(objective/ada.py) from that update's all-reduced logit sums.

R1/R2's input gradient is taken of D's logits in a pass of its own (training=False: no
power-iteration update, so it may sit in a tf.cond for the lazy interval), differentiated
with respect to a float32 copy of D's inputs. Under loss scaling it is taken of the logits
times D's scale over the update's examples (the scale each example's loss term gets in D's
own backward pass, so the one dynamic scale fits both passes) and divided back in float32,
as StyleGAN's TensorFlow code does.
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf

from paragan_tf import precision as precision_lib
from paragan_tf.distribute import staging
from paragan_tf.objective import ada as ada_lib
from paragan_tf.objective import augment as augment_lib
from paragan_tf.objective import penalties as penalties_lib


class DTerms:
    """D's penalties and the state that follows D's outputs, for one network D.

    examples_per_update: the examples of one D update over all replicas and micro-batches.
    lecam_state: float32 [2], the moving averages of D's mean real and fake logits;
      required when penalties.lecam_weight > 0.
    """

    def __init__(self, discriminator, penalties: penalties_lib.Penalties,
                 precision: precision_lib.Precision, d_optimizer,
                 examples_per_update: int, augment=None,
                 lecam_state: Optional[tf.Variable] = None):
        if penalties.lecam_weight > 0 and lecam_state is None:
            raise ValueError("penalties.lecam_weight > 0 needs the LeCam state variable")
        self.discriminator, self.penalties, self.precision = discriminator, penalties, precision
        self.d_optimizer, self.examples = d_optimizer, float(examples_per_update)
        self.augment, self.lecam_state = augment, lecam_state

    @property
    def any(self) -> bool:
        """Whether any penalty is added to D's loss."""
        return self.penalties.any

    def terms(self, inputs, labels, real_logits, fake_logits, z) -> tf.Tensor:
        """The penalties per (fake, real) pair of D's `inputs`, float32."""
        p = self.penalties
        terms = tf.zeros_like(real_logits, tf.float32)
        if p.input_gradients:
            terms += self.gradient_penalties(inputs, labels)
        if p.lecam_weight > 0:
            terms += penalties_lib.lecam(real_logits, fake_logits, self.lecam_state[0],
                                         self.lecam_state[1], p.lecam_weight)
        if p.bcr:
            moved = augment_lib.consistency_transform(inputs, augment_lib.seed_from(z, 2))
            moved_fake, moved_real = tf.split(
                self.discriminator((moved, labels), training=True), 2)
            terms += (penalties_lib.consistency(real_logits, moved_real, p.bcr_real) +
                      penalties_lib.consistency(fake_logits, moved_fake, p.bcr_fake))
        return terms

    def gradient_penalties(self, inputs, labels) -> tf.Tensor:
        """R1 on the real half, R2 on the fake half; every `lazy_interval`-th D update x k
        (see the module doc)."""
        p, precision = self.penalties, self.precision

        def penalty():
            x = tf.cast(inputs, tf.float32)
            with tf.GradientTape(watch_accessed_variables=False) as input_tape:
                input_tape.watch(x)
                with staging.twice():  # pipeline stages: its backward is differentiated
                    logits = self.discriminator((x, labels), training=False)
                total = tf.reduce_sum(tf.cast(logits, tf.float32))
                if precision.scaling:
                    total = precision.scale(total) / self.examples
            input_grads = input_tape.gradient(total, x)
            if precision.scaling:
                input_grads = precision.unscale([input_grads])[0] * self.examples
            fake_grads, real_grads = tf.split(input_grads, 2)
            return p.lazy_interval * (penalties_lib.gradient_penalty(real_grads, p.r1_gamma) +
                                      penalties_lib.gradient_penalty(fake_grads, p.r2_gamma))
        if p.lazy_interval == 1:
            return penalty()
        due = tf.equal(self.d_optimizer.iterations % p.lazy_interval, 0)
        return tf.cond(due, penalty, lambda: tf.zeros([tf.shape(inputs)[0] // 2]))

    def after_update(self, real_sum, fake_sum, sign_sum, count: float, applied) -> None:
        """State that follows D's outputs, from one update's sums of its real and fake
        logits and of the real logits' signs over `count` examples per replica, all-reduced
        here (kept only if `applied`): LeCam's averages of the mean logits, ADA's r_t and p."""
        lecam = self.penalties.lecam_weight > 0
        ada = isinstance(self.augment, ada_lib.AdaptiveAugment)
        if not (lecam or ada):
            return
        ctx = tf.distribute.get_replica_context()
        sums = ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                              tf.stack([real_sum, fake_sum, sign_sum]))
        if lecam:
            decay = self.penalties.lecam_decay
            state = tf.convert_to_tensor(self.lecam_state)
            moved = decay * state + (1.0 - decay) * sums[:2] / count
            self.lecam_state.assign(tf.where(applied, moved, state))
        if ada:
            self.augment.observe(sums[2], tf.constant(count), applied)
