"""Files that other processes read while we write them: they appear whole or not at all."""

from __future__ import annotations

from typing import Union

import tensorflow as tf


def write_whole(path: str, content: Union[str, bytes]) -> None:
    """Writes `content` under a temporary name, then renames it to `path` (any filesystem
    tf.io.gfile knows): a reader sees the old file or the new one, never half of it."""
    with tf.io.gfile.GFile(path + ".tmp", "wb" if isinstance(content, bytes) else "w") as f:
        f.write(content)
    tf.io.gfile.rename(path + ".tmp", path, overwrite=True)
