"""A GAN family of a user's own, outside paragan_tf/: an unconditional DCGAN (Radford et
al. 2016) on labelled images, whose labels it ignores. It is registered as any user's
family would be, by importing its module from a gin file (tests/plugins/tiny_dcgan.gin:
`import dcgan_family`, with this folder on PYTHONPATH), and uses paragan_tf's public
parts only: the contract and registry (paragan_tf/families/), the loss pairs, the sample
evaluator and the noise-to-image export. docs/families.md walks through it;
tests/e2e/test_family_plugin.py trains, samples, exports and plans it with the binaries.
"""

from __future__ import annotations

import gin
import numpy as np
import tensorflow as tf
import tf_keras as keras

from paragan_tf import families
from paragan_tf.data import datasets
from paragan_tf.errors import ConfigError
from paragan_tf.eval import evaluator as evaluator_lib
from paragan_tf.families import contract
from paragan_tf.generate import export as export_lib
from paragan_tf.generate import images as images_lib
from paragan_tf.generate import sampling
from paragan_tf.objective import losses


@gin.configurable(denylist=["resolution", "out_channels", "name"])
class DCGANGenerator(contract.NoBlocks, keras.Model):
    """z -> images in [-1, 1]: a dense layer to 4 x 4 x 4ch, then stride-2 transposed
    convolutions (halving the width) to `resolution`, tanh. Labels are taken and ignored,
    so the noise batches, the evaluator and the export work as for BigGAN."""

    num_classes = 1

    def __init__(self, resolution: int = 32, out_channels: int = 1, ch: int = 16,
                 dim_z: int = 32, name: str = "generator"):
        super().__init__(name=name)
        self.resolution, self.out_channels, self.dim_z = resolution, out_channels, dim_z
        ups = int(np.log2(resolution // 4))
        self.dense = keras.layers.Dense(4 * 4 * 4 * ch)
        self.ups = [keras.layers.Conv2DTranspose(max(ch, 4 * ch >> (i + 1)), 4, 2, "same")
                    for i in range(ups)]
        self.out = keras.layers.Conv2D(out_channels, 3, padding="same")

    def call_inputs(self, batch: int):
        return (tf.TensorSpec([batch, self.dim_z], tf.float32),
                tf.TensorSpec([batch], tf.int32))

    def call(self, inputs, training=False):
        z, _ = inputs
        h = tf.reshape(self.dense(z), [-1, 4, 4, self.dense.units // 16])
        for up in self.ups:
            h = tf.nn.leaky_relu(up(h), 0.2)
        return tf.tanh(tf.cast(self.out(h), tf.float32))


@gin.configurable(denylist=["name"])
class DCGANDiscriminator(contract.NoBlocks, keras.Model):
    """(images, labels) -> one logit per image: stride-2 convolutions, then a dense layer;
    the labels are ignored."""

    def __init__(self, ch: int = 16, layers: int = 3, name: str = "discriminator"):
        super().__init__(name=name)
        self.convs = [keras.layers.Conv2D(ch << i, 4, 2, "same") for i in range(layers)]
        self.dense = keras.layers.Dense(1)

    @staticmethod
    def call_inputs(batch: int, size: int, channels: int):
        return (tf.TensorSpec([batch, size, size, channels], tf.float32),
                tf.TensorSpec([batch], tf.int32))

    def call(self, inputs, training=False):
        h, _ = inputs
        for conv in self.convs:
            h = tf.nn.leaky_relu(conv(h), 0.2)
        return tf.cast(self.dense(keras.layers.Flatten()(h)), tf.float32)[:, 0]


class Unconditional(contract.Objective):
    """G(z); D on fakes and reals in one call; the hinge loss pair."""

    def __init__(self, loss: losses.LossPair):
        self.loss = loss

    def batch_specs(self, generator, batch, size, channels):
        return ((tf.TensorSpec([batch, size, size, channels], tf.float32),
                 tf.TensorSpec([batch], tf.int32)), generator.call_inputs(batch))

    def generate(self, generator, real, noise):
        return generator(noise, training=True)

    def judge(self, discriminator, fakes, real, noise):
        images, labels = real
        both = tf.concat([tf.cast(fakes, images.dtype), images], 0)
        fake_logits, real_logits = tf.split(
            discriminator((both, tf.concat([noise[1], labels], 0)), training=True), 2)
        return real_logits, fake_logits, None

    def d_loss(self, real_logits, fake_logits, seen, noise):
        return self.loss.d(real_logits, fake_logits)

    def judge_fakes(self, discriminator, fakes, real, noise):
        logits = discriminator((fakes, noise[1]), training=True)
        return logits, logits

    def g_loss(self, gen_logits, real_logits, fakes, real):
        return self.loss.g(real_logits, gen_logits)


class DCGAN(contract.Family):
    """The family: its networks, objective, grid, samples, export and evaluator."""

    name = "dcgan"
    data_kind = datasets.LABELLED
    configurables = ("DCGANGenerator", "DCGANDiscriminator")

    def refuse(self, settings):
        super().refuse(settings)
        for setting, value in (("penalties.*", settings.penalties.any),
                               ("augment.policy", settings.augment.transforms),
                               ("train.recompute", settings.train.recompute),
                               ("model_parallel.stages", settings.model_parallel.stages > 1)):
            if value:
                raise ConfigError(f"{setting} is not available for dcgan")

    def networks(self, settings, source, layout, mode, replicas):
        shape = dict(resolution=settings.data.resolution, out_channels=source.channels)
        made = []
        for name, build in (("generator", lambda: DCGANGenerator(**shape)),
                            ("generator_ema", lambda: DCGANGenerator(name="generator_ema",
                                                                     **shape)),
                            ("discriminator", DCGANDiscriminator)):
            with mode.variables_of(name):
                made.append(build())
        generator, generator_ema, discriminator = made
        side = settings.data.resolution
        for name, model in (("generator", generator), ("generator_ema", generator_ema)):
            with mode.variables_of(name):
                model((tf.zeros([2, model.dim_z]), tf.zeros([2], tf.int32)))
        with mode.variables_of("discriminator"):
            discriminator((tf.zeros([2, side, side, source.channels]), tf.zeros([2], tf.int32)))
        return generator, generator_ema, discriminator

    def objective(self, settings, discriminator, d_optimizer, augment, lecam_state):
        return Unconditional(losses.LossPair(losses.hinge))

    def _samples(self, run, count, seed):
        z = sampling.latents(count, run.generator_ema.dim_z, seed)
        return run.generator_ema((z, tf.zeros([count], tf.int32)), training=False).numpy()

    def grid(self, run, path, writer, step, write):
        grid = images_lib.grid(self._samples(run, 64, run.seed), rows=8)
        if write:
            images_lib.write_png(path, grid)
            with writer.as_default():
                tf.summary.image("samples/ema", grid[None], step=step)

    def sample(self, runs, options):
        o = self.options_of("bin/sample.py", dict(seed=0, per_class=8), options)
        return self._samples(next(iter(runs)), 8 * o["per_class"], o["seed"]), 8

    def export(self, run, path, info, options):
        self.options_of("bin/export.py", {}, options)
        export_lib.export_generator(run.generator_ema, path, info)
        return export_lib.SIGNATURE

    def evaluator(self, run, output_dir, write=True):
        return evaluator_lib.Evaluator(run, output_dir, write=write)


families.register(DCGAN)
