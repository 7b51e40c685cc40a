"""paragan_tf: distributed BigGAN training on TensorFlow 2 (after ParaGAN).

Importing the package pins the Keras flavour before TensorFlow loads: tf-keras
(Keras 2) is the only one that keeps optimizer `iterations` exact under
ParameterServerStrategy, so every process that imports us uses it. Our own
modules import `tf_keras` directly, so they are right even when the caller
imported TensorFlow first.
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# TensorFlow's C++ INFO lines (CUDA probing, oneDNN notes) drown our progress
# output on CPU machines; warnings and errors still show.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

__version__ = "0.1.0"
