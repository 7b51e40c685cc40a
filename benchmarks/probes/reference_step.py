"""Times the reference network's train step in PyTorch: BigGAN-PyTorch at commit 98459431
(ajbrock/BigGAN-PyTorch, the network our BigGAN configs reproduce and the run the scale
plan's GPU efficiency was fitted to), with the arguments of its
scripts/launch_BigGAN_bs256x8.sh (G_ch = D_ch = 96, hierarchical z, shared embedding,
attention at 64, EMA), on synthetic images: one iteration of train_fns'
GAN_training_function `train(x, y)` per timing.

These are the reference network's times in PyTorch, not ours in TensorFlow (docs/scale.md).
PyTorch is never a dependency of this project: run this in an environment that has it (a
GPU machine's, or a scratch venv: `pip install torch`), beside a checkout of the reference:

    git clone https://github.com/ajbrock/BigGAN-PyTorch .reference/BigGAN-PyTorch
    git -C .reference/BigGAN-PyTorch checkout 98459431      # .reference/: git-ignored
    python benchmarks/probes/reference_step.py --biggan_dir=.reference/BigGAN-PyTorch \
        --output=reference_step.json                      # the grid below, on cuda
    python benchmarks/probes/reference_step.py --biggan_dir=.reference/BigGAN-PyTorch \
        --device=cpu --points=64:2:1:1:float32,64:2:2:2:bfloat16 --channels=8 \
        --warmup=1 --iterations=2 --output=/tmp/check.json   # a check where torch is CPU-only

Each point is resolution:batch:accumulations:D steps:precision, precision `bfloat16`
(autocast) or `float32` (TF32 matmuls and convolutions on CUDA). Per point: seconds per
iteration (the median of --iterations after --warmup, the device synchronised around
each), the convolution and matmul FLOPs of one iteration (torch.utils.flop_counter, forward
and backward), the achieved TFLOP/s, peak memory allocated (CUDA), the parameter counts;
a point that runs out of memory is recorded as such. The JSON also records the device, the
versions, the date and this command, and, first (`device_probes`, unless --no_probes), what
the device does outside the network: its copy bandwidth (a large tensor copied, read and
written), the seconds one tiny op costs from launch to completion, and a square matmul's
TFLOP/s at each precision. The step model's fit can hold its bandwidth and cost per op at
the first two (benchmarks/probes/fit_step_model.py --fix_from_probes). Modules the timing
never calls (torchvision, h5py, tqdm, PIL: the reference imports them for its data loaders)
are stood in for when missing.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
import types

# The launch script of the published run (scripts/launch_BigGAN_bs256x8.sh), less its
# data, logging and sampling arguments; batch, accumulations and D steps are per point.
LAUNCH = ["--G_attn", "64", "--D_attn", "64", "--G_nl", "inplace_relu", "--D_nl",
          "inplace_relu", "--SN_eps", "1e-6", "--BN_eps", "1e-5", "--adam_eps", "1e-6",
          "--G_ortho", "0.0", "--G_shared", "--G_init", "ortho", "--D_init", "ortho",
          "--hier", "--dim_z", "120", "--shared_dim", "128", "--G_eval_mode", "--G_lr",
          "1e-4", "--D_lr", "4e-4", "--D_B2", "0.999", "--G_B2", "0.999", "--ema",
          "--use_ema", "--ema_start", "20000", "--seed", "0"]
# The published run's own step (256 x 8 accumulations), then resolution x per-device batch
# at one accumulation and one D step, two D steps at two batches, and the same again in
# float32: what users run first (bfloat16 is what layout.precision='auto' picks on a GPU
# that has it), so that a run stopped by --budget_seconds loses the rest.
GRID = (["128:256:8:1:bfloat16"]
        + [f"{r}:{b}:1:1:bfloat16" for b in (8, 32, 64, 128, 256) for r in (64, 128, 256)]
        + ["128:32:1:2:bfloat16", "128:128:1:2:bfloat16"]
        + [f"{r}:{b}:1:1:float32" for b in (8, 32, 64, 128, 256) for r in (64, 128, 256)]
        + ["128:256:8:1:float32"])
OPTIONAL = ("torchvision", "h5py", "tqdm", "PIL")


def _placeholder(attr: str) -> type:
    if attr.startswith("__"):
        raise AttributeError(attr)  # what tools probe a module for (__file__, ...)
    return type(attr, (), {"__init__": lambda *a, **k: None})


class _StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Empty modules for the `missing` packages (and their submodules): every attribute
    is a placeholder class (the reference subclasses torchvision's datasets at import)."""

    def __init__(self, missing):
        self.missing = set(missing)

    def find_spec(self, name, path=None, target=None):
        del path, target
        if name.split(".")[0] not in self.missing:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _placeholder
        return module

    def exec_module(self, module):
        del module


