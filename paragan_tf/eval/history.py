"""An evaluation folder's record: metrics.json (every evaluation, the best) and best/.

Several evaluators may write one folder over time (the training loop's, then a
sidecar's), so the file, not memory, is the record: each write reads it first.
The best checkpoint (lowest Fréchet distance) is kept by copying its files to
`<folder>/best/`, replacing the previous best.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from typing import Dict, Optional

from absl import logging
import tensorflow as tf

from paragan_tf import files

METRICS_FILE = "metrics.json"


class History:
    """`<output_dir>/metrics.json`, read as a dict (`history["evaluations"]`, `["best"]`)."""

    def __init__(self, output_dir: str, header: dict):
        self.output_dir, self.header = output_dir, header
        self.data = self._read()

    def __getitem__(self, key: str):
        return self.data[key]

    def _read(self) -> dict:
        path = os.path.join(self.output_dir, METRICS_FILE)
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path) as f:
                return json.load(f)
        return dict(self.header, evaluations=[], best=None)

    def record(self, step: int, checkpoint: Optional[str], protocol: str,
               result: Dict[str, float], key: str) -> None:
        """Adds (or replaces) the evaluation at `step`; a new best by `key` is copied."""
        history = self.data = self._read()
        entry = dict(step=step, checkpoint=checkpoint, protocol=protocol, **result)
        history["evaluations"] = [e for e in history["evaluations"] if e["step"] != step]
        history["evaluations"].append(entry)
        best = history.get("best")
        if checkpoint and (best is None or result[key] < best[key]):
            history["best"] = dict(entry, checkpoint=self._keep_best(checkpoint))
            logging.info("best %s so far (%.4g) at step %d: %s", key, result[key], step,
                         history["best"]["checkpoint"])
        files.write_whole(os.path.join(self.output_dir, METRICS_FILE),
                          json.dumps(history, indent=1))

    def _keep_best(self, checkpoint: str) -> str:
        """Copies the checkpoint's files to output_dir/best/ (replacing the previous best)."""
        best_dir = os.path.join(self.output_dir, "best")
        if os.path.isdir(best_dir):
            shutil.rmtree(best_dir)
        os.makedirs(best_dir)
        files = glob.glob(checkpoint + ".*")
        if not files:
            raise FileNotFoundError(f"checkpoint {checkpoint} has no files to keep")
        for f in files:
            shutil.copy2(f, best_dir)
        return os.path.join(best_dir, os.path.basename(checkpoint))
