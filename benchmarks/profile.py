"""Reading tf.profiler traces: busy seconds per op type, and their shares.

TensorFlow has no public reader for its traces; this uses the converter
TensorBoard's profile plugin calls (framework_op_stats), so the numbers are
the ones TensorBoard's Profile tab shows for the same trace.
"""

from __future__ import annotations

import collections
import glob
import json
import os
from typing import Dict, List


def op_rows(logdir: str) -> List[Dict[str, object]]:
    """Every op of the newest trace under `logdir` but idle time: its `type`, `operation`
    (the op's name) and `self_seconds`, the largest first (TensorBoard's op table)."""
    from tensorflow.python.profiler.internal import (  # pylint: disable=import-outside-toplevel
        _pywrap_profiler_plugin as plugin)
    paths = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True),
                   key=os.path.getmtime)
    if not paths:
        raise FileNotFoundError(f"no tf.profiler trace (*.xplane.pb) under {logdir}")
    data, _ = plugin.xspace_to_tools_data(paths[-1:], "framework_op_stats", {})
    table = json.loads(data)[0]
    columns = [c["id"] for c in table["cols"]]
    rows = []
    for row in table["rows"]:
        cells = dict(zip(columns, (c.get("v") for c in row["c"])))
        if cells["type"] != "IDLE":
            rows.append(dict(type=cells["type"], operation=cells["operation"],
                             self_seconds=cells["total_self_time"] / 1e6))  # microseconds
    return sorted(rows, key=lambda r: -r["self_seconds"])


def op_seconds(logdir: str) -> Dict[str, float]:
    """Self time per op type in the newest trace under `logdir`, idle excluded, largest first.

    Host ops of every thread are summed: with several threads busy at once the
    total can exceed the wall time traced.
    """
    busy: Dict[str, float] = collections.Counter()
    for row in op_rows(logdir):
        busy[row["type"]] += row["self_seconds"]
    return dict(busy.most_common())


def shares(seconds: Dict[str, float], top: int = 12) -> Dict[str, float]:
    """The `top` op types' shares of all busy time."""
    total = sum(seconds.values()) or 1.0
    return {k: v / total for k, v in list(seconds.items())[:top]}
