"""The one checkpoint of a run: G, D, EMA G, both optimizers and the step counter.

Files are `model_dir/ckpt-<global step>`; a run resumes from the newest one.
Restores are strict: every object of the current run must be matched by the
checkpoint, so a checkpoint of another architecture fails loudly instead of
half-loading. Two objects may be on one side only, judged by comparing the
checkpoint's objects with the run's (their paths, as the checkpoint names them): the
float16 loss scale (paragan_tf/precision.py), so that a run that moves between float16 and
another precision (a V100, where `auto` picks float16, then an A100, where it picks
bfloat16) restores everything else and a new scale starts at its initial value; and
TensorFlow's preemption counter, which a multi-worker run stopped by SIGTERM saves
(train/preemption.py) and a one-process reader has no object for.

Crash safety comes from TensorFlow's write order, which we rely on: a save
writes its data and index files first and only then atomically replaces the
`checkpoint` state file that names the newest checkpoint, so a process killed
mid-save leaves the previous checkpoint as the newest. A checkpoint that is
named but unreadable (a damaged disk) is skipped for the one before it, with a
warning. A save refuses to write non-finite weights (errors.Diverged), and one
that does not fit on the disk removes its partial files and raises
model_dir.DiskFull, the previous checkpoint still the newest.
"""

from __future__ import annotations

import collections
import os
from typing import List, Optional, Set, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from paragan_tf.distribute import strategy as strategy_lib
from paragan_tf.errors import ConfigError
from paragan_tf.errors import Diverged
from paragan_tf.train import model_dir as model_dir_lib
from paragan_tf import precision as precision_lib


def mismatch_error(path: str, error: Exception) -> ConfigError:
    return ConfigError(
        f"checkpoint {path} does not match this run's models (another architecture or "
        f"dataset?): {str(error).splitlines()[0][:300]}; use a fresh --model_dir")


RESTORE_ERRORS = (AssertionError, ValueError, tf.errors.InvalidArgumentError)
# What PreemptionCheckpointHandler adds to the checkpoints of a multi-worker run.
PREEMPTION_COUNTER = "checkpointed_runs"
# Damaged or missing files (a truncated data file surfaces as IndexError from the reader).
UNREADABLE = (tf.errors.DataLossError, tf.errors.NotFoundError, IndexError)


