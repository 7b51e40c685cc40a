"""The step model on the published GPU runs of docs/scale.md's table: does it predict the
runs no constant was fitted to better than one efficiency per family?

    .venv/bin/python benchmarks/probes/step_model_published.py --output=published.json

The runs and our configs of them are tests/scale/test_plan.py's (C1: BigGAN-PyTorch on 8
V100; I1-I3: StudioGAN on 8 V100 and on 1 and 4 TITAN RTX, all float32 on CUDA cores).
The step model's `compute` for float32 on CUDA cores is fitted to C1 alone, with its
bandwidth held as on tensor cores (scale/devices.py) and the form and cost per op the
tensor-core model had when benchmarks/results/step_model_published_2026-11-30.json was
made (5 us per op, added to the work; OP_SECONDS_HELD); the TITAN RTX gets its
datasheet bandwidth, 672 GB/s (NVIDIA's announcement, 2018-12-03). Each independent run is
then planned both ways, with the V100 fit's one efficiency (what the plan ships) and with
the step model, and printed as planned / published seconds per step.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("PARAGAN_TF_LAYOUT_TUNE", "off")

from paragan_tf.measure import built  # noqa: E402  pylint: disable=wrong-import-position
from paragan_tf.scale import devices  # noqa: E402  pylint: disable=wrong-import-position
from paragan_tf.scale import plan  # noqa: E402  pylint: disable=wrong-import-position
from paragan_tf.train import experiment  # noqa: E402  pylint: disable=wrong-import-position
from tests.scale import test_plan as runs  # noqa: E402  pylint: disable=wrong-import-position

TITAN_RTX_GBPS = 672.0
OP_SECONDS_HELD = 5e-6


def _model(gin_files, bindings):
    experiment.parse(gin_files, bindings, finalize=False)
    return built.plan_model(["float32"], progress=lambda _: None)


def _catalogue(compute=None):
    extra = {"titan_rtx": dict(runs.TITAN_RTX, memory_gbps=TITAN_RTX_GBPS)}
    model = {"gpu/float32": dict(compute=compute, bandwidth=devices.GPU_BANDWIDTH_HELD,
                                 op_seconds=OP_SECONDS_HELD, overlap=False)
             } if compute else None
    return devices.catalogue(extra=extra, step_model=model)


def _step(model, target, catalogue) -> float:
    name, count = plan.parse_target(target)
    row = plan.plan_target(model, catalogue.device(name), count, catalogue, plan.Assumptions())
    return row["seconds"]["step"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    print("building the four configs at float32 (a few minutes on 2 cores)", flush=True)
    imagenet = _model(runs.IMAGENET128_FILES, runs.IMAGENET128_BINDINGS)
    cases = {
        "C1": (imagenet, "v100x8", runs.BIGGAN_PYTORCH_SECONDS),
        "I1": (dataclasses.replace(imagenet, d_steps=2, total_steps=200_000), "v100x8",
               runs.STUDIOGAN_2048_SECONDS),
        "I2": (_model(*runs.studiogan_config(runs.STUDIOGAN_CIFAR)), "titan_rtxx1",
               runs.STUDIOGAN_CIFAR_SECONDS),
        "I3": (_model(*runs.studiogan_config(runs.STUDIOGAN_TINY)), "titan_rtxx4",
               runs.STUDIOGAN_TINY_SECONDS)}
    c1_model, c1_target, c1_seconds = cases["C1"]
    from scipy import optimize  # pylint: disable=import-outside-toplevel
    # The step falls as compute rises: the root in log10(compute) over [-4, 0].
    compute = 10 ** optimize.brentq(lambda x: math.log(
        _step(c1_model, c1_target, _catalogue(10 ** x)) / c1_seconds), -4.0, 0.0, xtol=1e-10)
    print(f"float32 on CUDA cores: compute {compute:.4f} of the peak fits C1 "
          f"(bandwidth {devices.GPU_BANDWIDTH_HELD}, "
          f"{OP_SECONDS_HELD * 1e6:g} us per op held, added)")
    rows = []
    print("| run | published s/step | one efficiency (ratio) | step model (ratio) |")
    for name, (model, target, published) in cases.items():
        flat = _step(model, target, _catalogue())
        modelled = _step(model, target, _catalogue(compute))
        rows.append(dict(run=name, target=target, published=published, efficiency=flat,
                         step_model=modelled))
        print(f"| {name} {target} | {published:.3g} | {flat:.3g} ({flat / published:.2f}) | "
              f"{modelled:.3g} ({modelled / published:.2f}) |")
    spread = {k: max(abs(math.log(r[k] / r["published"])) for r in rows[1:])
              for k in ("efficiency", "step_model")}
    print(f"worst independent ratio: one efficiency {math.exp(spread['efficiency']):.2f}x, "
          f"step model {math.exp(spread['step_model']):.2f}x")
    if args.output:
        with open(args.output, "w") as f:
            json.dump(dict(command=" ".join(sys.argv), date=datetime.datetime.now(
                datetime.timezone.utc).isoformat(timespec="seconds"),
                machine=f"{platform.machine()}; plans only, nothing timed here",
                compute=compute, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