def _reference(biggan_dir: str):
    """The reference's utils, BigGAN and train_fns modules."""
    missing = [name for name in OPTIONAL if importlib.util.find_spec(name) is None]
    if missing:
        print(f"standing in for {missing} (not installed; the timing never calls them)")
        sys.meta_path.append(_StandIn(missing))
    sys.path.insert(0, biggan_dir)
    return (importlib.import_module(name) for name in ("utils", "BigGAN", "train_fns"))


def _point(spec: str) -> dict:
    resolution, batch, accumulations, d_steps, precision = spec.split(":")
    if precision not in ("bfloat16", "float32"):
        raise SystemExit(f"point {spec}: precision must be bfloat16 or float32")
    return dict(resolution=int(resolution), batch=int(batch),
                accumulations=int(accumulations), d_steps=int(d_steps), precision=precision)


def _timed(torch, cuda: bool, fn, repeats: int) -> float:
    """The median seconds of `fn()` over `repeats` runs after one, synchronised."""
    fn()
    times = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        began = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def device_probes(torch, device_name: str) -> dict:
    """The device's copy bandwidth, the cost of one tiny op and a matmul's rate (module doc);
    sizes for a GPU (1 GiB copies, 8192^3 matmuls), smaller on a CPU."""
    device = torch.device(device_name)
    cuda = device.type == "cuda"
    copied = torch.empty(2 ** (28 if cuda else 24), dtype=torch.float32, device=device)
    target = torch.empty_like(copied)
    seconds = _timed(torch, cuda, lambda: target.copy_(copied), 10)
    copy_gbps = 2 * copied.numel() * 4 / seconds / 1e9  # read once, written once
    del copied, target
    one = torch.zeros(1, device=device)
    ops = 1000

    def tiny():
        for _ in range(ops):
            one.add_(1.0)
    op_seconds = _timed(torch, cuda, tiny, 5) / ops
    side = 8192 if cuda else 1024
    matmul = {}
    for precision, dtype in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        torch.backends.cuda.matmul.allow_tf32 = precision == "float32"
        a = torch.randn(side, side, device=device, dtype=dtype)
        b = torch.randn(side, side, device=device, dtype=dtype)
        matmul[precision] = 2 * side ** 3 / _timed(torch, cuda, lambda: a @ b, 10) / 1e12
    return dict(copy_gbps=copy_gbps, op_seconds=op_seconds, matmul_tflops=matmul,
                matmul_side=side)  # float32's matmul as TF32 on CUDA, as a float32 point


