"""Every convolution of pix2pix's step at one point (--point resolution:batch:width, one
channel in and out; the README recipe's 64 px, batch 16, ngf = ndf = 32 by default), each
of its three kernels timed alone (the forward, the input's gradient, the kernel's
gradient), in TensorFlow and in PyTorch on this CPU, float32 and bfloat16: which kernels a
gap between the two steps is in. TensorFlow's side also times the kernel gradient as our
layers take it where the output has few positions (`kernel_grad_matmul`,
models/thin_convs.py).

    .venv/bin/python benchmarks/probes/conv_layers_vs_torch.py --framework=tensorflow \
        --output=tf.json
    /tmp/torchvenv/bin/python benchmarks/probes/conv_layers_vs_torch.py --framework=torch \
        --output=torch.json
    python3 benchmarks/probes/conv_layers_vs_torch.py --compare tf.json torch.json

TensorFlow: the ops our layers run (families/pix2pix/networks.py: NHWC, stride 2 SAME, the
PatchGAN's stride-1 ones VALID on an input padded by one; the U-Net's up-sampling a
transposed convolution), each in a tf.function of its own; PyTorch: the reference's
modules' ops (NCHW, padding 1) through `torch.ops.aten.convolution` and
`convolution_backward` with one output asked for. The median of --calls calls after 2, in
milliseconds, with the machine's cores as threads; TensorFlow's empty function call is
timed too and taken off its times. Each framework runs in its own environment (torch is
never a dependency of ours).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from conv_kernels_vs_torch import median_ms  # beside this file (a script's first path)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def layers(side: int = 64, width: int = 32) -> list:
    """(name, input side, in channels, out channels, stride, transposed) of every conv of
    the U-Net and PatchGAN at `side` px and ngf = ndf = `width`."""
    depth = side.bit_length() - 1
    widths = [min(width * 2 ** i, 8 * width) for i in range(depth)]
    found, full, inner = [], side, 1
    for i, w in enumerate(widths):  # the U-Net's way down
        found.append((f"G/down{i}", side, inner, w, 2, False))
        side, inner = side // 2, w
    for i in reversed(range(depth)):  # and up, each level fed its skip beside it
        fed = widths[i] if i == depth - 1 else 2 * widths[i]
        found.append((f"G/up{i}", side, fed, widths[i - 1] if i else 1, 2, True))
        side *= 2
    side, inner = full, 2  # the PatchGAN on (output, input)
    for n, w in enumerate([width, 2 * width, 4 * width]):
        found.append((f"D/conv{n}", side, inner, w, 2, False))
        side, inner = side // 2, w
    found.append(("D/conv3", side, inner, 8 * width, 1, False))
    found.append(("D/out_conv", side - 1, 8 * width, 1, 1, False))
    return found


def tensorflow_times(point: str, calls: int) -> dict:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    sys.path.insert(0, REPO)
    from benchmarks import machine  # pylint: disable=import-outside-toplevel
    from paragan_tf.models import thin_convs  # pylint: disable=import-outside-toplevel
    resolution, batch, width = map(int, point.split(":"))
    empty = tf.function(lambda: tf.constant(0.0))
    overhead = median_ms(lambda: empty().numpy(), calls)
    out = {}
    for dtype in (tf.float32, tf.bfloat16):
        rows = {}
        for name, side, cin, cout, stride, transposed in layers(resolution, width):
            def tensor(*shape):
                return tf.cast(tf.random.normal(shape), dtype)
            if transposed:  # forward: the input's gradient of a conv from out to in
                x, k = tensor(batch, side, side, cin), tensor(4, 4, cout, cin)
                y_shape = [batch, 2 * side, 2 * side, cout]
                dy = tensor(*y_shape)
                ops = dict(
                    forward=lambda x=x, k=k, s=y_shape: tf.raw_ops.Conv2DBackpropInput(
                        input_sizes=s, filter=k, out_backprop=x, strides=[1, 2, 2, 1],
                        padding="SAME"),
                    input_grad=lambda dy=dy, k=k: tf.nn.conv2d(dy, k, 2, "SAME"),
                    kernel_grad=lambda dy=dy, x=x: tf.raw_ops.Conv2DBackpropFilter(
                        input=dy, filter_sizes=[4, 4, cout, cin], out_backprop=x,
                        strides=[1, 2, 2, 1], padding="SAME"),
                    kernel_grad_matmul=lambda dy=dy, x=x: thin_convs.kernel_gradient(
                        dy, x, [4, 4, cout, cin], 2, "SAME"))
            else:
                padded = side + 2 if stride == 1 else side
                padding = "VALID" if stride == 1 else "SAME"
                x, k = tensor(batch, padded, padded, cin), tensor(4, 4, cin, cout)
                out_side = side // 2 if stride == 2 else side - 1
                dy = tensor(batch, out_side, out_side, cout)
                strides = [1, stride, stride, 1]
                ops = dict(
                    forward=lambda x=x, k=k, s=stride, p=padding: tf.nn.conv2d(x, k, s, p),
                    input_grad=lambda dy=dy, k=k, s=strides, p=padding, xs=x.shape:
                        tf.raw_ops.Conv2DBackpropInput(input_sizes=list(xs), filter=k,
                                                       out_backprop=dy, strides=s, padding=p),
                    kernel_grad=lambda dy=dy, x=x, s=strides, p=padding, ks=k.shape:
                        tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=list(ks),
                                                        out_backprop=dy, strides=s, padding=p),
                    kernel_grad_matmul=lambda dy=dy, x=x, s=stride, p=padding, ks=k.shape:
                        thin_convs.kernel_gradient(x, dy, list(ks), s, p))
            row = {}
            for kernel, op in ops.items():
                fn = tf.function(lambda op=op: tf.reduce_sum(tf.cast(op()[:1, :1, :1, :1],
                                                                     tf.float32)))
                row[kernel] = round(max(median_ms(lambda fn=fn: fn().numpy(), calls)
                                        - overhead, 0.0), 3)
            rows[name] = row
        out[dtype.name] = rows
    return dict(framework="tensorflow " + tf.__version__, point=point,
                machine=machine.describe(), call_overhead_ms=round(overhead, 3), times=out)


def torch_times(point: str, calls: int) -> dict:
    import torch  # pylint: disable=import-outside-toplevel
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    resolution, batch, width = map(int, point.split(":"))
    aten = torch.ops.aten
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        rows = {}
        for name, side, cin, cout, stride, transposed in layers(resolution, width):
            def tensor(*shape):
                return torch.randn(*shape).to(dtype)
            x = tensor(batch, cin, side, side)
            k = tensor(cin, cout, 4, 4) if transposed else tensor(cout, cin, 4, 4)
            out_side = 2 * side if transposed else (side // 2 if stride == 2 else side - 1)
            dy = tensor(batch, cout, out_side, out_side)
            conv = dict(bias=None, stride=[stride] * 2, padding=[1, 1], dilation=[1, 1],
                        transposed=transposed, output_padding=[0, 0], groups=1)

            def backward(mask, dy=dy, x=x, k=k, conv=conv):
                return aten.convolution_backward(
                    dy, x, k, None, conv["stride"], conv["padding"], conv["dilation"],
                    transposed, conv["output_padding"], 1, mask)
            ops = dict(forward=lambda x=x, k=k, conv=conv: aten.convolution(x, k, **conv),
                       input_grad=lambda: backward([True, False, False]),
                       kernel_grad=lambda: backward([False, True, False]))
            with torch.no_grad():
                rows[name] = {kernel: round(median_ms(op, calls), 3)
                              for kernel, op in ops.items()}
        out[str(dtype).replace("torch.", "")] = rows
    return dict(framework="torch " + torch.__version__, point=point, machine=_cpu(),
                threads=torch.get_num_threads(), times=out)


def _cpu() -> dict:
    """The machine, for the side without TensorFlow (benchmarks/machine.py imports it)."""
    with open("/proc/cpuinfo") as f:
        model = next((line.split(":", 1)[1].strip() for line in f
                      if line.startswith("model name")), platform.processor())
    return dict(cpu=model, cores=len(os.sched_getaffinity(0)), platform=platform.platform(),
                date=time.strftime("%Y-%m-%d %H:%M:%S %Z"))


def compare(ours: dict, reference: dict) -> None:
    """Prints each kernel's milliseconds, TensorFlow's / PyTorch's, and their sums (the
    matmul kernel gradient: TensorFlow's alone)."""
    for precision in ours["times"]:
        mine, theirs = ours["times"][precision], reference["times"][precision]
        print(f"{precision}: ms, tensorflow / torch")
        totals = {}
        for name, row in mine.items():
            parts = []
            for kernel, ms in row.items():
                other = theirs[name].get(kernel)
                total = totals.setdefault(kernel, [0.0, 0.0])
                total[0] += ms
                total[1] += other or 0.0
                parts.append(f"{kernel} {ms:.2f}" + ("" if other is None else f"/{other:.2f}"))
            print(f"  {name:11s} " + "  ".join(parts))
        print("  total       " + "  ".join(
            f"{k} {a:.1f}" + (f"/{b:.1f}" if b else "") for k, (a, b) in totals.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", choices=("tensorflow", "torch"))
    parser.add_argument("--point", default="64:16:32", help="resolution:batch:width")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--output")
    parser.add_argument("--compare", nargs=2, metavar=("TENSORFLOW_JSON", "TORCH_JSON"))
    args = parser.parse_args()
    if args.compare:
        with open(args.compare[0]) as f, open(args.compare[1]) as g:
            compare(json.load(f), json.load(g))
        return
    times = tensorflow_times if args.framework == "tensorflow" else torch_times
    found = times(args.point, args.calls)
    text = json.dumps(found, indent=1)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
