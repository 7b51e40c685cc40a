"""Stopping on a signal (train/preemption.py): SignalFlag turns SIGTERM and SIGINT into a
flag, a second Ctrl-C gives up at once, and the handlers before it come back."""

from __future__ import annotations

import signal

import pytest

from paragan_tf.errors import Interrupted
from paragan_tf.train import preemption


def _handlers():
    return {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}


def test_a_signal_sets_the_flag_and_the_handlers_before_come_back():
    before = _handlers()
    with preemption.SignalFlag() as flag:
        assert flag.signum is None
        signal.raise_signal(signal.SIGTERM)  # handled before raise_signal returns
        assert flag.signum == signal.SIGTERM
        signal.raise_signal(signal.SIGTERM)  # a second SIGTERM: still only the flag
    assert _handlers() == before
    # A multi-worker run leaves SIGTERM to TensorFlow: only SIGINT is ours then.
    with preemption.SignalFlag((signal.SIGINT,)) as flag:
        assert signal.getsignal(signal.SIGTERM) == before[signal.SIGTERM]
        signal.raise_signal(signal.SIGINT)
        assert flag.signum == signal.SIGINT
    assert _handlers() == before
    assert str(Interrupted(signal.SIGTERM, 7)) == (
        f"stopped by signal {int(signal.SIGTERM)} at step 7; checkpoint saved")


def test_a_second_ctrl_c_gives_up_on_the_clean_stop():
    before = _handlers()
    with pytest.raises(KeyboardInterrupt):
        with preemption.SignalFlag() as flag:
            signal.raise_signal(signal.SIGINT)
            assert flag.signum == signal.SIGINT  # the first: finish the loop and save
            signal.raise_signal(signal.SIGINT)
    assert _handlers() == before
