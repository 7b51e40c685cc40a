"""The asymmetric optimization policy: one optimizer per network, configured in gin scopes.

    G/optimizer.learning_rate = 5e-5
    D/optimizer.learning_rate = 2e-4
    D/optimizer.scaling_rule = 'sqrt'

G and D always get separate optimizer objects (and so separate slots and
iteration counters); the scope decides each one's class, learning rate, betas,
schedule and batch-size scaling rule. The update ratio (D updates per G update)
is `train.d_steps`. Policies that bundle these live in gin/policies/.

The scaling manager: when the global batch differs from the batch a learning
rate was tuned at (`reference_batch_size`; typically because the replica count
changed), the base rate is scaled linearly or by the square root of the ratio,
separately per network. A schedule then runs on the scaled rate: linear
warm-up from ~0, then constant, linear or cosine decay. A schedule counts its
own network's updates (D's optimizer counts D updates, d_steps per train step).

Dynamic loss scaling under `layout.precision='mixed_float16'`: its policy
(paragan_tf/precision.py) wraps each optimizer in tf_keras' dynamic
`keras.mixed_precision.LossScaleOptimizer` (its defaults: initial scale 2**15, doubled
after 2000 finite updates in a row, halved on a non-finite one, never below 1), G's and
D's each with its own scale. The wrapper holds the scale and its counter, checkpointed
with the optimizer it wraps (`g_optimizer/loss_scale/current_loss_scale` and
`.../good_steps`, D's alike); paragan_tf/precision.py is what scales losses, unscales
gradients and updates the scale, and the NaN guard (train/nan_guard.py) decides the skip
and applies the update through the inner optimizer. float32 and mixed_bfloat16 runs get
the plain optimizers. Not
available under ParameterServerStrategy or TPUStrategy (tf_keras refuses them: a
ConfigError here). See docs/design.md section 5: float16 has not run on a GPU
here, and on a CPU it is emulated (slow, not wrong).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple

from absl import logging
import gin
import tensorflow as tf
import tf_keras as keras

from paragan_tf import precision as precision_lib
from paragan_tf.distribute import mode as mode_lib
from paragan_tf.errors import ConfigError


class Adam(keras.optimizers.Adam):
    """tf_keras' Adam with each variable's update one fused op (ResourceApplyAdam).

    tf_keras' `update_step` takes 12 ops per variable, each a pass over the weights, and
    recomputes the learning rate (a schedule's whole formula) and the bias corrections for
    every variable: at pix2pix's 57 M weights those passes were a quarter of a bfloat16 step
    at 256 px (docs/benchmarks.md, "pix2pix against its reference"). Here the step's beta
    powers are made once per `apply_gradients` and each variable is updated by TensorFlow's
    own fused Adam kernel: one pass, the same arithmetic in the same order, but its
    (1 - beta_1) and (1 - beta_2) are taken in float32, where tf_keras takes them in
    double (relative 1.3e-5 apart at beta_2 = 0.999): the weights agree with tf_keras' to
    float32's rounding (tests/train/test_optimizers.py). Sparse gradients, AMSGrad, the
    adaptive epsilon and a variable without a single handle (a sharded one) take
    tf_keras' update unchanged.
    """

    _powers = None  # this update's (beta_1 ** t, beta_2 ** t), while `apply_gradients` runs

    def _distributed_apply_gradients_fn(self, distribution, grads_and_vars, **kwargs):
        try:
            return super()._distributed_apply_gradients_fn(distribution, grads_and_vars,
                                                           **kwargs)
        finally:
            self._powers = None

    def _step_powers(self, dtype):
        if self._powers is None or self._powers[0].dtype != dtype:
            local_step = tf.cast(self.iterations + 1, dtype)
            self._powers = (tf.pow(tf.cast(self.beta_1, dtype), local_step),
                            tf.pow(tf.cast(self.beta_2, dtype), local_step),
                            tf.cast(self.learning_rate, dtype))
        return self._powers

    def update_step(self, gradient, variable):
        index = self._index_dict[self._var_key(variable)]
        m, v = self._momentums[index], self._velocities[index]
        handles = [getattr(x, "handle", None) for x in (variable, m, v)]
        if (isinstance(gradient, tf.IndexedSlices) or self.amsgrad or self.adaptive_epsilon
                or any(h is None for h in handles)):
            return super().update_step(gradient, variable)
        dtype = variable.dtype
        beta_1_power, beta_2_power, lr = self._step_powers(dtype)
        return tf.raw_ops.ResourceApplyAdam(
            var=handles[0], m=handles[1], v=handles[2], beta1_power=beta_1_power,
            beta2_power=beta_2_power, lr=lr, beta1=tf.cast(self.beta_1, dtype),
            beta2=tf.cast(self.beta_2, dtype), epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(gradient, dtype))


_CLASSES = {"adam": Adam, "sgd": keras.optimizers.SGD,
            "rmsprop": keras.optimizers.RMSprop}
SCALING_RULES = ("none", "linear", "sqrt")
DECAYS = ("constant", "linear", "cosine")


def scaled_learning_rate(base: float, rule: str, global_batch_size: int,
                         reference_batch_size: int) -> float:
    """`base` tuned at `reference_batch_size`, scaled to `global_batch_size` by `rule`."""
    if rule == "none":
        return base
    ratio = global_batch_size / reference_batch_size
    return base * (ratio if rule == "linear" else math.sqrt(ratio))


class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up to `peak` over `warmup_steps`, then constant, linear or cosine decay.

    Decay starts `hold_steps` updates after the warm-up (the fast first phase at the
    peak) and runs over `decay_steps` updates, down to `final_fraction * peak`, and
    stays there.
    """

    def __init__(self, peak: float, warmup_steps: int = 0, decay: str = "constant",
                 decay_steps: int = 0, final_fraction: float = 0.0, hold_steps: int = 0):
        self.peak, self.warmup_steps, self.decay = peak, warmup_steps, decay
        self.decay_steps, self.final_fraction = decay_steps, final_fraction
        self.hold_steps = hold_steps

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warm = tf.minimum(1.0, (step + 1.0) / max(self.warmup_steps, 1))
        if self.decay == "constant":
            return self.peak * warm
        start = self.warmup_steps + self.hold_steps
        progress = tf.clip_by_value((step - start) / self.decay_steps, 0.0, 1.0)
        if self.decay == "linear":
            shape = 1.0 - progress
        else:
            shape = 0.5 * (1.0 + tf.cos(math.pi * progress))
        return self.peak * warm * (self.final_fraction + (1.0 - self.final_fraction) * shape)

    def get_config(self):
        return dict(peak=self.peak, warmup_steps=self.warmup_steps, decay=self.decay,
                    decay_steps=self.decay_steps, final_fraction=self.final_fraction,
                    hold_steps=self.hold_steps)


@gin.configurable("optimizer", denylist=["network"])
@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizerConfig:
    """One network's optimizer settings (`G/optimizer.*`, `D/optimizer.*` in gin), read in
    its gin scope by experiment.Settings and checked when made.

    Attributes:
      network: "G" or "D": the gin scope it was read in, named in messages (not bound).
      name: adam, sgd or rmsprop.
      learning_rate: the base rate, tuned at `reference_batch_size`.
      beta_1, beta_2, epsilon: Adam's (BigGAN: beta_1=0, beta_2=0.999).
      momentum: for sgd and rmsprop.
      scaling_rule: none, linear or sqrt (the scaling manager, see above).
      reference_batch_size: the global batch `learning_rate` was tuned at;
        required by the linear and sqrt rules.
      warmup_steps: this network's updates of linear warm-up; 0: none.
      decay: constant, linear or cosine, after the warm-up.
      decay_steps: this network's updates the decay lasts (linear, cosine).
      final_fraction: the rate at the end of the decay, as a fraction of the peak.
      hold_steps: this network's updates at the peak between the warm-up and the
        decay (0: the decay starts right after the warm-up).
      initial_loss_scale, loss_scale_growth_steps: the dynamic loss scale's start and
        the finite updates in a row that double it (mixed_float16 only; tf_keras'
        LossScaleOptimizer's initial_scale and dynamic_growth_steps).
    """

    network: str = "G"
    name: str = "adam"
    learning_rate: float = gin.REQUIRED
    beta_1: float = 0.0
    beta_2: float = 0.999
    epsilon: float = 1e-8
    momentum: float = 0.0
    scaling_rule: str = "none"
    reference_batch_size: int = 0
    warmup_steps: int = 0
    decay: str = "constant"
    decay_steps: int = 0
    final_fraction: float = 0.0
    hold_steps: int = 0
    initial_loss_scale: float = 2.0 ** 15
    loss_scale_growth_steps: int = 2000

    def __post_init__(self):
        where = f"{self.network}/optimizer"
        if self.name not in _CLASSES:
            raise ConfigError(f"{where}.name={self.name!r} is unknown; choose one of "
                              f"{sorted(_CLASSES)}")
        if not self.learning_rate > 0:
            raise ConfigError(f"{where}.learning_rate={self.learning_rate} must be positive")
        if self.scaling_rule not in SCALING_RULES:
            raise ConfigError(f"{where}.scaling_rule={self.scaling_rule!r}; choose one of "
                              f"{SCALING_RULES}")
        if self.scaling_rule != "none" and self.reference_batch_size <= 0:
            raise ConfigError(f"{where}.scaling_rule={self.scaling_rule!r} needs "
                              f"{where}.reference_batch_size, the batch the rate was tuned at")
        if self.decay not in DECAYS:
            raise ConfigError(f"{where}.decay={self.decay!r}; choose one of {DECAYS}")
        if self.decay != "constant" and self.decay_steps <= 0:
            raise ConfigError(f"{where}.decay={self.decay!r} needs {where}.decay_steps > 0")
        if self.warmup_steps < 0 or self.hold_steps < 0 or \
                not 0.0 <= self.final_fraction <= 1.0:
            raise ConfigError(f"{where}: warmup_steps and hold_steps must be >= 0, "
                              f"final_fraction in [0, 1]")
        shaping = {k: v for k, v in dict(decay_steps=self.decay_steps,
                                         final_fraction=self.final_fraction,
                                         hold_steps=self.hold_steps).items() if v}
        if shaping and self.decay == "constant":
            raise ConfigError(f"{where}: {', '.join(f'{k}={v}' for k, v in shaping.items())} "
                              f"shape a decay, but {where}.decay is 'constant'")
        if self.initial_loss_scale < 1 or self.loss_scale_growth_steps < 1:
            raise ConfigError(f"{where}: initial_loss_scale must be >= 1, "
                              f"loss_scale_growth_steps >= 1")


def make_optimizer(config: OptimizerConfig, global_batch_size: int,
                   mode: mode_lib.Mode = mode_lib.Mode(), precision: Optional[str] = None):
    """One network's optimizer, as `config` sets it.

    Args:
      config: the network's settings.
      global_batch_size: the effective global batch of one update (all replicas,
        all accumulated micro-batches): what `config.scaling_rule` scales by.
      mode: the run's parallel mode (distribute/mode.py), which makes the optimizer itself
        when it shards Adam's moments (model_parallel.shard_optimizer).
      precision: the run's layout.precision policy (paragan_tf/precision.py), which wraps the
        optimizer for loss scaling; None: the process's tf_keras policy.
    """
    c, network, where = config, config.network, f"{config.network}/optimizer"
    policy = precision_lib.policy(precision or keras.mixed_precision.global_policy().name)
    peak = scaled_learning_rate(c.learning_rate, c.scaling_rule, global_batch_size,
                                c.reference_batch_size)
    logging.info("%s: %s, learning rate %.3g%s%s%s", network, c.name, peak,
                 "" if c.scaling_rule == "none" else
                 f" ({c.learning_rate:.3g} x {c.scaling_rule} rule: global batch "
                 f"{global_batch_size} vs {c.reference_batch_size})",
                 f", warm-up {c.warmup_steps} updates" if c.warmup_steps else "",
                 "" if c.decay == "constant" else
                 f", {c.decay} decay over {c.decay_steps} updates after {c.hold_steps} at the "
                 f"peak")
    rate = (peak if not c.warmup_steps and c.decay == "constant"
            else WarmupDecay(peak, c.warmup_steps, c.decay, c.decay_steps, c.final_fraction,
                             c.hold_steps))
    made = mode.optimizer(where, c.name, policy, learning_rate=rate, beta_1=c.beta_1,
                          beta_2=c.beta_2, epsilon=c.epsilon, name=f"{network}_optimizer")
    if made is not None:
        return made
    # jit_compile=False: the update runs inside our own tf.function (compiled as a
    # whole when the layout asks for XLA), and XLA is not available under
    # MirroredStrategy on logical CPU devices.
    common = dict(learning_rate=rate, jit_compile=False, name=f"{network}_optimizer")
    if c.name == "adam":
        optimizer = Adam(beta_1=c.beta_1, beta_2=c.beta_2, epsilon=c.epsilon, **common)
    else:
        optimizer = _CLASSES[c.name](momentum=c.momentum, **common)
    return policy.wrap(optimizer, network, c.initial_loss_scale, c.loss_scale_growth_steps)


def make_optimizers(configs: Tuple[OptimizerConfig, OptimizerConfig], global_batch_size: int,
                    mode: mode_lib.Mode = mode_lib.Mode(), precision: Optional[str] = None):
    """(G optimizer, D optimizer) from their `configs` (G's, D's), as `mode` and the
    `precision` policy have them."""
    return tuple(make_optimizer(config, global_batch_size, mode, precision)
                 for config in configs)
