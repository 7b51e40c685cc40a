"""The class list a run trains on (label -> name), kept with the run.

A label is an index into the dataset's class names; if the names change under
a run (a notebook's hidden folder that became a class would shift every label
after it), its checkpoints silently mean other classes. So the trainer prints
the list at start-up and writes <model_dir>/classes.json, and a run that
resumes in that model_dir, or evaluates or samples from it, compares its data's
list with the saved one and stops at the first difference, naming it.
"""

from __future__ import annotations

import json
import os
from typing import Optional, Sequence

import tensorflow as tf

from paragan_tf import files
from paragan_tf.errors import ConfigError

FILE = "classes.json"


def describe(names: Sequence[str], limit: int = 20) -> str:
    """'3 classes: 0=cat, 1=dog, 2=fox' (the first `limit`, then a count)."""
    shown = ", ".join(f"{i}={n}" for i, n in enumerate(names[:limit]))
    more = f", ... ({len(names) - limit} more)" if len(names) > limit else ""
    return f"{len(names)} classes: {shown}{more}"


def saved(model_dir: str) -> Optional[list]:
    path = os.path.join(model_dir, FILE)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)["classes"]


def keep_or_check(model_dir: str, names: Sequence[str], dataset: str, write: bool) -> None:
    """Writes the class list (when `write` and the run has none) or checks the data's
    list against it; ConfigError naming the first difference."""
    names = list(names)
    before = saved(model_dir)
    if before is None:
        if write and names:
            # Whole or not at all: the other workers of the run read it at the same moment
            # (a worker once read a half-written list and the Slurm job failed).
            files.write_whole(os.path.join(model_dir, FILE),
                              json.dumps({"dataset": dataset, "classes": names}, indent=1))
        return
    if before == names or not names:
        return
    first = next((i for i in range(min(len(before), len(names))) if before[i] != names[i]),
                 min(len(before), len(names)))
    was = repr(before[first]) if first < len(before) else "absent"
    now = repr(names[first]) if first < len(names) else "absent"
    raise ConfigError(
        f"the classes of dataset {dataset} differ from those {model_dir} was trained on "
        f"({os.path.join(model_dir, FILE)}: {len(before)} classes, the data has "
        f"{len(names)}): label {first} was {was}, is now {now}; train in a new model_dir or "
        f"restore the dataset")
