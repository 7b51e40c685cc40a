"""Gin parsing: search path, parse, freeze, errors in one line.

Call it through train/experiment.py's `parse`, which imports every configurable
first, so a binding that names something unknown is an error at parse time,
not a silent no-op.
"""

from __future__ import annotations

import os
import tokenize
from typing import Sequence

import gin

from paragan_tf.errors import ConfigError

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
    # One file at a time, so an error gin reports without a location (a tokenizer
    # error such as an unclosed bracket) can still name the file.
    source = "--gin_bindings"
    try:
        for source in gin_files:
            gin.parse_config_file(source)
        source = "--gin_bindings"
        gin.parse_config(list(gin_bindings))
        if finalize:
            gin.finalize()
    except tokenize.TokenError as e:
        what, (line, _) = e.args
        raise ConfigError(f"gin config: {what} in {source} (or a file it includes), "
                          f"line {line}") from None
    except SyntaxError as e:
        where = source if e.filename and source.endswith(os.path.basename(e.filename)) else \
            e.filename
        raise ConfigError(f"gin config: {e.msg} ({where}, line {e.lineno}: "
                          f"{(e.text or '').strip()})") from None
    except ImportError as e:  # a gin file's `import` line (a family of a user's own)
        raise ConfigError(f"gin config: {source} (or a file it includes): "
                          f"{str(e).splitlines()[0]}; put the module's folder on PYTHONPATH "
                          f"or install it") from None
    except (ValueError, KeyError, IOError) as e:
        raise ConfigError(f"gin config: {_one_line(e)}") from None


def _one_line(error: Exception) -> str:
    """gin's message, with the `In file "f", line n` it puts on later lines kept."""
    lines = [line.strip() for line in str(error).strip().splitlines()]
    if not lines:
        return type(error).__name__
    where = [line for line in lines[1:] if line.startswith("In ")]
    return lines[0] + (f" ({where[0]}: {lines[lines.index(where[0]) + 1]})"
                       if where and lines.index(where[0]) + 1 < len(lines) else
                       f" ({where[0]})" if where else "")
