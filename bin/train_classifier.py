"""Trains the dataset classifier behind the Fréchet Classifier Distance (FCD).

    python bin/train_classifier.py --gin_file=gin/quality_fashion_mnist.gin \
        --output=runs/classifiers/fashion_mnist_32

The dataset, resolution and fit come from the gin config (the experiment the
classifier will evaluate). Reports accuracy on the real test split (or a
held-out tenth of train when the dataset has no test split) and saves a
SavedModel images -> {features, logits} plus classifier.json to --output;
point `eval.classifier_path` at it.
"""

from __future__ import annotations

import json

from absl import app
from absl import flags
from absl import logging

import common
from paragan_tf.data import config as data_config
from paragan_tf.data import pipeline
from paragan_tf.eval import classifier
from paragan_tf import teardown

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("gin_file", [], "Gin config file(s): the experiment's dataset.")
flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings, e.g. dataset.name='fashion_mnist'.")
flags.DEFINE_string("output", None, "Directory for the SavedModel and classifier.json.")
flags.DEFINE_integer("epochs", 4, "Training epochs.")
flags.DEFINE_integer("batch_size", 128, "Training batch size.")


def _main() -> int:
    if not FLAGS.output:
        common.fail("--output is required (the classifier's directory)")
    common.parse_gin(finalize=False)
    data = data_config.DatasetConfig()
    source = pipeline.load_source(data)
    model, info = classifier.train(source, data, FLAGS.epochs, FLAGS.batch_size,
                                   progress=logging.info)
    classifier.save(model, FLAGS.output, info)
    logging.info("saved %s", FLAGS.output)
    print(json.dumps(info), flush=True)
    teardown.exit_now(0)


if __name__ == "__main__":
    app.run(common.absl_main(_main))
