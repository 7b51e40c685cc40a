"""BigGAN, the built-in family of labelled images: networks (Generator, projection
Discriminator), objective (class-conditional, with D's penalties and augmentation), family."""

from paragan_tf.families import registry
from paragan_tf.families.biggan.family import BigGAN

registry.register(BigGAN, default=True)
