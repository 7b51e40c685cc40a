"""BigGAN at the paper's shape for the tests: G and D of the paper configs, and a GANStep on them.

`_paper_models` builds the reference configuration (ch 96, shared embedding of 128,
hierarchical z, attention at 64, 1000 classes) or a narrow one of the same architecture;
`_tiny_step` a one-step GANStep on a narrow one. Used by tests/families/test_biggan_networks.py,
models/test_recompute.py, objective/test_regularizers.py, generate/test_sampling.py and
train/test_step.py.
"""

from __future__ import annotations

import tf_keras as keras

from paragan_tf.families.biggan import networks as biggan
from paragan_tf.families.biggan import objective
from paragan_tf.objective import losses
from paragan_tf.train import step as step_lib


def _paper_models(resolution: int, ch_g: int = 96, ch_d: int = 96, classes: int = 1000,
                  dim_z: int = 120, **kwargs):
    g = biggan.Generator(resolution=resolution, num_classes=classes, ch=ch_g, dim_z=dim_z,
                         shared_dim=128 if ch_g == 96 else 8, hierarchical_z=True,
                         attention_resolutions=(64,), **kwargs)
    d = biggan.Discriminator(resolution=resolution, num_classes=classes, ch=ch_d,
                             attention_resolutions=(64,), init=kwargs.get("init", "ortho"),
                             recompute=kwargs.get("recompute", False))
    biggan.build(g, d, 3)
    return g, d


def _tiny_step(resolution: int, accumulation: int = 1, ortho_reg: float = 1e-4,
               recompute: bool = False):
    slots = len(biggan.G_ARCH[resolution][0]) + 1
    keras.utils.set_random_seed(0)
    g, d = _paper_models(resolution, ch_g=4, ch_d=8, classes=5, dim_z=4 * slots,
                         recompute=recompute)
    g_opt, d_opt = keras.optimizers.Adam(1e-4), keras.optimizers.Adam(1e-4)
    g_opt.build(g.trainable_variables)  # as the trainer does: no retrace to create slots
    d_opt.build(d.trainable_variables)
    step = step_lib.GANStep(g, d, g_opt, d_opt,
                            objective.ClassConditional(losses.LossPair(losses.hinge)),
                            step_lib.StepConfig(2, 1, accumulation, ortho_reg=ortho_reg))
    return g, d, step
