"""Where the scale plan's BigGAN-128 model (tests/scale/test_plan.py's imagenet128 fixture)
spends its time, alone in one process: each stage of `built.plan_model` timed.

    .venv/bin/python benchmarks/probes/plan_build_time.py

Prints the seconds each stage took (building the models and tracing their memory plan at
float32 and at bfloat16, then counting the train step's FLOPs) and the total.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("PARAGAN_TF_LAYOUT_TUNE", "off")  # as the tests run it

from paragan_tf.measure import built  # noqa: E402  pylint: disable=wrong-import-position
from paragan_tf.train import experiment  # noqa: E402  pylint: disable=wrong-import-position


def main() -> int:
    began = time.monotonic()
    experiment.parse(["gin/biggan_imagenet128.gin", "gin/policies/biggan_pytorch.gin"],
                     ["train.total_steps = 150000"], finalize=False)
    stage = [None, time.monotonic()]

    def progress(message: str) -> None:
        now = time.monotonic()
        if stage[0]:
            print(f"{now - stage[1]:7.1f} s  {stage[0]}", flush=True)
        stage[:] = [message, now]
    built.plan_model(["float32", "mixed_bfloat16"], progress=progress)
    progress("")
    print(f"{time.monotonic() - began:7.1f} s  in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