class Checkpointer:
    """Saves and restores the training state; only the chief writes to model_dir."""

    def __init__(self, model_dir: str, max_to_keep: int, is_chief: bool = True,
                 worker_id: int = 0, **trackables):
        self.checkpoint = tf.train.Checkpoint(**trackables)
        self._trackables = trackables
        self.model_dir = model_dir = model_dir_lib.resolve(model_dir)
        # Non-chief workers of a multi-worker run must save too (saving is a
        # collective op), but into a private scratch folder nobody restores from.
        directory = (model_dir if is_chief else
                     os.path.join(model_dir, ".workers", str(worker_id), "checkpoints"))
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, directory, max_to_keep=max_to_keep, checkpoint_name="ckpt")
        self.is_chief = is_chief
        self.saved_step: Optional[int] = None  # step of the last checkpoint saved or restored
        if is_chief:
            self._remove_interrupted_saves()

    def _remove_interrupted_saves(self) -> None:
        # A save killed half-way leaves its ckpt-N_temp folder behind; nothing names it.
        for path in tf.io.gfile.glob(os.path.join(self.model_dir, "ckpt-*_temp*")):
            logging.warning("removing %s, left by a checkpoint save that was interrupted", path)
            if tf.io.gfile.isdir(path):
                tf.io.gfile.rmtree(path)
            else:
                tf.io.gfile.remove(path)

    @property
    def latest(self) -> Optional[str]:
        """The newest checkpoint in model_dir (every worker restores from the chief's)."""
        return model_dir_lib.latest_checkpoint(self.model_dir)

    def restore_latest(self) -> Optional[str]:
        """Restores the newest readable checkpoint, if any; returns its path."""
        paths = model_dir_lib.checkpoint_paths(self.model_dir)
        for i, path in enumerate(paths):
            try:
                return self.restore(path)
            except UNREADABLE + (ConfigError,) as e:
                unreadable = not isinstance(e, ConfigError) or "does not exist" in str(e)
                if not unreadable or i == len(paths) - 1:
                    raise
                logging.warning("checkpoint %s is unreadable (%s); trying the one before it",
                                path, str(e).splitlines()[0][:200])
        return None

    def restore(self, path: str) -> str:
        """Restores the checkpoint at `path` (a prefix such as model_dir/ckpt-200)."""
        path = model_dir_lib.resolve(path)
        if not tf.io.gfile.exists(path + ".index"):
            raise ConfigError(f"checkpoint {path} does not exist (no {path}.index)")
        # A mismatch surfaces part-way through the restore, after some variables were
        # assigned: put those back, so a failed restore leaves nothing half-loaded.
        variables = self._variables()
        before = [[part.numpy() for part in strategy_lib.local_copies(v)] for v in variables]
        try:
            status = self.checkpoint.restore(path)
            try:
                status.assert_consumed()
            except AssertionError:
                one_side = self._one_side_only(path)
                if not one_side or not all(map(_may_differ, one_side)):
                    raise
                status.expect_partial()
                logging.warning("checkpoint %s restored but for %s, which only one side has%s",
                                path, ", ".join(sorted(one_side)),
                                " (a change of precision)" if any(
                                    map(precision_lib.differs_across_precisions, one_side))
                                else "")
        except RESTORE_ERRORS + UNREADABLE as e:
            for variable, values in zip(variables, before):
                for part, value in zip(strategy_lib.local_copies(variable), values):
                    part.assign(value)
            if isinstance(e, UNREADABLE):
                raise
            raise mismatch_error(path, e) from None
        self.saved_step = int(path.rsplit("-", 1)[1])
        return path

    def _one_side_only(self, path: str) -> Set[str]:
        """The objects the checkpoint at `path` holds values of that this run has no object
        for, and this run's variables it holds no value of, by their paths."""
        saved = {key.split(_VALUES)[0] for key, _ in tf.train.list_variables(path)
                 if _VALUES in key}
        objects, variables = _object_paths(self.checkpoint)
        return ((saved - objects) | (variables - saved)) - {"save_counter"}

    def _variables(self) -> List[tf.Variable]:
        found = []
        for trackable in self._trackables.values():
            variables = getattr(trackable, "variables", [trackable])
            found += list(variables() if callable(variables) else variables)
        return found

    def check_finite(self, step: int) -> None:
        """Raises Diverged naming the first variable holding NaN or Inf."""
        for variable in (v for v in self._variables() if v.dtype.is_floating):
            copies = strategy_lib.local_copies(variable)  # sharded Adam: a value per replica
            if not all(np.all(np.isfinite(copy.numpy())) for copy in copies):
                raise Diverged(
                    f"not writing the checkpoint of step {step}: {variable.name} holds NaN or "
                    f"Inf; the newest checkpoint ({self.latest}) is the last finite one")

    def bytes_needed(self) -> int:
        """About what one checkpoint takes on disk: every variable's bytes."""
        return sum(v.shape.num_elements() * v.dtype.size for v in self._variables())

    def save(self, step: int) -> str:
        """Writes the checkpoint of `step`; raises model_dir.DiskFull if it does not fit."""
        self.check_finite(step)
        previous = self.latest if self.is_chief else None
        try:
            path = self.manager.save(checkpoint_number=step)
        except (OSError, tf.errors.OpError) as e:
            if not model_dir_lib.is_disk_full(e):
                raise
            for partial in (tf.io.gfile.glob(os.path.join(self.manager.directory, name))
                            for name in (f"ckpt-{step}.*", f"ckpt-{step}_temp*")):
                for path in partial:
                    (tf.io.gfile.rmtree if tf.io.gfile.isdir(path) else tf.io.gfile.remove)(path)
            raise model_dir_lib.disk_full(self.manager.directory, step, self.bytes_needed(),
                                          previous) from None
        if not self.is_chief:
            tf.io.gfile.rmtree(os.path.dirname(path))
        self.saved_step = step
        return path


# A checkpoint key is an object's path, then this and the value's attribute name.
_VALUES = "/.ATTRIBUTES/"


def _may_differ(path: str) -> bool:
    """Whether the object at `path` may be in a checkpoint or in the run alone (module doc)."""
    return path == PREEMPTION_COUNTER or precision_lib.differs_across_precisions(path)


def _object_paths(root) -> Tuple[Set[str], Set[str]]:
    """The paths of every object below `root` and of its variables, as a checkpoint of
    `root` names them: breadth first, each object by the first path that reaches it, each
    name escaped ('.' as '..', '/' as './'), as TensorFlow's saver does."""
    objects, variables, seen = set(), set(), {id(root)}
    queue = collections.deque([(root, "")])
    while queue:
        parent, prefix = queue.popleft()
        for name, child in tf.train.TrackableView.children(parent).items():
            if id(child) in seen:
                continue
            seen.add(id(child))
            path = prefix + name.replace(".", "..").replace("/", "./")
            objects.add(path)
            if isinstance(child, tf.Variable):
                variables.add(path)
            queue.append((child, path + "/"))
    return objects, variables
