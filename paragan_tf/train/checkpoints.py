"""The one checkpoint of a run: G, D, EMA G, both optimizers and the step counter.

Files are `model_dir/ckpt-<global step>`; a run resumes from the newest one.
Restores are strict: every object of the current run must be matched by the
checkpoint, so a checkpoint of another architecture fails loudly instead of
half-loading.
"""

from __future__ import annotations

import os
from typing import Optional

import tensorflow as tf

from paragan_tf.errors import ConfigError


def mismatch_error(path: str, error: Exception) -> ConfigError:
    return ConfigError(
        f"checkpoint {path} does not match this run's models (another architecture or "
        f"dataset?): {str(error).splitlines()[0][:300]}; use a fresh --model_dir")


RESTORE_ERRORS = (AssertionError, ValueError, tf.errors.InvalidArgumentError)


class Checkpointer:
    """Saves and restores the training state; only the chief writes to model_dir."""

    def __init__(self, model_dir: str, max_to_keep: int, is_chief: bool = True,
                 worker_id: int = 0, **trackables):
        self.checkpoint = tf.train.Checkpoint(**trackables)
        self.model_dir = model_dir
        # Non-chief workers of a multi-worker run must save too (saving is a
        # collective op), but into a private scratch folder nobody restores from.
        directory = (model_dir if is_chief else
                     os.path.join(model_dir, ".workers", str(worker_id), "checkpoints"))
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, directory, max_to_keep=max_to_keep, checkpoint_name="ckpt")
        self.is_chief = is_chief
        self.saved_step: Optional[int] = None  # step of the last checkpoint saved or restored

    @property
    def latest(self) -> Optional[str]:
        """The newest checkpoint in model_dir (every worker restores from the chief's)."""
        return tf.train.latest_checkpoint(self.model_dir)

    def restore_latest(self) -> Optional[str]:
        """Restores the newest checkpoint, if any; returns its path."""
        path = self.latest
        return None if path is None else self.restore(path)

    def restore(self, path: str) -> str:
        """Restores the checkpoint at `path` (a prefix such as model_dir/ckpt-200)."""
        if not tf.io.gfile.exists(path + ".index"):
            raise ConfigError(f"checkpoint {path} does not exist (no {path}.index)")
        try:
            self.checkpoint.restore(path).assert_consumed()
        except RESTORE_ERRORS as e:
            raise mismatch_error(path, e) from None
        self.saved_step = int(path.rsplit("-", 1)[1])
        return path

    def save(self, step: int) -> str:
        path = self.manager.save(checkpoint_number=step)
        if not self.is_chief:
            tf.io.gfile.rmtree(os.path.dirname(path))
        self.saved_step = step
        return path
