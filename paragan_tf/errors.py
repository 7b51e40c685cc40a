"""The error types a user sees as one line from the binaries."""


class ConfigError(ValueError):
    """A setting is wrong; the message names the setting and what to do.

    Raised at start-up, before any training work, so binaries can print it as a
    single line and exit non-zero.
    """


class Diverged(RuntimeError):
    """Training produced non-finite values it could not skip past.

    Raised after `train.max_consecutive_skips` steps in a row were skipped, or
    instead of writing a checkpoint holding non-finite weights.
    """


class Interrupted(Exception):
    """Training stopped on a signal after saving a checkpoint (train/preemption.py)."""

    def __init__(self, signum: int, step: int):
        super().__init__(f"stopped by signal {signum} at step {step}; checkpoint saved")
        self.signum, self.step = signum, step


class ParameterServerLost(RuntimeError):
    """A parameter server (or every worker) stopped answering; relaunch to resume."""
