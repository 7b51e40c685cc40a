"""What a run leaves in its folder for people and tools, beside checkpoints and events.

- `operative_config.gin`: every setting the run used (also a TensorBoard text summary);
- `stats.jsonl`: one JSON object a line, as StyleGAN2-ADA's training loop writes beside
  its TensorBoard events: what benchmarks, sweeps and tools read instead of log text.
  The chief appends to it (a resumed run continues the file):

  {"kind": "log", "step": 100, "time": <unix s>, "wall_seconds": <s since this
   process began training>, "total_steps": 1200, "perf/images_per_sec": ...,
   "perf/input_wait_frac": ..., "loss/D": ..., "loss/G": ..., ...}   one per progress line
  {"kind": "eval", "step": 100, "time": ..., "protocol": "fcd5k_test10k",
   "fcd": ..., ..., "seconds": ..., "samples": ..., "replicas": ...,
   "phases": {"generation": ..., ...}}         one per evaluation inside training
  {"kind": "end", "step": 1200, "time": ..., "wall_seconds": ...}   a finished run
  {"kind": "stop", "step": 830, "time": ..., "signal": 15, "trained_until": <unix s>}
      a run stopped by a signal: the step saved, and when its training ended (before the
      checkpoint was written)
  {"kind": "devices", "step": 0, "time": ..., "variable_bytes": {<device>: bytes}}
      at each start under a model-parallel setting: the chief's variables, by device
- `train_result.json`: the finished run's last metrics (sweep tables read it).
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Dict, List, Optional

import tensorflow as tf

from paragan_tf import files

FILE = "stats.jsonl"
RESULT_FILE = "train_result.json"


def _plain(value):
    """JSON for a metric: floats (non-finite ones as null), nested dicts alike."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (bool, str)) or value is None:
        return value
    value = float(value)
    return value if math.isfinite(value) else None


class Stats:
    """Appends records to `<model_dir>/stats.jsonl` (nothing when `write` is False)."""

    def __init__(self, model_dir: str, write: bool = True):
        self.model_dir, self.path = model_dir, os.path.join(model_dir, FILE)
        self.write = write
        self.began = time.perf_counter()

    def write_json(self, name: str, value: Dict[str, object]) -> None:
        """`value` as `<model_dir>/<name>`, whole (a trainer's record beside a checkpoint)."""
        if self.write:
            files.write_whole(os.path.join(self.model_dir, name), json.dumps(value, indent=1))

    def append(self, kind: str, step: int, values: Dict[str, object]) -> None:
        if not self.write:
            return
        record = dict(kind=kind, step=int(step), time=round(time.time(), 3),
                      wall_seconds=round(time.perf_counter() - self.began, 3),
                      **{k: _plain(v) for k, v in values.items()})
        line = json.dumps(record) + "\n"
        if "://" not in self.path:
            with open(self.path, "a") as f:
                f.write(line)
            return
        # Object stores cannot append: the file is rewritten (it grows by a line a log).
        old = (tf.io.gfile.GFile(self.path).read() if tf.io.gfile.exists(self.path) else "")
        with tf.io.gfile.GFile(self.path, "w") as f:
            f.write(old + line)


def read(model_dir: str, kind: Optional[str] = None) -> List[dict]:
    """The records of `model_dir/stats.jsonl` (of one `kind`), oldest first; [] if none."""
    path = os.path.join(model_dir, FILE)
    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [r for r in records if kind is None or r["kind"] == kind]


def write_config(model_dir: str, operative: str, writer) -> None:
    """operative_config.gin, and the same as a TensorBoard text summary."""
    with tf.io.gfile.GFile(os.path.join(model_dir, "operative_config.gin"), "w") as f:
        f.write(operative)
    with writer.as_default():
        # Markdown code block: TensorBoard's text plugin would reflow plain text.
        tf.summary.text("config/operative_gin",
                        "\n".join("    " + line for line in operative.splitlines()), step=0)


def write_result(model_dir: str, metrics: Dict[str, float],
                 eval_protocol: Optional[str] = None) -> None:
    """The finished run's last metrics as model_dir/train_result.json (for benchmarks, sweeps).

    eval_protocol: what the evaluation metrics among them measured (Evaluator.describe).
    """
    result: Dict[str, object] = {k: float(v) for k, v in metrics.items()}
    if eval_protocol:
        result["eval_protocol"] = eval_protocol
    with tf.io.gfile.GFile(os.path.join(model_dir, RESULT_FILE), "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
