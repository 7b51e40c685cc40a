"""Gin parsing for the binaries: search path, parse, freeze.

Importing this module imports every configurable, so a binding that names
something unknown is an error at parse time, not a silent no-op.
"""

from __future__ import annotations

import os
from typing import Sequence

import gin

from paragan_tf import layout  # noqa: F401  (registers configurables)
from paragan_tf import losses  # noqa: F401
from paragan_tf.data import pipeline  # noqa: F401
from paragan_tf.distribute import strategy  # noqa: F401
from paragan_tf.errors import ConfigError
from paragan_tf.eval import evaluator  # noqa: F401
from paragan_tf.models import biggan  # noqa: F401
from paragan_tf.train import config  # noqa: F401
from paragan_tf.train import optimizers  # noqa: F401

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse(gin_files: Sequence[str], gin_bindings: Sequence[str], finalize: bool = True) -> None:
    """Parses gin files (paths relative to cwd or to the repository) and bindings.

    Raises ConfigError with a one-line message for a missing file or a bad binding.
    """
    gin.clear_config()
    gin.add_config_file_search_path(REPO_ROOT)
    for path in gin_files:
        if not (os.path.exists(path) or os.path.exists(os.path.join(REPO_ROOT, path))):
            raise ConfigError(f"--gin_file={path} does not exist")
    try:
        gin.parse_config_files_and_bindings(list(gin_files), list(gin_bindings),
                                            finalize_config=finalize)
    except (ValueError, KeyError, SyntaxError, IOError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"gin config: {first}") from None
