"""The sample buffer (train/sample_buffer.py): D closures train on the fakes it holds without
waiting for a G closure, on real server processes on 127.0.0.1."""

from __future__ import annotations

import pytest

from tests.helpers.ps_cluster import coordinate


@pytest.mark.slow
def test_d_closures_train_on_the_buffer_while_a_g_closure_is_still_running(tmp_path):
    # The order of events, from counters on the parameter server (tests/helpers/ps_buffer.py), each
    # [G closures started, G closures finished, D closures finished] in the trial. The G
    # closure is held until the D closures finish (or a stall): whether they can finish
    # while it runs, not which is faster on this machine, decides.
    report = coordinate("tests/helpers/ps_buffer.py", 60, tmp_path)
    free, handoff = report["free"], report["handoff"]
    # The G closure started before any D closure finished; each D closure finished while it
    # was running (started, not finished), on the fakes the buffer was filled with (no G
    # update yet: age 0); when G finished, all three D closures had.
    assert free["g_start"] == [1, 0, 0], free
    assert [d[:2] for d in free["d_end"]] == [[1, 0]] * 3, free
    assert free["g_end"] == [1, 1, 3], free
    assert free["sample_age"] == [0.0, 0.0, 0.0]
    # The negative control: D closures handed G's result finish only after G did.
    assert handoff["g_end"] == [1, 1, 0], handoff
    assert [d[:2] for d in handoff["d_end"]] == [[1, 1]] * 3, handoff
