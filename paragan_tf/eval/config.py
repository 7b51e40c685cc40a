"""The evaluation's options (`eval.*` in gin), checked when made."""

from __future__ import annotations

import dataclasses
from typing import Optional

import gin

from paragan_tf.errors import ConfigError


@gin.configurable("eval")
@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalConfig:
    """Evaluation settings.

    Attributes:
      every_steps: evaluate inside the training loop every this many steps; 0: never.
      num_samples: generated samples per evaluation (classes balanced).
      num_real: real images for the reference statistics (the test split when
        the dataset has one, else the train split); at most: a split with fewer
        images of the run's classes gives what it has (logged, and stamped in the
        protocol).
      batch_size: global batch of generation and feature extraction.
      feature_extractor: "auto" (FCD when classifier_path is set, else FID for colour
        images and FCD for grey ones),
        "inception" (FID on the standard FID Inception-v3) or "classifier" (FCD, from
        bin/train_classifier.py); see eval/features.py.
      classifier_path: the classifier's SavedModel directory (needed for FCD).
      inception_path: a SavedModel of TF-GAN's Inception interface to use instead of
        the built-in FID network (adds the Inception Score; see eval/features.py).
      kid_block_size: the kernel distance is averaged over blocks of at most this size.
      seed: of the evaluation latents (the same for every evaluation).
      prdc_samples: precision, recall, density and coverage compare at most this many
        generated and real samples (their distance matrices are held in memory whole).
      nearest_k: the neighbourhood size of those four metrics (Naeem et al.'s 5).
      reference_split: the real images compared: "auto" (the test split when the
        dataset has one, else the training split), or a split's name ("train", "test").
      reference_stats: an .npz of the real features' mean and covariance (from
        bin/eval.py --write_stats, or clean-fid/TTUR's published files) used instead
        of embedding the real images at every run; only the Fréchet distance is
        computed against it (eval/reference_stats.py).
    """

    # When, and on how many images.
    every_steps: int = 0
    num_samples: int = 5000
    num_real: int = 10000
    batch_size: int = 250
    seed: int = 12345

    # Whose features.
    feature_extractor: str = "auto"
    classifier_path: Optional[str] = None
    inception_path: Optional[str] = None

    # The metrics and their reference.
    kid_block_size: int = 1000
    prdc_samples: int = 5000
    nearest_k: int = 5
    reference_split: str = "auto"
    reference_stats: Optional[str] = None

    def __post_init__(self):
        if (self.every_steps < 0 or self.num_samples <= 0 or self.num_real <= 0
                or self.batch_size <= 0):
            raise ConfigError("eval.every_steps must be >= 0, eval.num_samples, eval.num_real "
                              "and eval.batch_size > 0")
        if self.prdc_samples <= self.nearest_k + 1 or self.nearest_k < 1:
            raise ConfigError(f"eval.prdc_samples={self.prdc_samples} must exceed "
                              f"eval.nearest_k + 1 (eval.nearest_k={self.nearest_k} >= 1)")
