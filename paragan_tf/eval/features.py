"""Feature extractors for the distances: Inception-v3 (weights the user provides) or our classifier.

Both are SavedModels called on float32 images in [-1, 1] and returning a dict
with the features (`pool_3` or `features`) and the class `logits`:

  inception   `eval.inception_path`: a SavedModel or TF-Hub module directory
              with that interface at 299x299x3, e.g. TF-GAN's Inception module
              (tfhub.dev/tensorflow/tfgan/eval/inception/1, outputs `pool_3` and
              `logits`), downloaded on a machine with internet and copied here.
              No package ships these weights and nothing is downloaded at run
              time. Images are resized (bilinear) to 299 and grey ones tiled to 3
              channels. Metrics: FID, KID, Inception Score.
  classifier  `eval.classifier_path`: from bin/train_classifier.py, trained on the
              run's dataset at its resolution. Metrics: FCD (Fréchet Classifier
              Distance), KCD (kernel classifier distance), classifier score, and
              class-conditional accuracy.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Dict, Optional

import tensorflow as tf

from paragan_tf.errors import ConfigError
from paragan_tf.eval import classifier as classifier_lib

INCEPTION_SIZE = 299
# Metric names per extractor: distances on Inception features have their own names.
NAMES = {"inception": dict(frechet="fid", kernel="kid", score="inception_score"),
         "classifier": dict(frechet="fcd", kernel="kcd", score="classifier_score")}


@dataclasses.dataclass
class FeatureExtractor:
    kind: str  # "inception" or "classifier"
    path: str
    call: Callable[[tf.Tensor], Dict[str, tf.Tensor]]  # images -> {"features", "logits"}
    info: dict

    @property
    def names(self) -> Dict[str, str]:
        return NAMES[self.kind]


def _signature(path: str, setting: str):
    if not os.path.isdir(path):
        raise ConfigError(f"{setting}={path!r} is not a directory holding a SavedModel")
    # Imported here: only evaluation needs it, and it costs every binary's start-up.
    import tensorflow_hub as hub  # pylint: disable=import-outside-toplevel
    try:
        loaded = hub.load(path)
    except (OSError, ValueError, tf.errors.OpError) as e:
        raise ConfigError(f"{setting}={path!r} could not be loaded as a SavedModel: "
                          f"{str(e).splitlines()[0]}") from None
    signatures = getattr(loaded, "signatures", {})
    for name in ("serving_default", "default"):
        if name in signatures:
            fn = signatures[name]
            inputs = list(fn.structured_input_signature[1])
            if len(inputs) != 1:
                raise ConfigError(f"{setting}: signature {name!r} takes {inputs}; "
                                  "expected one image input")
            return loaded, fn, inputs[0]
    raise ConfigError(f"{setting}={path!r} has no 'serving_default' or 'default' signature")


def _outputs(out: Dict[str, tf.Tensor], setting: str) -> Dict[str, tf.Tensor]:
    features = out.get("features", out.get("pool_3"))
    if features is None or "logits" not in out:
        raise ConfigError(f"{setting}: the model returns {sorted(out)}; expected "
                          "'features' (or 'pool_3') and 'logits'")
    return {"features": tf.reshape(features, [tf.shape(features)[0], -1]),
            "logits": out["logits"]}


def load(kind: str, path: Optional[str], resolution: int, channels: int,
         dataset: str) -> FeatureExtractor:
    """The extractor of `kind` at `path`, checked against the run's images."""
    if kind not in NAMES:
        raise ConfigError(f"eval.feature_extractor={kind!r} must be 'classifier' or 'inception'")
    setting = f"eval.{kind}_path"
    if not path:
        hint = ("train one with `bin/train_classifier.py --gin_file=<the run's gin file> "
                "--output=DIR`" if kind == "classifier" else
                "see paragan_tf/eval/features.py for where to get Inception weights")
        raise ConfigError(f"{setting} is not set; {hint}")
    if kind == "classifier":
        info = classifier_lib.load_info(path)
        expected = dict(dataset=dataset, resolution=resolution, channels=channels)
        wrong = {k: info.get(k) for k, v in expected.items() if info.get(k) != v}
        if wrong:
            raise ConfigError(f"{setting}={path!r} was trained for {wrong}, but the run has "
                              f"{ {k: expected[k] for k in wrong} }; train a classifier for it")
    else:
        info = {}
    loaded, fn, input_name = _signature(path, setting)

    def call(images: tf.Tensor) -> Dict[str, tf.Tensor]:
        images = tf.cast(images, tf.float32)
        if kind == "inception":
            images = tf.image.resize(images, [INCEPTION_SIZE, INCEPTION_SIZE], "bilinear")
            if images.shape[-1] == 1:
                images = tf.tile(images, [1, 1, 1, 3])
        return _outputs(fn(**{input_name: images}), setting)
    extractor = FeatureExtractor(kind, path, call, info)
    extractor.loaded = loaded  # keeps the restored variables alive
    return extractor
