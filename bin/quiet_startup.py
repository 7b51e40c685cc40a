"""Keeps TensorFlow's native start-up noise out of a binary's stderr.

Importing TensorFlow prints, before its logging is initialised (so
TF_CPP_MIN_LOG_LEVEL cannot stop them), lines like "All log messages before
absl::InitializeLog()", "oneDNN custom operations are on", "Could not find cuda
drivers" and an E-level "failed call to cuInit" on every CPU machine. They are
what a user read first, and the E line looks like a failure.

`install()` points file descriptor 2 at a small filter process that drops
exactly those known lines and copies everything else (Python warnings,
tracebacks, our logging, any other native warning or error) to the real stderr.
A process, not a thread: it outlives a crash of the binary, so a fatal native
message still gets through; it ignores SIGINT/SIGTERM and exits when every
writer (the binary and its children) has closed the pipe.
PARAGAN_TF_NATIVE_LOGS=1 turns the filter off.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys

NOISE = (
    r"All log messages before absl::InitializeLog\(\) is called are written to STDERR",
    r"port\.cc:\d+\] oneDNN custom operations are on",
    r"cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine",
    r"cuda_platform\.cc:\d+\] failed call to cuInit",
    r"cuda_executor\.cc:\d+\] .*(kernel driver does not appear to be running|"
    r"no NVIDIA GPU device is present)",
    r"Unable to register cu(DNN|FFT|BLAS) factory",
    r"cpu_feature_guard\.cc:\d+\] This TensorFlow binary is optimized",
    r"To enable the following instructions: .* in other operations, rebuild TensorFlow",
)

_FILTER = f"""
import re, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
noise = re.compile({'|'.join(NOISE).encode()!r})
out = sys.stdout.buffer
for line in sys.stdin.buffer:
    if not noise.search(line):
        out.write(line)
        out.flush()
"""


_filter_process = None  # kept referenced: the filter lives as long as the binary


def install() -> None:
    """Routes this process's stderr (fd 2) through the noise filter; call before TensorFlow."""
    global _filter_process  # pylint: disable=global-statement
    if os.environ.get("PARAGAN_TF_NATIVE_LOGS") == "1" or _filter_process is not None:
        return
    try:
        sys.stderr.flush()
        _filter_process = subprocess.Popen(
            [sys.executable, "-S", "-c", _FILTER], stdin=subprocess.PIPE,
            stdout=sys.stderr.fileno(), start_new_session=True)
    except (OSError, ValueError):  # no usable stderr (closed, a pseudo-file): leave it be
        return
    os.dup2(_filter_process.stdin.fileno(), 2)
    _filter_process.stdin.close()  # fd 2 now holds the only write end in this process
    atexit.register(drain)


def drain(timeout: float = 2.0) -> None:
    """At exit: closes our end and waits (briefly) until the filter has written the last line,
    so an error message comes before the shell's next prompt, not after it."""
    if _filter_process is None:
        return
    try:
        sys.stderr.flush()
        os.close(2)
        _filter_process.wait(timeout)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        pass  # children still hold the pipe: the filter ends with them
