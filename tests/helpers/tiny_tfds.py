"""A TFDS dataset small enough to build offline inside a test."""

from etils import epath
import numpy as np
import tensorflow_datasets as tfds


class TinyDigits(tfds.core.GeneratorBasedBuilder):
    """12 examples: example i is the grey level 10 i, labelled i % 4."""

    VERSION = tfds.core.Version("1.0.0")
    # This file, as TFDS finds a top-level module's builder. For a builder in a package
    # (tests.helpers) TFDS 4.9.10 asks the importlib_resources backport, not installed here.
    code_path = epath.Path(__file__)

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(20, 20, 3)),
            "label": tfds.features.ClassLabel(num_classes=4)}))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        for i in range(12):
            yield i, {"image": np.full((20, 20, 3), 10 * i, np.uint8), "label": i % 4}
