"""pix2pix as a family (families/pix2pix/family.py, test_time.py): its test-time modes (the
paper's puts back what it moves), its sample grid, what it refuses by name."""

from __future__ import annotations

import gin
import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.errors import ConfigError
from paragan_tf.families.pix2pix import test_time
from paragan_tf.train import experiment


@pytest.fixture(scope="module")
def run():
    """The tiny pix2pix run, built (untrained): its eval subject and family."""
    gin.clear_config()
    experiment.parse(["gin/tiny_pix2pix.gin"], ["Pix2PixGenerator.dropout = 0.5"],
                     finalize=False)
    exp = experiment.build(tf.distribute.OneDeviceStrategy("/cpu:0"))
    gin.clear_config()
    return experiment.eval_subject(exp), exp.family


def _state(generator):
    return [v.numpy().copy() for v in generator.non_trainable_variables]


def test_the_papers_test_mode_uses_batch_statistics_and_puts_back_what_it_moves(run):
    subject, family = run
    images = tf.random.stateless_uniform([4, 32, 32, 1], [1, 2], -1.0, 1.0)
    before = _state(subject.generator_ema)
    inference = family.translate(subject, images).numpy()
    np.testing.assert_array_equal(inference, family.translate(subject, images).numpy())
    paper = type(family)(test_time.Pix2PixOptions(test_mode="paper"))
    translated = paper.translate(subject, images).numpy()
    assert np.max(np.abs(translated - inference)) > 1e-3  # each batch's own statistics
    for kept, now in zip(before, _state(subject.generator_ema)):
        np.testing.assert_array_equal(kept, now)
    # The negative control: a training-mode pass without state_kept moves the statistics.
    subject.generator_ema(images, training=True)
    assert any(np.any(k != n) for k, n in zip(before, _state(subject.generator_ema)))
    for variable, value in zip(subject.generator_ema.non_trainable_variables, before):
        variable.assign(value)
    with pytest.raises(ConfigError, match="pix2pix.test_mode='train' must be one of"):
        test_time.Pix2PixOptions(test_mode="train")


def test_the_sample_grid_has_input_output_and_target_of_each_pair(run):
    subject, family = run
    images, rows = family.sample([subject], {"pairs": 3})
    assert rows == 3 and images.shape == (9, 32, 32, 1)
    # A row: the pair's input, the output, the pair's target.
    pairs = family._validation_pairs(subject, 3).numpy()  # pylint: disable=protected-access
    np.testing.assert_allclose(images[0], pairs[0, ..., :1])
    np.testing.assert_allclose(images[2], pairs[0, ..., 1:])
    with pytest.raises(ConfigError, match=r"cannot take bin/sample.py's --truncation"):
        family.sample([subject], {"truncation": 0.5})
    with pytest.raises(ConfigError, match=r"cannot sample a per-class root"):
        family.sample([subject, subject], {})
    assert family.translation_multiple(subject) == 32
