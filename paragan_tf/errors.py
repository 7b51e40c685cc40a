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
