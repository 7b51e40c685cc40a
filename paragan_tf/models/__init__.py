"""The networks' building blocks (layers, blocks, thin_convs, recompute), shared by every GAN
family."""

import math

import tf_keras as keras


def count_trainable(model: keras.Model) -> int:
    """Number of trainable scalars of a built model (from the variables' static shapes, so
    models built in a throwaway graph, whose initialisers never ran, count too)."""
    return int(sum(v.shape.num_elements() for v in model.trainable_variables))


def round_up(channels: int, multiple: int) -> int:
    """`channels` rounded up to a multiple of `multiple` (the layout's channel multiple:
    every family's widths)."""
    return int(math.ceil(channels / multiple) * multiple)
