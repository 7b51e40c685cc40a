"""The one error type for settings a user got wrong."""


class ConfigError(ValueError):
    """A setting is wrong; the message names the setting and what to do.

    Raised at start-up, before any training work, so binaries can print it as a
    single line and exit non-zero.
    """
