"""The BigGAN networks (families/biggan/networks.py): golden shapes, the reference's
parameter counts, its initialisers and numerics."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.errors import ConfigError
from paragan_tf import models
from paragan_tf.families.biggan import networks as biggan
from paragan_tf.models import layers
from tests.helpers.paper_biggan import _paper_models

# Shapes at tiny widths for every resolution; the parameter counts are pinned to the
# reference implementation's at full width below (test_parameter_counts_match_the_reference).
RESOLUTIONS = sorted(biggan.G_ARCH)


def _tiny(resolution: int):
    if resolution == 32:
        g_kw, d_kw = dict(dim_z=16), {}
    else:
        slots = len(biggan.G_ARCH[resolution][0]) + 1
        g_kw = dict(dim_z=4 * slots, shared_dim=8, hierarchical_z=True, attention_resolutions=(64,))
        d_kw = dict(attention_resolutions=(64,))
    g = biggan.Generator(resolution=resolution, num_classes=5, out_channels=3, ch=4, **g_kw)
    d = biggan.Discriminator(resolution=resolution, num_classes=5, ch=8, **d_kw)
    biggan.build(g, d, 3)
    return g, d


@pytest.mark.parametrize("resolution", RESOLUTIONS)
def test_shapes(resolution):
    g, d = _tiny(resolution)
    z = tf.random.normal([3, g.dim_z])
    labels = tf.constant([0, 2, 4])
    images = g((z, labels), training=True)
    assert images.shape == (3, resolution, resolution, 3)
    assert images.dtype == tf.float32
    assert float(tf.reduce_max(tf.abs(images))) <= 1.0
    logits = d((images, labels), training=True)
    assert logits.shape == (3,) and logits.dtype == tf.float32


def test_reference_cifar10_parameter_counts():
    g = biggan.Generator(resolution=32, num_classes=10, out_channels=3, ch=64, dim_z=128)
    d = biggan.Discriminator(resolution=32, num_classes=10, ch=64)
    biggan.build(g, d, 3)
    assert models.count_trainable(g) == 4_304_387
    assert models.count_trainable(d) == 4_207_361


def test_unsupported_resolution_and_bad_hierarchy_are_config_errors():
    with pytest.raises(ConfigError, match="Generator.resolution=48"):
        biggan.Generator(resolution=48, num_classes=10)
    with pytest.raises(ConfigError, match="dim_z"):
        biggan.Generator(resolution=64, num_classes=10, dim_z=17, shared_dim=8,
                         hierarchical_z=True)


# The parameter counts are BigGAN-PyTorch's (commit 98459431), counted by
# instantiating its BigGAN.py with torch 2.13 on CPU: G_ch = D_ch = 96,
# dim_z = 120 (the reference truncates to a multiple of the chunk count: 119 at
# 256 px), shared_dim = 128, hierarchical z, attention at 64, 1000 classes. The
# reference has no 512 or 1024 px discriminator and no 1024 px generator; those
# counts are our own tables' (biggan.py says how they are derived).
# resolution -> (dim_z, G params, D params); None: no reference table.
REFERENCE_COUNTS = {
    32: (120, 9_466_115, 9_836_929),
    64: (120, 70_239_108, 45_500_449),
    128: (120, 70_433_988, 87_982_370),  # the paper: 70.4M / 88.0M
    256: (119, 82_108_548, 99_225_890),
    512: (120, 82_253_988, None),
}
OUR_COUNTS = {512: (120, 82_253_988, 99_401_282), 1024: (117, 82_397_892, 99_576_674)}


@pytest.mark.parametrize("resolution", [32, 64, 128, 256, 512, 1024])
def test_parameter_counts_match_the_reference(resolution):
    dim_z, g_count, d_count = OUR_COUNTS.get(resolution, REFERENCE_COUNTS.get(resolution))
    # Built in a throwaway graph: its variables get their shapes but their initialisers and
    # the building forward pass never run (at 1024 px: 5 CPU s against 29 eagerly, on an
    # Intel Xeon family 6 model 106, 2026-11-28). The counts depend on neither.
    with tf.Graph().as_default():
        g, d = _paper_models(resolution, dim_z=dim_z, init="N02")
        assert models.count_trainable(g) == g_count
        assert models.count_trainable(d) == d_count


def _glorot_limit(kernel: np.ndarray) -> float:
    receptive = int(np.prod(kernel.shape[:-2]))
    return float(np.sqrt(6.0 / (receptive * (kernel.shape[-2] + kernel.shape[-1]))))


@pytest.mark.parametrize("init,check", [
    ("N02", lambda k: abs(k.std() - 0.02) < 0.002 and abs(k.mean()) < 0.002),
    ("glorot", lambda k: (np.abs(k).max() <= _glorot_limit(k) + 1e-6
                          and np.abs(k).max() > 0.9 * _glorot_limit(k))),
    ("ortho", lambda k: np.allclose(k.reshape(-1, k.shape[-1]).T @ k.reshape(-1, k.shape[-1]),
                                    np.eye(k.shape[-1]), atol=1e-4)),
])
def test_init_choices_follow_the_reference(init, check):
    g = biggan.Generator(resolution=32, num_classes=10, ch=16, dim_z=32, init=init)
    d = biggan.Discriminator(resolution=32, num_classes=10, ch=16, init=init)
    biggan.build(g, d, 3)
    assert check(g.blocks[1].conv1.kernel.numpy())
    assert check(d.blocks[1].conv1.kernel.numpy())
    # Per-class BN tables are initialised like the weights (reference: nn.Embedding).
    bn = g.blocks[0].bn1
    assert np.abs(bn.gain_embed.numpy()).max() > 0
    # Drawn independently (one unseeded initialiser for both once gave them equal values).
    assert not np.allclose(bn.gain_embed.numpy(), bn.bias_embed.numpy())
    assert np.all(g.blocks[0].conv1.bias.numpy() == 0)


def test_embedding_zeros_bn_and_sn_epsilons_are_used():
    g = biggan.Generator(resolution=32, num_classes=10, ch=4, dim_z=16, embedding_init="zeros",
                         bn_epsilon=1e-3, sn_epsilon=1e-6)
    d = biggan.Discriminator(resolution=32, num_classes=10, ch=4)
    biggan.build(g, d, 3)
    assert np.all(g.blocks[0].bn1.gain_embed.numpy() == 0)
    assert g.blocks[0].bn1.epsilon == 1e-3 and g.out_bn.epsilon == 1e-3
    assert g.blocks[0].conv1.numerics.sn_epsilon == 1e-6
    # SN epsilon floors the norm of the power iteration's vectors (F.normalize's eps).
    tiny = tf.constant([[1e-9, 0.0]])
    np.testing.assert_allclose(layers._l2_normalize(tiny, 1e-6).numpy(), [[1e-3, 0.0]], rtol=1e-5)
    with pytest.raises(ConfigError, match="Generator.init='he'"):
        biggan.Generator(resolution=32, num_classes=10, init="he")
