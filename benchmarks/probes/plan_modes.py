"""Memory per device of each placement (data parallelism, sharded Adam, G/D split, split
with 2 and 4 pipeline stages per network) for
BigGAN configs on cards of 16, 24 and 80 GiB, from the scale plan (scale/plan.py; models
built on this host, nothing trains), as a Markdown table.

    python benchmarks/probes/plan_modes.py [--configs=gin/biggan_1024.gin,...] [--count=8]

The 16 and 24 GiB cards are entered as custom devices (a V100-16GB and a 24 GiB PCIe card
from their datasheets; only their memory matters to these columns); the 80 GiB card is the
catalogue's A100.
"""

from __future__ import annotations

import os
import sys

from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from paragan_tf.measure import built  # noqa: E402
from paragan_tf.scale import devices as devices_lib  # noqa: E402
from paragan_tf.distribute import model_parallel  # noqa: E402
from paragan_tf.scale import plan as plan_lib  # noqa: E402
from paragan_tf.train import experiment  # noqa: E402

flags.DEFINE_list("configs", ["gin/biggan_imagenet128.gin", "gin/biggan_512.gin",
                              "gin/biggan_1024.gin"], "Experiments to plan.")
flags.DEFINE_integer("count", 16, "Devices per target (replicas of 4 devices at 2 stages "
                     "and of 8 at 4 must divide it).")
FLAGS = flags.FLAGS

CARDS = {
    # V100-SXM2-16GB: 15.7 TFLOP/s float32, 125 float16 tensor, NVLink 150 GB/s.
    "gpu16": dict(family="gpu", peak_fp32_tflops=15.7, peak_bf16_tflops=0.0,
                  peak_fp16_tflops=125.0, memory_gib=16.0, per_host=8, intra_gbps=150.0,
                  inter_gbps=6.25, per_input_host=8, source="V100-SXM2-16GB datasheet"),
    # A 24 GiB PCIe 4.0 card (NVIDIA L4: 30.3 float32, 121 bfloat16 TFLOP/s).
    "gpu24": dict(family="gpu", peak_fp32_tflops=30.3, peak_bf16_tflops=121.0,
                  peak_fp16_tflops=121.0, memory_gib=24.0, per_host=8, intra_gbps=32.0,
                  inter_gbps=12.5, per_input_host=8, source="NVIDIA L4 datasheet"),
}


def _cell(row: dict, mode: str) -> str:
    if mode == "data":
        if not row.get("fits"):
            return "does not fit"
        return (f"{row['memory_gib_per_replica']:.1f} GiB, {row['accumulation']} x "
                f"{row['micro_batch']}{' +rc' if row['recompute'] else ''}")
    plan = row["modes"][mode]
    if not plan["possible"] or not plan["fits"]:
        return "does not fit"
    memory = " / ".join(f"{where} {gib:.1f}" for where, gib in
                        plan["memory_gib_per_device"].items()) + " GiB"
    return (f"{memory}, {plan['accumulation']} x {plan['micro_batch']}"
            f"{' +rc' if plan['recompute'] else ''}, +{plan['extra_mib_per_step']:.0f} MiB/step")


def main(argv):
    del argv
    catalogue = devices_lib.catalogue(extra=CARDS)
    cards = ["gpu16", "gpu24", "a100"]
    modes = [mode.name for mode in model_parallel.PLANNED]
    print(f"| config | card | data parallel (today) | {' | '.join(modes)} | needs |")
    print("| --- | --- | --- | " + "--- | " * len(modes) + "--- |")
    for config in FLAGS.configs:
        experiment.parse([config], [], finalize=False)
        configured = built.configured_precision()
        precisions = sorted({catalogue.device(c).auto_precision() if configured == "auto"
                             else configured for c in cards})
        model = built.plan_model(precisions, progress=lambda m: print(
            f"[plan_modes] {config}: {m}", file=sys.stderr, flush=True))
        for card in cards:
            row = plan_lib.plan_target(
                model, catalogue.device(card), FLAGS.count, catalogue, plan_lib.Assumptions())
            cells = " | ".join(_cell(row, mode) for mode in modes)
            print(f"| {os.path.basename(config)} | {card} x{FLAGS.count} | {_cell(row, 'data')} "
                  f"| {cells} | {row['modes']['needed']} |", flush=True)
        import gin  # pylint: disable=import-outside-toplevel
        gin.clear_config()


if __name__ == "__main__":
    app.run(main)