def measure(point: dict, args, torch, utils, model, train_fns) -> dict:
    """One point: build G, D, the EMA and the step as the reference's train.py does, then
    time `train(x, y)`."""
    parser = utils.prepare_parser()
    config = vars(parser.parse_args(
        LAUNCH + ["--G_ch", str(args.channels), "--D_ch", str(args.channels),
                  "--batch_size", str(point["batch"]),
                  "--num_G_accumulations", str(point["accumulations"]),
                  "--num_D_accumulations", str(point["accumulations"]),
                  "--num_D_steps", str(point["d_steps"])]))
    config.update(resolution=point["resolution"], n_classes=1000,
                  G_activation=utils.activation_dict[config["G_nl"]],
                  D_activation=utils.activation_dict[config["D_nl"]])
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = point["precision"] == "float32"
    torch.backends.cudnn.allow_tf32 = point["precision"] == "float32"
    torch.backends.cudnn.benchmark = True
    utils.seed_rng(0)
    G = model.Generator(**config).to(device)
    D = model.Discriminator(**config).to(device)
    G_ema = model.Generator(**{**config, "skip_init": True, "no_optim": True}).to(device)
    ema = utils.ema(G, G_ema, config["ema_decay"], config["ema_start"])
    GD = model.G_D(G, D)
    # The reference's z and y are a torch.Tensor subclass that samples in place; torch 2
    # (not the 1.0 it was written for) carries a subclass through every op, into kernels
    # that convert it and fail. Ops on them then return plain tensors, as in torch 1.0.
    utils.Distribution.__torch_function__ = torch._C._disabled_torch_function_impl
    z_, y_ = utils.prepare_z_y(config["batch_size"], G.dim_z, config["n_classes"],
                               device=args.device)
    state = {"itr": 1}
    train = train_fns.GAN_training_function(G, D, GD, z_, y_, ema, state, config)
    images = point["batch"] * point["accumulations"] * point["d_steps"]
    x = torch.randn(images, 3, point["resolution"], point["resolution"], device=device)
    y = torch.randint(0, config["n_classes"], (images,), device=device)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16,
                            enabled=point["precision"] == "bfloat16"):
            train(x, y)
        if cuda:
            torch.cuda.synchronize()

    for _ in range(args.warmup):
        step()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    seconds = []
    for _ in range(args.iterations):
        began = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - began)
    peak = torch.cuda.max_memory_allocated() if cuda else None
    from torch.utils.flop_counter import FlopCounterMode  # pylint: disable=import-outside-toplevel
    counter = FlopCounterMode(display=False)
    with counter:
        step()
    flops = counter.get_total_flops()
    per_iteration = statistics.median(seconds)
    return dict(point, seconds_per_iteration=per_iteration, seconds=seconds,
                flops_per_iteration=flops, tflops_per_sec=flops / per_iteration / 1e12,
                peak_memory_bytes=peak, images_per_iteration=point["batch"]
                * point["accumulations"], params_g=sum(p.numel() for p in G.parameters()),
                params_d=sum(p.numel() for p in D.parameters()))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--biggan_dir", required=True, help="BigGAN-PyTorch at 98459431")
    parser.add_argument("--output", required=True, help="the JSON to write")
    parser.add_argument("--points", default=",".join(GRID),
                        help="resolution:batch:accumulations:D steps:precision, ...")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--channels", type=int, default=96, help="G_ch = D_ch")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--budget_seconds", type=float, default=480.0,
                        help="stop starting points after this long (the rest: not run)")
    parser.add_argument("--no_probes", action="store_true",
                        help="skip the device probes (copy bandwidth, op cost, matmul)")
    args = parser.parse_args(argv)
    import torch  # pylint: disable=import-outside-toplevel
    utils, model, train_fns = _reference(os.path.abspath(args.biggan_dir))
    points = [_point(p) for p in args.points.split(",")]
    cuda = args.device.startswith("cuda")
    result = {"reference": "ajbrock/BigGAN-PyTorch 98459431, scripts/launch_BigGAN_bs256x8.sh",
              "device": torch.cuda.get_device_name() if cuda else platform.processor()
              or platform.machine(), "torch": torch.__version__,
              "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
              "channels": args.channels, "points": []}
    began = time.monotonic()
    if not args.no_probes:
        result["device_probes"] = device_probes(torch, args.device)
        print(json.dumps({"device_probes": result["device_probes"]}), flush=True)
    for point in points:
        if time.monotonic() - began > args.budget_seconds:
            result["points"].append(dict(point, status="not run: over --budget_seconds"))
            continue
        try:
            row = dict(measure(point, args, torch, utils, model, train_fns), status="ok")
        except torch.cuda.OutOfMemoryError as e:
            row = dict(point, status=f"out of memory: {str(e).splitlines()[0]}")
        finally:
            if cuda:
                torch.cuda.empty_cache()
        result["points"].append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "seconds"}), flush=True)
        with open(args.output, "w") as f:  # after every point: a killed run keeps its rows
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
