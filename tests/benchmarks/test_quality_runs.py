"""The quality runs' classifier (benchmarks/quality_runs.py): reused only for the dataset and
resolution it was trained on."""

from __future__ import annotations

import pytest

from paragan_tf.errors import ConfigError


def test_a_classifier_of_another_dataset_is_refused_not_reused(mnist_classifier):
    from benchmarks import quality_runs
    # The session's mnist5k classifier, asked for by a Fashion-MNIST config: its FCD would
    # be silently wrong.
    with pytest.raises(ConfigError, match="holds a classifier of 'mnist5k' at 32 px, but "
                       "gin/quality_fashion_mnist.gin trains 'fashion_mnist' at 32 px"):
        quality_runs.train_classifier(mnist_classifier[0], "gin/quality_fashion_mnist.gin", 1,
                                      print)
    # The same dataset at another resolution: the classifier's input would not fit.
    with pytest.raises(ConfigError, match="'mnist5k' at 32 px, but .* trains 'mnist5k' at 64"):
        quality_runs.train_classifier(mnist_classifier[0], "gin/mnist_default.gin", 1, print,
                                      bindings=["dataset.resolution = 64"])
    quality_runs.train_classifier(mnist_classifier[0], "gin/mnist_default.gin", 1, print)
