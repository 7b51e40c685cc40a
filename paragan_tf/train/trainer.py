"""What the Controller drives: a Trainer trains, reports, settles for a checkpoint, closes.

After orbit's Trainer: the controller (train/controller.py) owns the loop, its
intervals and everything written to the run's folder; a trainer only knows how
to run steps. Two implement it unchanged: the synchronous trainer (train/loop.py,
any synchronous strategy) and the asynchronous one (train/async_loop.py,
parameter servers, where a step is a round of closures).

A step "finishes" when all its updates are applied. The synchronous trainer's
steps finish inside `train`; the asynchronous one's may still be in flight when
`train` returns, and `state` waits for them.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Dict

from paragan_tf.train import experiment as experiment_lib


# Metrics that are levels, not per-step values: the controller keeps the latest reported.
LEVELS = ("health/", "augment/", "perf/read_parallelism", "perf/prefetch_depth",
          "async/rounds_in_flight", "async/repeated_g_updates")


@dataclasses.dataclass
class Progress:
    """What a `train` or `state` call reports.

    step: steps finished so far (the global step a checkpoint would hold).
    steps: of them, the ones that finished during this call.
    metrics: means over those steps (losses, gradient norms, ...), except keys ending
      in `_seconds`, sums over the call (the controller adds them up: compute and
      input-wait seconds, of which it reports rates and the input wait fraction), and
      LEVELS, values as they are at the end of the call.
    """

    step: int
    steps: int = 0
    metrics: Dict[str, float] = dataclasses.field(default_factory=dict)


class Trainer(abc.ABC):
    """How to train one Experiment. The controller calls `train` until the run ends, `state`
    before every checkpoint and at the end, and `close` on every way out."""

    unit = "step"  # what the progress line counts ("round" for the asynchronous trainer)
    steps_per_call = 1  # the most steps one `train` call takes
    is_chief = True  # writes model_dir (the other workers of a cluster do not)
    task_id = 0

    def __init__(self, exp: experiment_lib.Experiment):
        self.exp = exp

    @abc.abstractmethod
    def train(self, num_steps: int) -> Progress:
        """Runs (or schedules) the next `num_steps` steps; what finished meanwhile."""

    def state(self) -> Progress:
        """Waits until every step run so far has finished and stores what the checkpoint
        holds beside the experiment's variables; what finished meanwhile."""
        return Progress(int(self.exp.step.numpy()))

    def close(self) -> None:
        """Gives up the input iterators and cluster handles."""
