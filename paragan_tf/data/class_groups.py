"""Per-class parallel training (Lupo Pasini & Yin): which labels this process trains on.

K processes each train their own class-conditional GAN on one contiguous group
of the labels, with no communication between them; they weak-scale without
limit. Labels keep their global ids (the embeddings are sized for every
class), so a sampler can route class c to the process that owns it.
`bin/launch_local.py --mode=per_class` starts the K processes; `bin/sample.py`
assembles one grid from their checkpoints.
"""

from __future__ import annotations

from typing import List, Sequence

import gin
import numpy as np
import tensorflow as tf

from paragan_tf.errors import ConfigError


@gin.configurable("per_class")
def classes_for(num_classes: int, group: int = -1, num_groups: int = 1) -> List[int]:
    """The label ids this process trains on.

    Args:
      num_classes: classes of the dataset.
      group: which group this process trains (-1: not per-class; every label).
      num_groups: how many groups the labels are split into (contiguous, sizes
        differing by at most one).
    """
    if group == -1:
        return list(range(num_classes))
    if not 1 <= num_groups <= num_classes:
        raise ConfigError(f"per_class.num_groups={num_groups} must be in [1, {num_classes}] "
                          f"(the dataset has {num_classes} classes)")
    if not 0 <= group < num_groups:
        raise ConfigError(f"per_class.group={group} must be in [0, {num_groups})")
    return [int(c) for c in np.array_split(np.arange(num_classes), num_groups)[group]]


def draw_labels(classes: Sequence[int], shape, seed) -> tf.Tensor:
    """int32 labels of `shape`, uniform over `classes`, a pure function of the stateless `seed`."""
    table = tf.constant(list(classes), tf.int32)
    return tf.gather(table, tf.random.stateless_uniform(shape, seed, 0, len(classes), tf.int32))
