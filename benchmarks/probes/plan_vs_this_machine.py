"""The scale plan for this machine against steps timed on it: `make train`'s config.

    .venv/bin/python benchmarks/probes/plan_vs_this_machine.py

Times 6 steps of gin/mnist_default.gin (after 3 warm-up steps) with the step
benchmark's timer, plans the same config on `this_cpu` (scale/devices.py: the
theoretical peak x the cpu efficiency) and prints both. Run it alone: a loaded
machine times slower steps than it plans.

Measured 2026-11-26 on the 2-core AMD EPYC Zen 4 at 3.67 GHz, nothing else
running: 0.367 s/step timed (MFU 0.544), 0.258 planned, ratio 0.70; again at
11:02 UTC: 0.352 s/step (MFU 0.568), ratio 0.73. tests/scale/test_plan.py pins the
plan for that machine against the first; under the test suite's load on the
same machine the timing gave ratio 0.36.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks import step as step_bench  # noqa: E402  (the repository root, just above)
from paragan_tf.measure import built  # noqa: E402
from paragan_tf.scale import devices  # noqa: E402
from paragan_tf.scale import plan  # noqa: E402
from paragan_tf.train import experiment  # noqa: E402

measured = step_bench.time_layout("gin/mnist_default.gin", "auto", steps=6, warmup=3,
                                  progress=lambda _: None)
experiment.parse(["gin/mnist_default.gin"], [], finalize=False)
model = built.plan_model([measured["layout"]["precision"]], progress=lambda _: None)
catalogue = devices.catalogue()
row = plan.plan_target(model, catalogue.device("this_cpu"), 1, catalogue, plan.Assumptions())
mfu = measured["achieved_gflops"] / 1000 / row["peak_tflops_per_device"]
print(f"gin/mnist_default.gin on this machine: timed {measured['sec_per_step']:.3f} s/step "
      f"(MFU {mfu:.3f}), planned {row['seconds']['step']:.3f}; ratio "
      f"{row['seconds']['step'] / measured['sec_per_step']:.2f}")
