"""The tensorflow-gan compat import (paragan_tf/tfgan_compat.py): its modules without its
broken package init."""

from __future__ import annotations

import sys

# As training imports it: the losses load tensorflow-gan's modules through tfgan_compat.
from paragan_tf.objective import losses  # noqa: F401  pylint: disable=unused-import


def test_tensorflow_gan_is_used_without_its_broken_package_init():
    assert "tensorflow_gan.python.losses.losses_impl" in sys.modules
    assert "tensorflow_gan.python.train" not in sys.modules  # the module needing tf.estimator
    from paragan_tf import tfgan_compat
    assert hasattr(tfgan_compat.classifier_metrics, "frechet_classifier_distance_from_activations")
