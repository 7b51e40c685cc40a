"""How pix2pix's G runs once trained (`pix2pix.test_mode` in gin), for every use: the
evaluation, the sample grids, bin/sample.py, bin/translate.py and bin/export.py.

  'inference'  batch norm's moving statistics and no dropout: an image's translation
               depends neither on the other images of its batch nor on chance. This
               project's default, and a departure from the paper.
  'paper'      the paper's (Isola et al. 2017, section 3.3; the reference's test.py
               without --eval): dropout on and each batch's own statistics, as in
               training. The moving statistics a training-mode pass moves are put back
               afterwards (`state_kept`), so evaluating never changes the trained run.

The evaluation's protocol stamp names the mode (families/pix2pix/evaluator.py).
"""

from __future__ import annotations

import contextlib
import dataclasses

import gin
import tensorflow as tf

from paragan_tf.errors import ConfigError

MODES = ("inference", "paper")


@gin.configurable("pix2pix")
@dataclasses.dataclass(frozen=True, kw_only=True)
class Pix2PixOptions:
    """pix2pix's own options (`pix2pix.*` in gin).

    Attributes:
      test_mode: 'inference' or 'paper' (see the module doc).
    """

    test_mode: str = "inference"

    def __post_init__(self):
        if self.test_mode not in MODES:
            raise ConfigError(f"pix2pix.test_mode={self.test_mode!r} must be one of {MODES}")

    @property
    def training(self) -> bool:
        """The `training` argument G is called with at test time."""
        return self.test_mode == "paper"


def translate(generator, images: tf.Tensor, options: Pix2PixOptions) -> tf.Tensor:
    """G's float32 outputs for `images` in the test mode of `options` (call it inside
    `state_kept`)."""
    return tf.cast(generator(images, training=options.training), tf.float32)


@contextlib.contextmanager
def state_kept(generator, options: Pix2PixOptions):
    """Puts back what test-time passes in the paper's mode move (batch norm's moving
    statistics, spectral norm's vectors); nothing to do in inference mode."""
    if not options.training:
        yield
        return
    saved = [(v, v.numpy()) for v in generator.non_trainable_variables]
    try:
        yield
    finally:
        for variable, value in saved:
            variable.assign(value)
