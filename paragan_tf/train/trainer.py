"""What the Controller drives: a Trainer trains, reports, settles for a checkpoint, closes.

After orbit's Trainer: the controller (train/controller.py) owns the loop, its
intervals and everything written to the run's folder; a trainer only knows how
to run steps and what it measured. Two implement it unchanged: the synchronous
trainer (train/sync_trainer.py, any synchronous strategy) and the asynchronous
one (train/async_trainer.py, parameter servers, where a step is a round of
closures).

A step "finishes" when all its updates are applied. The synchronous trainer's
steps finish inside `train`; the asynchronous one's may still be in flight when
`train` returns, and `state` waits for them.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Dict, Optional

import tensorflow as tf

from paragan_tf.train import experiment as experiment_lib


@dataclasses.dataclass
class Progress:
    """What a `train` or `state` call reports.

    step: steps finished so far (the global step a checkpoint would hold).
    steps: of them, the ones that finished during this call.
    metrics: means over those steps (losses, gradient norms, ...), except keys ending
      in `_seconds`, sums over the call (the controller adds them up: compute and
      input-wait seconds, of which it reports rates and the input wait fraction).
    consecutive_skips: steps in a row the NaN guard skipped, as of `step`; the
      controller stops the run with Diverged at train.max_consecutive_skips.
    """

    step: int
    steps: int = 0
    metrics: Dict[str, float] = dataclasses.field(default_factory=dict)
    consecutive_skips: int = 0


class Trainer(abc.ABC):
    """How to train one Experiment. The controller calls `train` until the run ends, `state`
    before every checkpoint and at the end, `levels` and `end_window` at every progress
    line, and `close` on every way out."""

    unit = "step"  # what the progress line counts ("round" for the asynchronous trainer)
    steps_per_call = 1  # the most steps one `train` call takes
    is_chief = True  # writes model_dir (the other workers of a cluster do not)
    task_id = 0
    record_file = ""  # the run folder's file `record` goes to (none when empty)

    def __init__(self, exp: experiment_lib.Experiment):
        self.exp = exp

    @abc.abstractmethod
    def train(self, num_steps: int) -> Progress:
        """Runs (or schedules) the next `num_steps` steps; what finished meanwhile."""

    def state(self) -> Progress:
        """Waits until every step run so far has finished and stores what the checkpoint
        holds beside the experiment's variables; what finished meanwhile."""
        return Progress(int(self.exp.step.numpy()),
                        consecutive_skips=int(self.exp.health.consecutive.numpy()))

    def levels(self) -> Dict[str, float]:
        """Values as they are now, for the progress line (not means over steps)."""
        exp = self.exp
        levels = {"health/skipped_steps": float(exp.health.skipped.numpy()),
                  "lr/G": float(tf.convert_to_tensor(exp.g_optimizer.learning_rate)),
                  "lr/D": float(tf.convert_to_tensor(exp.d_optimizer.learning_rate))}
        if exp.source.corrupt is not None:
            levels["health/corrupt_images"] = float(exp.source.corrupt.count)
        return levels

    def end_window(self) -> None:
        """The controller wrote a progress line: a window of steps ended."""

    def record(self) -> Optional[Dict[str, object]]:
        """Facts the controller writes beside every checkpoint, as `record_file`."""
        return None

    def close(self) -> None:
        """Gives up the input iterators and cluster handles."""
