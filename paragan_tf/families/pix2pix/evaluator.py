"""Evaluation of an image-to-image translator (pix2pix) as its users measure it.

On the first `eval.num_real` validation pairs (`validation_split`: eval.reference_split, or
with 'auto' the dataset's val split, else its test split, else, with a warning, the
training split), the EMA generator's outputs in the run's test mode (pix2pix.test_mode,
families/pix2pix/test_time.py: inference mode by default, named in the protocol stamp)
against the targets:

  l1           mean |output - target| over the pixels, in [-1, 1] units (pix2pix's L1)
  l1_identity  the same for the input copied to the output: what a translator must beat
  psnr, ssim   on [0, 1] images (tf.image.psnr; tf.image.ssim's 11 x 11 Gaussian window)
  fid          the Fréchet distance of the outputs' features to the targets' on the
               standard FID Inception (eval/inception.py; or eval.inception_path's)

Every evaluation reads the same pairs. The values go to `<output_dir>/metrics.json` with
the protocol stamp (the best checkpoint by l1 kept in `best/`) and to TensorBoard as
`metrics/<name>`. The evaluator of BigGAN's runs (eval/evaluator.py) shares the record
(eval/history.py) and the interface. The batches run on this process's device, not under
the strategy: a test-time pass reads no other replica, so no worker needs the others.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Dict, Optional

from absl import logging
import numpy as np
import tensorflow as tf

from paragan_tf.data import pipeline
from paragan_tf.errors import ConfigError
from paragan_tf.eval import features as features_lib
from paragan_tf.eval import history as history_lib
from paragan_tf.eval import metrics
from paragan_tf.eval.config import EvalConfig
from paragan_tf.eval.subject import Subject
from paragan_tf.families.pix2pix import test_time

# eval.* settings of distances between sample sets: they do not apply to pairs.
NOT_FOR_PAIRS = ("num_samples", "kid_block_size", "prdc_samples", "nearest_k",
                 "reference_stats", "classifier_path")


def check_config(config: EvalConfig) -> None:
    """Refuses, by name, the eval.* settings that do not apply to pairs."""
    # The declared defaults: EvalConfig() would read the gin bindings being checked.
    defaults = {field.name: field.default for field in dataclasses.fields(EvalConfig)}
    for name in NOT_FOR_PAIRS:
        if getattr(config, name) != defaults[name]:
            raise ConfigError(f"eval.{name}={getattr(config, name)!r} does not apply to "
                              f"pix2pix, which compares each output with its target")
    if config.feature_extractor == "classifier":
        raise ConfigError("eval.feature_extractor='classifier': pix2pix's FID uses the "
                          "FID Inception ('auto' or 'inception')")


def validation_split(source, data, config: EvalConfig) -> str:
    """The split whose pairs are evaluated (see the module doc)."""
    if config.reference_split != "auto":
        return config.reference_split
    for split in ("val", "test"):
        try:
            source.make(split)
            return split
        except ConfigError:
            continue
    logging.warning("%s has no val or test split: evaluating on pairs of the training split "
                    "%r (set eval.reference_split to a held-out slice, e.g. 'train[4500:]')",
                    source.name, data.split)
    return data.split


def pairs(source, data, split: str) -> tf.data.Dataset:
    """The pairs of `split` in stored order, fitted: (float32 [r, r, 2c], label)."""
    return source.make(split).map(
        lambda pair, label: (pipeline.fit_pair(pair, data.resolution, data.fit), label),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


class TranslationEvaluator:
    """Evaluates a pix2pix run's EMA generator (an eval.subject.Subject) on its
    validation pairs; keeps metrics.json and the best checkpoint."""

    def __init__(self, run: Subject, output_dir: str, options: test_time.Pix2PixOptions,
                 config: Optional[EvalConfig] = None, write: bool = True):
        self.run, self.output_dir, self.write = run, output_dir, write
        self.options = options
        self.config = cfg = config or run.eval_config
        check_config(cfg)
        self.split = validation_split(run.source, run.data, cfg)
        self.examples = pairs(run.source, run.data, self.split).take(cfg.num_real).cache()
        self.count = int(self.examples.reduce(np.int64(0), lambda n, _: n + 1))
        if self.count < 2:
            raise ConfigError(f"the {self.split} split of {run.source.name} has "
                              f"{self.count} pair(s); the Fréchet distance needs 2 or more")
        if self.count < cfg.num_real:
            logging.warning("eval.num_real=%d, but the %s split of %s has %d pairs: "
                            "evaluating on those", cfg.num_real, self.split, run.source.name,
                            self.count)
        self.extractor = features_lib.load("inception", cfg.inception_path,
                                           run.data.resolution, run.source.channels,
                                           run.source.name)
        info = self.extractor.info
        self.protocol = {
            "name": f"pix2pix_{self.split}{self.count}" + ("_paper" if options.training
                                                            else ""),
            "dataset": run.source.name, "split": self.split, "pairs": self.count,
            "resize": f"each half fitted ({run.data.fit}) to {run.data.resolution} px",
            "test_mode": options.test_mode,
            "fid_extractor": self.extractor.path,
            **{f"extractor_{k}": v for k, v in info.items() if k in ("network", "sha1")}}
        self.timings: Dict[str, object] = {}
        self._measure = tf.function(self._batch_values, autograph=False)
        tf.io.gfile.makedirs(output_dir)
        self.history = history_lib.History(output_dir, {"metric": "l1",
                                                        "protocol": self.protocol})

    def _batch_values(self, batch: tf.Tensor) -> Dict[str, tf.Tensor]:
        inputs, targets = tf.split(batch, 2, axis=-1)
        outputs = test_time.translate(self.run.generator_ema, inputs, self.options)

        def mean_abs(x):
            return tf.reduce_mean(tf.abs(x - targets), axis=[1, 2, 3])
        out01, target01 = (outputs + 1.0) / 2.0, (targets + 1.0) / 2.0
        return {"l1": mean_abs(outputs), "l1_identity": mean_abs(inputs),
                "psnr": tf.image.psnr(out01, target01, 1.0),
                "ssim": tf.image.ssim(out01, target01, 1.0),
                "output_features": self.extractor.call(outputs)["features"],
                "target_features": self.extractor.call(targets)["features"]}

    def evaluate(self, step: int, checkpoint: Optional[str] = None,
                 writer=None) -> Dict[str, float]:
        """Evaluates the EMA generator as it is now (the weights of `checkpoint`, if given)."""
        start = time.perf_counter()
        with test_time.state_kept(self.run.generator_ema, self.options):
            parts = [self._measure(batch) for batch, _ in
                     self.examples.batch(self.config.batch_size)]
        values = {k: np.concatenate([p[k].numpy() for p in parts]) for k in parts[0]}
        result = {k: float(np.mean(values[k])) for k in ("l1", "l1_identity", "psnr", "ssim")}
        result["fid"] = metrics.frechet_distance(values["target_features"],
                                                 values["output_features"])
        seconds = time.perf_counter() - start
        self.timings = dict(seconds=seconds, pairs=self.count)
        logging.info("eval at step %d (%.1f s, %s): %s", step, seconds, self.protocol["name"],
                     "  ".join(f"{k} {v:.4g}" for k, v in result.items()))
        if not self.write:
            return result
        if writer is not None:
            with writer.as_default():
                for k, v in result.items():
                    tf.summary.scalar(f"metrics/{k}", v, step=step, description=self.describe())
        self.history.record(step, checkpoint, self.protocol["name"], result, key="l1")
        return result

    def describe(self) -> str:
        """The protocol in one line, for summaries and tables."""
        p = self.protocol
        return (f"{p['name']}: the EMA generator's outputs ({p['test_mode']} mode) on "
                f"{p['pairs']} {p['split']} pairs of {p['dataset']} against their targets "
                f"({p['resize']}); FID on {p.get('extractor_network', p['fid_extractor'])}")

    @staticmethod
    def write_stats(path: str):
        """bin/eval.py --write_stats: refused; each output is compared with its target."""
        raise ConfigError(f"--write_stats={path}: pix2pix's evaluation compares each output "
                          f"with its target and keeps no statistics of real images")

