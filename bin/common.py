"""Flags and error handling shared by the absl binaries (library code reads no FLAGS)."""

from __future__ import annotations

import sys
from typing import Callable

from absl import flags
from absl import logging

import paragan_tf  # noqa: F401  (pins tf-keras before TensorFlow loads)
from paragan_tf import config as config_lib
from paragan_tf.errors import ConfigError

FLAGS = flags.FLAGS


def define_gin_flags() -> None:
    flags.DEFINE_string("model_dir", None, "Folder for checkpoints, summaries and samples.")
    flags.DEFINE_multi_string("gin_file", [], "Gin config file(s), applied in order.")
    flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings, e.g. train.total_steps=100.")


def parse_gin(finalize: bool = True) -> None:
    config_lib.parse(FLAGS.gin_file, FLAGS.gin_bindings, finalize=finalize)


def fail(message: str) -> None:
    """Prints a one-line error and exits non-zero."""
    sys.stderr.flush()
    print(f"{sys.argv[0].rsplit('/', 1)[-1]}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def run_guarded(main: Callable[[], int]) -> int:
    """Runs `main`, turning configuration errors into one line on stderr and exit code 2."""
    logging.set_verbosity(logging.INFO)
    try:
        return main()
    except ConfigError as e:
        fail(str(e).strip().splitlines()[0])
    return 2
