"""The layers every family builds from: spectrally normalised layers and conditional BN
(BigGAN's attention and residual blocks, built from these: models/blocks.py).

Numerics that must stay in float32 whatever the compute dtype (mixed precision):
the spectral-norm power iteration, batch-norm statistics and the BN affine
parameters. These layers therefore hold plain float32 variables (a float32
Keras policy: under mixed_bfloat16 Keras would hand out AutoCastVariables that
read as bfloat16 inside any enclosing layer) and cast by hand to the compute
dtype of the global policy in force when they were built (see layout/rules.py).

Initialisation and epsilons follow BigGAN-PyTorch and are chosen per network
with `Numerics` (its names: G_init/D_init, BN_eps, SN_eps).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import tensorflow as tf
import tf_keras as keras

INITS = ("ortho", "N02", "glorot")
EMBEDDING_INITS = ("init", "zeros")


@dataclasses.dataclass(frozen=True)
class Numerics:
    """The reference-fidelity settings every layer of one network shares.

    init: weight initialisation of every conv, linear and embedding weight, as
      BigGAN-PyTorch's `--G_init/--D_init`: 'ortho' (orthogonal), 'N02'
      (normal, std 0.02), 'glorot' (Glorot/Xavier uniform). Biases start at 0.
    embedding_init: the class-conditional BN gain/bias tables (per-class
      conditioning): 'init' initialises them like every other weight, as the
      reference does (they are nn.Embedding there); 'zeros' starts every class
      at gain 1, bias 0.
    bn_epsilon: added to the batch variance (reference BN_eps, default 1e-5).
    sn_epsilon: floor of the norms in the spectral-norm power iteration
      (reference SN_eps, default 1e-12; its ImageNet scripts use 1e-6).
    bn_unbiased: BN's moving variance follows the batch variance times n / (n - 1), as
      torch's BatchNorm2d (pix2pix's reference); False: the batch variance itself.
    """

    init: str = "ortho"
    embedding_init: str = "init"
    bn_epsilon: float = 1e-5
    sn_epsilon: float = 1e-12
    bn_unbiased: bool = False

    def __post_init__(self):
        if self.init not in INITS:
            raise ValueError(f"init={self.init!r} must be one of {INITS}")
        if self.embedding_init not in EMBEDDING_INITS:
            raise ValueError(f"embedding_init={self.embedding_init!r} must be one of "
                             f"{EMBEDDING_INITS}")
        if self.bn_epsilon <= 0 or self.sn_epsilon <= 0:
            raise ValueError("bn_epsilon and sn_epsilon must be positive")

    def initializer(self) -> keras.initializers.Initializer:
        """The initialiser of conv, linear and embedding weights."""
        if self.init == "ortho":
            return keras.initializers.Orthogonal()
        if self.init == "N02":
            return keras.initializers.RandomNormal(0.0, 0.02)
        return keras.initializers.GlorotUniform()

    def embedding_initializer(self) -> keras.initializers.Initializer:
        """The initialiser of class-conditional BN tables."""
        return self.initializer() if self.embedding_init == "init" else keras.initializers.Zeros()


REFERENCE = Numerics()


def _float32_layer_kwargs(kwargs: dict, compute_dtype: Optional[str]) -> str:
    """Forces a float32 variable policy; returns the dtype the layer computes in."""
    kwargs["dtype"] = "float32"
    kwargs["autocast"] = False
    return compute_dtype or keras.mixed_precision.global_policy().compute_dtype


def _l2_normalize(x: tf.Tensor, epsilon: float) -> tf.Tensor:
    """x / max(||x||, epsilon), as torch.nn.functional.normalize (the reference's SN)."""
    return x * tf.math.rsqrt(tf.maximum(tf.reduce_sum(tf.square(x)), epsilon * epsilon))


class SpectralNormalized(keras.layers.Layer):
    """Base for layers whose kernel is divided by its largest singular value.

    One power iteration per training call (Miyato et al. 2018); the estimate
    `u` is a non-trainable variable, so the iteration warm-starts across steps
    and is saved in checkpoints. Replicas see identical kernels, hence compute
    identical `u`: ONLY_FIRST_REPLICA aggregation lets each replica assign it.
    spectral_norm=False: the kernel as it is, no `u` (networks without SN: pix2pix).
    """

    def __init__(self, compute_dtype: Optional[str] = None, numerics: Numerics = REFERENCE,
                 spectral_norm: bool = True, **kwargs):
        # compute_dtype: None follows the global policy; "float32" keeps a layer
        # (D's output layers) in float32 under mixed precision.
        self.op_dtype = _float32_layer_kwargs(kwargs, compute_dtype)
        super().__init__(**kwargs)
        self.numerics, self.spectral_norm = numerics, spectral_norm

    def _build_kernel(self, shape, use_bias: bool) -> None:
        """Creates the float32 kernel (initialised per `numerics.init`), the bias and `u`."""
        self.kernel = self.add_weight(name="kernel", shape=shape, dtype=tf.float32,
                                      initializer=self.numerics.initializer())
        self.bias = (self.add_weight(name="bias", shape=(shape[-1],), initializer="zeros",
                                     dtype=tf.float32) if use_bias else None)
        if self.spectral_norm:
            self._build_sn(shape[-1])

    def _build_sn(self, num_out: int) -> None:
        self.sn_u = self.add_weight(
            name="sn_u", shape=(1, num_out), dtype=tf.float32,
            initializer=keras.initializers.RandomNormal(), trainable=False,
            synchronization=tf.VariableSynchronization.ON_WRITE,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    def _normalized(self, kernel: tf.Variable, training: bool) -> tf.Tensor:
        if not self.spectral_norm:
            return tf.cast(kernel, self.op_dtype)
        w = tf.reshape(tf.convert_to_tensor(kernel), [-1, kernel.shape[-1]])
        # The power iteration is not differentiated (the reference runs it under
        # torch.no_grad()): it reads a stopped w, so no gradient tape records its ops.
        w_fixed, u = tf.stop_gradient(w), tf.convert_to_tensor(self.sn_u)
        eps = self.numerics.sn_epsilon
        v = _l2_normalize(tf.matmul(u, w_fixed, transpose_b=True), eps)
        u_new = _l2_normalize(tf.matmul(v, w_fixed), eps)
        if training:
            self.sn_u.assign(u_new)
        sigma = tf.squeeze(tf.matmul(tf.matmul(v, w), u_new, transpose_b=True))
        return tf.cast(kernel / sigma, self.op_dtype)


class SNConv2D(SpectralNormalized):
    """2-D convolution (NHWC, stride 1, SAME padding) with a spectrally normalised kernel."""

    def __init__(self, filters: int, kernel_size: int = 3, use_bias: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.filters, self.kernel_size, self.use_bias = filters, kernel_size, use_bias

    def build(self, input_shape):
        self._build_kernel((self.kernel_size, self.kernel_size, int(input_shape[-1]),
                            self.filters), self.use_bias)
        super().build(input_shape)

    def call(self, x, training=False):
        x = tf.cast(x, self.op_dtype)
        y = tf.nn.conv2d(x, self._normalized(self.kernel, training), 1, "SAME")
        if self.bias is not None:
            y = y + tf.cast(self.bias, y.dtype)
        return y


class SNDense(SpectralNormalized):
    """Fully connected layer with a spectrally normalised kernel."""

    def __init__(self, units: int, use_bias: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.units, self.use_bias = units, use_bias

    def build(self, input_shape):
        self._build_kernel((int(input_shape[-1]), self.units), self.use_bias)
        super().build(input_shape)

    def call(self, x, training=False):
        x = tf.cast(x, self.op_dtype)
        y = tf.matmul(x, self._normalized(self.kernel, training))
        if self.bias is not None:
            y = y + tf.cast(self.bias, y.dtype)
        return y


class SNEmbedding(SpectralNormalized):
    """Class embedding table with spectral normalisation (the projection D's class term)."""

    def __init__(self, num_classes: int, dim: int, **kwargs):
        super().__init__(**kwargs)
        self.num_classes, self.dim = num_classes, dim

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.num_classes, self.dim),
            initializer=self.numerics.initializer(), dtype=tf.float32)
        self._build_sn(self.dim)
        super().build(input_shape)

    def call(self, labels, training=False):
        return tf.gather(self._normalized(self.embeddings, training), labels)


class ConditionalBatchNorm(keras.layers.Layer):
    """Batch norm whose gain and bias come from the conditioning (BigGAN's ccbn).

    conditioning:
      "none": ordinary BN with a learnable gain and bias (G's output BN);
      "class": gain and bias are per-class embeddings (num_classes x C each),
        as the reference CIFAR BigGAN;
      "vector": gain and bias are bias-free SN linear maps of a conditioning
        vector (shared class embedding concatenated with a z chunk).
    The gain is parameterised as 1 + delta so a fresh layer is the identity.

    Statistics are float32. With `sync=True` mean and variance are computed
    over the global batch (sum and sum of squares all-reduced across replicas),
    which makes N replicas with batch B behave exactly like one with N*B.
    """

    def __init__(self, conditioning: str = "none", num_classes: int = 0, sync: bool = False,
                 momentum: float = 0.9, numerics: Numerics = REFERENCE, **kwargs):
        self.op_dtype = _float32_layer_kwargs(kwargs, None)
        super().__init__(**kwargs)
        if conditioning not in ("none", "class", "vector"):
            raise ValueError(f"conditioning must be none, class or vector, got {conditioning!r}")
        self.conditioning = conditioning
        self.num_classes = num_classes
        self.sync = sync
        self.momentum = momentum
        self.numerics = numerics
        self.epsilon = numerics.bn_epsilon

    def build(self, input_shape):
        channels = int(input_shape[-1])
        if self.conditioning == "none":
            self.gain = self.add_weight(name="gain", shape=(channels,), initializer="ones")
            self.bias = self.add_weight(name="bias", shape=(channels,), initializer="zeros")
        elif self.conditioning == "class":
            # An initialiser instance each: an unseeded one called twice repeats its values.
            shape = (self.num_classes, channels)
            self.gain_embed = self.add_weight(
                name="gain_embeddings", shape=shape,
                initializer=self.numerics.embedding_initializer())
            self.bias_embed = self.add_weight(
                name="bias_embeddings", shape=shape,
                initializer=self.numerics.embedding_initializer())
        else:
            self.gain_linear = SNDense(channels, use_bias=False, name="gain",
                                       numerics=self.numerics)
            self.bias_linear = SNDense(channels, use_bias=False, name="bias",
                                       numerics=self.numerics)
        # ON_READ like Keras BN: each replica updates its own copy, reads average.
        stat = dict(shape=(channels,), trainable=False, dtype=tf.float32,
                    synchronization=tf.VariableSynchronization.ON_READ,
                    aggregation=tf.VariableAggregation.MEAN)
        self.moving_mean = self.add_weight(name="moving_mean", initializer="zeros", **stat)
        self.moving_variance = self.add_weight(name="moving_variance", initializer="ones", **stat)
        super().build(input_shape)

    def _batch_moments(self, x):
        """(mean, variance, the count of values per channel): the global batch's with sync."""
        axes, count = [0, 1, 2], tf.cast(tf.reduce_prod(tf.shape(x)[:-1]), tf.float32)
        ctx = tf.distribute.get_replica_context()
        if self.sync and ctx is not None and ctx.num_replicas_in_sync > 1:
            s, ss, n = ctx.all_reduce(
                tf.distribute.ReduceOp.SUM,
                [tf.reduce_sum(x, axes), tf.reduce_sum(tf.square(x), axes), count])
            mean = s / n
            return mean, tf.maximum(ss / n - tf.square(mean), 0.0), n
        return (*tf.nn.moments(x, axes), count)

    def _affine(self, condition, training):
        if self.conditioning == "none":
            return self.gain[None, :], self.bias[None, :]
        if self.conditioning == "class":
            if condition.dtype.is_floating:  # class weights [b, classes]: interpolation
                weights = tf.cast(condition, tf.float32)
                return (1.0 + tf.matmul(weights, self.gain_embed),
                        tf.matmul(weights, self.bias_embed))
            labels = tf.cast(condition, tf.int32)
            return 1.0 + tf.gather(self.gain_embed, labels), tf.gather(self.bias_embed, labels)
        condition = tf.cast(condition, tf.float32)
        return (1.0 + tf.cast(self.gain_linear(condition, training=training), tf.float32),
                tf.cast(self.bias_linear(condition, training=training), tf.float32))

    def _fusable(self) -> bool:
        """Ordinary BN over this replica's batch: TensorFlow's fused op serves it."""
        ctx = tf.distribute.get_replica_context()
        synced = self.sync and ctx is not None and ctx.num_replicas_in_sync > 1
        return self.conditioning == "none" and not synced

    def _fused(self, x, training):
        """One fused op each way (FusedBatchNormV3 and its gradient; oneDNN's on x86) in
        place of a dozen with casts around them: the statistics are float32 whatever x's
        dtype, as the unfused path's (docs/benchmarks.md, "pix2pix against its reference")."""
        x = tf.cast(x, self.op_dtype)
        empty = tf.constant([], tf.float32)
        mean, var = (empty, empty) if training else (self.moving_mean, self.moving_variance)
        # The raw op takes epsilon as it is (tf.nn's wrapper raises it to 1.001e-5).
        y, mean, unbiased = tf.raw_ops.FusedBatchNormV3(
            x=x, scale=self.gain, offset=self.bias, mean=mean, variance=var,
            epsilon=self.epsilon, is_training=training)[:3]
        if training:  # its batch variance comes Bessel-corrected
            n = tf.cast(tf.reduce_prod(tf.shape(x)[:-1]), tf.float32)
            moved = unbiased if self.numerics.bn_unbiased else unbiased * (
                tf.maximum(n - 1.0, 1.0) / n)
            m = self.momentum
            self.moving_mean.assign(m * self.moving_mean + (1.0 - m) * mean)
            self.moving_variance.assign(m * self.moving_variance + (1.0 - m) * moved)
        return y

    def call(self, x, condition=None, training=False, groups: int = 1):
        """groups > 1 (training): x holds that many batches, each normalised by its own
        statistics, the moving ones moved by each in turn: as that many calls, in order."""
        if groups > 1 and training:
            parts = [tf.split(t, groups) if t is not None else [None] * groups
                     for t in (x, condition)]
            return tf.concat([self.call(part, cond, training) for part, cond in zip(*parts)], 0)
        out_dtype = self.op_dtype
        if self._fusable():
            return self._fused(x, bool(training))
        x = tf.cast(x, tf.float32)
        if training:
            mean, var, n = self._batch_moments(x)
            m = self.momentum
            moved = var * n / tf.maximum(n - 1.0, 1.0) if self.numerics.bn_unbiased else var
            self.moving_mean.assign(m * self.moving_mean + (1.0 - m) * mean)
            self.moving_variance.assign(m * self.moving_variance + (1.0 - m) * moved)
        else:
            mean, var = self.moving_mean, self.moving_variance
        gain, bias = self._affine(condition, training)
        y = (x - mean) * tf.math.rsqrt(var + self.epsilon)
        y = y * gain[:, None, None, :] + bias[:, None, None, :]
        return tf.cast(y, out_dtype)
