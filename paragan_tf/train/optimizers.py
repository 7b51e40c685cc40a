"""Per-network optimizers, configured in gin under the scopes `G/` and `D/`.

    G/optimizer.learning_rate = 5e-5
    D/optimizer.learning_rate = 2e-4

G and D always get separate optimizer objects (and so separate slots and
iteration counters); the scope decides the hyper-parameters of each.
"""

from __future__ import annotations

import gin
import tf_keras as keras

from paragan_tf.errors import ConfigError

_CLASSES = {"adam": keras.optimizers.Adam, "sgd": keras.optimizers.SGD,
            "rmsprop": keras.optimizers.RMSprop}


@gin.configurable("optimizer")
def make_optimizer(network: str, name: str = "adam", learning_rate: float = gin.REQUIRED,
                   beta_1: float = 0.0, beta_2: float = 0.999, epsilon: float = 1e-8,
                   momentum: float = 0.0) -> keras.optimizers.Optimizer:
    """One network's optimizer.

    Args:
      network: "G" or "D"; the gin scope the caller opened, used in error messages.
      name: adam, sgd or rmsprop.
      learning_rate: must be positive.
      beta_1, beta_2, epsilon: Adam's (BigGAN: beta_1=0, beta_2=0.999).
      momentum: for sgd and rmsprop.
    """
    if name not in _CLASSES:
        raise ConfigError(f"{network}/optimizer.name={name!r} is unknown; choose one of "
                          f"{sorted(_CLASSES)}")
    if not learning_rate > 0:
        raise ConfigError(f"{network}/optimizer.learning_rate={learning_rate} must be positive")
    # jit_compile=False: the update runs inside our own tf.function, and XLA is not
    # available under MirroredStrategy on logical CPU devices.
    common = dict(learning_rate=learning_rate, jit_compile=False, name=f"{network}_optimizer")
    if name == "adam":
        return keras.optimizers.Adam(beta_1=beta_1, beta_2=beta_2, epsilon=epsilon, **common)
    return _CLASSES[name](momentum=momentum, **common)


def make_optimizers():
    """(G optimizer, D optimizer), each from its own gin scope."""
    with gin.config_scope("G"):
        g = make_optimizer("G")
    with gin.config_scope("D"):
        d = make_optimizer("D")
    return g, d
