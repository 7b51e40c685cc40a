"""The training-step benchmark: seconds per step per layout, FLOP rates, and the machine's peaks.

For each layout (gin/layouts/<name>.gin on top of the experiment) the trainer
of bin/train.py (sync_trainer.SyncTrainer: the per-replica step under the strategy,
one step per `train(1)` call) runs `warmup` steps, then `steps` timed ones (the one step
timer, paragan_tf/measure/step_timer.py, as the layout tuner and bin/plan.py --calibrate); the
median is reported. The input comes from the experiment's own
pipeline (in-memory data, cached: its wait is reported, not hidden); when the
experiment's data is not on this machine (CIFAR-10 cannot be downloaded here)
a synthetic source of the same shape stands in, and the JSON says so.

FLOPs per train step are counted from the model (paragan_tf/scale/flops.py:
the profiler's forward counts of G and D, backward passes by the usual rule).

With a profile directory, two more steps per layout run under tf.profiler and
the JSON gets each op type's share of busy time (`profile.op_time_share`): the
evidence for where a layout's time goes. The trace opens in TensorBoard.

Two kinds of peak. The theoretical one (benchmarks/machine.py: cores x measured
clock x FLOP/cycle of the detected ISA) is the ceiling: `mfu` is measured
against it, and a FLOP/s above it stops the suite with an error instead of a
JSON. The probes, each the best of a 4096x4096 matmul and a 3x3 convolution
forward + input and weight gradients at the model's largest convolution's
shape, show what TensorFlow reaches on this machine: `fraction_of_probe`.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Callable, Dict, Optional, Sequence

import tensorflow as tf

from benchmarks import machine
from benchmarks import profile as profile_lib
from paragan_tf.layout import rules as layout_lib
from paragan_tf.errors import ConfigError
from paragan_tf.measure import step_timer
from paragan_tf.scale import flops as flops_lib
from paragan_tf.train import experiment as experiment_lib
from paragan_tf.train import sync_trainer

_BF16_FEATURES = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2")


def _median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: tracing, oneDNN primitive creation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_gflops(dtype: tf.DType, n: int = 4096, repeats: int = 3) -> float:
    a = tf.cast(tf.random.stateless_normal([n, n], [1, 2]), dtype)
    run = tf.function(lambda: tf.reduce_sum(tf.cast(tf.matmul(a, a), tf.float32)))
    return 2 * n ** 3 / _median_seconds(lambda: run().numpy(), repeats) / 1e9


_CONV_OPS = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")


def _conv_op_flops(op: tf.Operation) -> int:
    """2 x (forward output elements) x kh x kw x c_in: the multiply-adds of any Conv2D pass."""
    if op.type == "Conv2D":
        out, kernel = op.outputs[0].shape, op.inputs[1].shape
    elif op.type == "Conv2DBackpropInput":
        out, kernel = op.inputs[2].shape, op.inputs[1].shape
    else:  # Conv2DBackpropFilter: the kernel's shape is its output's
        out, kernel = op.inputs[2].shape, op.outputs[0].shape
    return 2 * out.num_elements() * kernel[0] * kernel[1] * kernel[2]


def executed_conv_flops(graph: tf.Graph, outputs: Sequence[tf.Tensor]) -> int:
    """FLOPs of the convolutions `outputs` depend on: what runs (TensorFlow prunes the rest)."""
    seen, todo, flops = set(), [t.op for t in outputs], 0
    while todo:
        op = todo.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.type in _CONV_OPS:
            flops += _conv_op_flops(op)
        todo.extend(t.op for t in op.inputs)
        todo.extend(op.control_inputs)
    return flops


def conv_probe(dtype: tf.DType, input_shape: Sequence[int], kernel_shape: Sequence[int]):
    """(function, FLOPs it claims): forward, input and weight gradients of one VALID conv.

    VALID, so that every multiply-add counted runs: oneDNN skips a SAME convolution's border
    taps on the zeros, which made a probe of a small image (10 x 10, 4 x 4 kernel) read
    above the datasheet (242.6 GFLOP/s against 235.2 on the 2-core Zen 4). All three
    results feed the returned value; otherwise the forward pass (whose value the gradients
    of a sum do not need) is pruned and never runs.
    """
    x = tf.cast(tf.random.stateless_normal(input_shape, [3, 4]), dtype)
    w = tf.cast(0.01 * tf.random.stateless_normal(kernel_shape, [5, 6]), dtype)

    @tf.function
    def run():
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = tf.nn.conv2d(x, w, 1, "VALID")
            loss = tf.reduce_sum(tf.cast(y, tf.float32))
        gx, gw = tape.gradient(loss, [x, w])
        return loss + tf.reduce_sum(tf.cast(gx, tf.float32)) + tf.reduce_sum(
            tf.cast(gw, tf.float32))
    batch, height, width, _ = input_shape
    forward = 2 * batch * (height - kernel_shape[0] + 1) * (width - kernel_shape[1] + 1) \
        * kernel_shape[0] * kernel_shape[1] * kernel_shape[2] * kernel_shape[3]
    return run, 3 * forward


def conv_gflops(dtype: tf.DType, input_shape: Sequence[int], kernel_shape: Sequence[int],
                repeats: int = 3) -> float:
    run, flops = conv_probe(dtype, input_shape, kernel_shape)
    graph = run.get_concrete_function().graph
    executed = executed_conv_flops(graph, graph.outputs)
    if executed != flops:
        raise RuntimeError(f"conv probe claims {flops} FLOPs but its graph runs {executed}")
    return flops / _median_seconds(lambda: run().numpy(), repeats) / 1e9


def model_flops(exp: experiment_lib.Experiment) -> Dict[str, object]:
    """Forward FLOPs of G and D at the per-replica batch, training FLOPs per train step."""
    cfg = exp.settings.train
    count = flops_lib.forward(exp.generator, exp.discriminator,
                              cfg.batch_size // exp.strategy.num_replicas_in_sync)
    input_shape, kernel = count.dominant_conv
    return dict(g_forward_flops=count.g, d_forward_flops=count.d,
                train_step_flops=(count.train_step(cfg.d_steps, cfg.accumulation,
                                                   exp.objective.reuses_fakes)
                                  * exp.strategy.num_replicas_in_sync),
                dominant_conv=dict(input=input_shape, kernel=kernel))


def time_layout(gin_file: str, layout: str, bindings: Sequence[str] = (), steps: int = 5,
                warmup: int = 2, progress=print, profile_dir: Optional[str] = None,
                measured=None) -> dict:
    """Median seconds per train step of `gin_file` under gin/layouts/<layout>.gin
    (`measured`: the tuner's choice for `auto`, measure/tuning.py settle)."""
    exp, data = experiment_lib.build_or_stand_in(
        [gin_file, f"gin/layouts/{layout}.gin"], bindings, measured=measured)
    cfg = exp.settings.train
    trainer = sync_trainer.SyncTrainer(exp)
    timed = step_timer.time_steps(trainer, steps, warmup=warmup,
                                  progress=progress, label=layout)
    times = timed.seconds
    waits = [r.metrics["perf/input_wait_seconds"] for r in timed.results]
    losses = {k: v for k, v in timed.results[-1].metrics.items() if k.startswith("loss/")}
    sec = statistics.median(times)
    profile = None
    if profile_dir:  # two more steps under tf.profiler: where the time goes
        logdir = os.path.join(profile_dir, layout)
        tf.profiler.experimental.start(logdir)
        for _ in range(2):
            trainer.train(1)
        tf.profiler.experimental.stop()
        profile = dict(logdir=logdir,
                       op_time_share=profile_lib.shares(profile_lib.op_seconds(logdir)))
        progress(f"{layout}: profile in {logdir}")
    flops = model_flops(exp)
    result = dict(
        sec_per_step=sec, step_times=times, images_per_sec=cfg.real_images_per_step / sec,
        g_samples_per_sec=(cfg.d_steps + 1) * cfg.accumulation * cfg.batch_size / sec,
        input_wait_frac=sum(waits) / sum(times),
        achieved_gflops=flops["train_step_flops"] / sec / 1e9,
        layout=exp.layout.as_dict(), last_losses=losses, data=data,
        strategy=type(exp.strategy).__name__, profile=profile, **flops)
    trainer.close()
    return result


def step_suite(gin_file: str = "gin/biggan_cifar10.gin",
               layouts: Sequence[str] = ("fp32", "auto"), steps: int = 5, warmup: int = 2,
               bindings: Sequence[str] = (), progress=print,
               profile_dir: Optional[str] = None, measured=None) -> dict:
    """Every layout's step time, the peaks, MFU and the speed-ups (see the module doc).
    `measured`: what bin/train.py's first run of the step chooses (measure/tuning.py settle:
    the cache, or timed now), which `auto` takes as training would."""
    if steps < 1:
        raise ConfigError("the step benchmark needs at least 1 timed step")
    runs = {}
    for name in layouts:
        runs[name] = time_layout(gin_file, name, bindings, steps, warmup, progress, profile_dir,
                                 measured=measured if name == "auto" else None)
    conv = next(iter(runs.values()))["dominant_conv"]
    progress(f"peaks: 4096^2 matmul and conv {conv['input']} x {conv['kernel']}")
    peaks = {}
    for dtype in (tf.float32, tf.bfloat16):
        peaks[dtype.name] = dict(matmul_4096=matmul_gflops(dtype),
                                 conv_fwd_bwd=conv_gflops(dtype, conv["input"], conv["kernel"]))
        progress(f"peak {dtype.name}: {peaks[dtype.name]}")
    peak_fp32 = max(peaks["float32"].values())
    peak_bf16 = max(peaks["bfloat16"].values())
    theory = machine.theoretical_peak()
    base = runs.get("fp32")
    for run in runs.values():
        run["speedup_vs_fp32"] = base["sec_per_step"] / run["sec_per_step"] if base else None
        bf16 = run["layout"]["precision"] == "mixed_bfloat16"
        run["fraction_of_probe"] = run["achieved_gflops"] / (peak_bf16 if bf16 else peak_fp32)
        ceiling = theory["bf16_gflops" if bf16 else "fp32_gflops"]
        run["theoretical_peak_gflops"] = ceiling
        run["mfu"] = run["achieved_gflops"] / ceiling if ceiling else None
    check_under_peak(runs, peaks, theory)
    features = layout_lib.cpu_features()
    return {
        "suite": "step", "config": gin_file, "layouts": runs,
        "theoretical_peak": theory,
        "probe_peak_fp32_gflops": peak_fp32, "probe_peak_bf16_gflops": peak_bf16,
        "peak_probes": peaks,
        "mfu_fp32": base["mfu"] if base else None,
        "best_speedup_vs_fp32": (max(r["speedup_vs_fp32"] for r in runs.values())
                                 if base else None),
        "cpu_features": sorted(f for f in features if f in _BF16_FEATURES),
        "bf16_unit": layout_lib.detect().bf16_unit,
    }


class BeyondPeak(RuntimeError):
    """An achieved FLOP/s above what the hardware can do in theory."""


def check_under_peak(runs: Dict[str, dict], peaks: Dict[str, dict], theory: dict) -> None:
    """Raises when any achieved FLOP/s passes the hardware's theoretical peak.

    Such a number means a wrong FLOP count, a wrong timing or a wrong peak table:
    publishing it would be worse than publishing nothing.
    """
    claims = [(f"{name} step", run["achieved_gflops"], run["theoretical_peak_gflops"])
              for name, run in runs.items()]
    for dtype, probes in peaks.items():
        ceiling = theory["bf16_gflops" if dtype == "bfloat16" else "fp32_gflops"]
        claims += [(f"{dtype} {probe} probe", value, ceiling) for probe, value in probes.items()]
    over = [f"{what} {value:.1f} GFLOP/s > theoretical {ceiling:.1f}"
            for what, value, ceiling in claims if ceiling and value > ceiling]
    if over:
        raise BeyondPeak("achieved FLOP/s above the hardware's theoretical peak ("
                           f"{theory['isa_row']}, {theory['cores']} cores at "
                           f"{theory['clock_ghz']:.2f} GHz, {theory['clock_source']}): "
                           + "; ".join(over))
