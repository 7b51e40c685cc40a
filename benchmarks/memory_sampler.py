"""Resident memory of a child process and its descendants (Linux /proc), sampled while it
runs: what the data and pix2pix_study suites report as a tool's or a training process's
peak (tracemalloc and ru_maxrss see only Python's heap or one process)."""

from __future__ import annotations

import os
import resource
import threading
from typing import Dict


def rss_by_pid(root_pid: int) -> Dict[int, int]:
    """Resident bytes of `root_pid` and of each of its descendants."""
    parents: Dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parents[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, frontier = {root_pid}, [root_pid]
    while frontier:
        pid = frontier.pop()
        children = [c for c, p in parents.items() if p == pid and c not in tree]
        tree.update(children)
        frontier.extend(children)
    out = {}
    for pid in tree:
        try:
            with open(f"/proc/{pid}/statm") as f:
                out[pid] = int(f.read().split()[1]) * resource.getpagesize()
        except (OSError, IndexError, ValueError):
            continue
    return out


class Sampler(threading.Thread):
    """Samples the tree of `root_pid` every `interval` seconds until `stop()`: `peak_total`
    (the most the tree held at once) and `peak_each` (the most any one process held)."""

    def __init__(self, root_pid: int, interval: float = 0.1):
        super().__init__(daemon=True)
        self.root_pid, self.interval = root_pid, interval
        self.peak_total = self.peak_each = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            sizes = rss_by_pid(self.root_pid)
            self.peak_total = max(self.peak_total, sum(sizes.values()))
            self.peak_each = max([self.peak_each] + list(sizes.values()))
            self._done.wait(self.interval)

    def stop(self) -> "Sampler":
        self._done.set()
        self.join()
        return self
