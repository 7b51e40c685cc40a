"""Times the reference pix2pix's training iteration in PyTorch on this CPU: the reference's
own UnetGenerator and NLayerDiscriminator (junyanz/pytorch-CycleGAN-and-pix2pix at
78913853, models/networks.py: batch norm, dropout, the vanilla GAN's D with use_sigmoid and
BCE, lambda_L1 = 100, Adam 2e-4 with betas (0.5, 0.999)) in its pix2pix model's
`optimize_parameters` order: G once, D's backward and step, G's backward and step.

PyTorch is never a dependency of this project: run this with a scratch venv's python beside
a copy of the reference's models/networks.py (as tests/golden/make_pix2pix_golden.py):

    python3 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch==2.13.0 numpy
    /tmp/torchvenv/bin/python benchmarks/probes/pix2pix_reference_step.py \
        --reference_dir=/tmp/pix2pix --points=256:1:64,64:16:32 --output=ref.json

Each point is resolution:batch:width (ngf = ndf), one channel in and out; per point and
precision (float32; bfloat16 = torch.autocast on the CPU) the median seconds of --iterations
iterations after --warmup, on random pairs, with --threads threads (the machine's cores).
benchmarks/probes/pix2pix_vs_reference.py runs this interleaved with our step.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import runpy
import statistics
import time
import types

import torch


def _networks(reference_dir: str):
    """The reference's models/networks.py, as a namespace."""
    return types.SimpleNamespace(**runpy.run_path(
        os.path.join(reference_dir, "models", "networks.py")))


def iteration_seconds(networks, resolution: int, batch: int, width: int, precision: str,
                      warmup: int, iterations: int) -> list:
    norm = networks.get_norm_layer("batch")
    downs = resolution.bit_length() - 1  # unet_256: 8 halvings to 1 x 1
    generator = networks.UnetGenerator(1, 1, downs, width, norm, use_dropout=True)
    discriminator = networks.NLayerDiscriminator(2, width, 3, norm, use_sigmoid=True)
    for net in (generator, discriminator):
        networks.init_weights(net, "normal")
        net.train()
    criterion, l1 = networks.GANLoss(use_lsgan=False), torch.nn.L1Loss()
    optimizer_g = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizer_d = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    real_a = torch.rand((batch, 1, resolution, resolution)) * 2 - 1
    real_b = torch.rand((batch, 1, resolution, resolution)) * 2 - 1
    cast = (torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bfloat16"
            else contextlib.nullcontext())

    def iterate():  # models/pix2pix_model.py: optimize_parameters
        with cast:
            fake_b = generator(real_a)
            optimizer_d.zero_grad()
            pred_fake = discriminator(torch.cat((real_a, fake_b), 1).detach())
            pred_real = discriminator(torch.cat((real_a, real_b), 1))
            # BCE is autocast to float32; the reference's losses as its model forms them.
            loss_d = (criterion(pred_fake.float(), False) +
                      criterion(pred_real.float(), True)) * 0.5
        loss_d.backward()
        optimizer_d.step()
        for p in discriminator.parameters():
            p.requires_grad = False
        optimizer_g.zero_grad()
        with cast:
            pred = discriminator(torch.cat((real_a, fake_b), 1))
            loss_g = criterion(pred.float(), True) + l1(fake_b.float(), real_b) * 100.0
        loss_g.backward()
        optimizer_g.step()
        for p in discriminator.parameters():
            p.requires_grad = True

    times = []
    for i in range(warmup + iterations):
        start = time.perf_counter()
        iterate()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference_dir", required=True)
    parser.add_argument("--points", default="256:1:64,64:16:32")
    parser.add_argument("--precisions", default="float32,bfloat16")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    networks = _networks(args.reference_dir)
    results = []
    for point in args.points.split(","):
        resolution, batch, width = (int(v) for v in point.split(":"))
        for precision in args.precisions.split(","):
            times = iteration_seconds(networks, resolution, batch, width, precision,
                                      args.warmup, args.iterations)
            results.append(dict(resolution=resolution, batch=batch, width=width,
                                precision=precision, seconds=statistics.median(times),
                                times=times))
            print(f"reference {point} {precision}: {results[-1]['seconds']:.4f} s",
                  flush=True)
    with open(args.output, "w") as f:
        json.dump(dict(torch=torch.__version__, threads=args.threads,
                       machine=platform.processor() or platform.machine(),
                       date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), points=results), f,
                  indent=1)


if __name__ == "__main__":
    main()
