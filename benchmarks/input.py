"""The input benchmark: a fixed compute step fed through a congested store, three pipelines.

The "step" is fixed work independent of the data's values (a chain of
matmuls, ~`compute_ms` here, measured and reported), so the stall fraction
depends only on the pipeline:

  stall_frac = time blocked in next(iterator) / (blocked + computing)

Three congestion models, each read by three pipelines:

latency  an object store: the mnist5k digits (32x32, padded), every record
         read sleeps 10 ms + U(0, 5) ms. Waiting costs no CPU: parallel
         reads are free, and only their number decides the stall.
decode   a network file system of JPEG files: the mnist5k digits upscaled to
         256x256 RGB and written as JPEG files once (a temporary image
         folder); every record read sleeps 2 ms + U(0, 2) ms, then the file
         is read, decoded and area-resized to 32x32 on the same two cores
         the step computes on. Reads cost CPU: more parallelism stops paying
         once the cores are busy.
cpu      the same files at 512x512 and no sleep at all: decode on the two
         cores the step computes on is the only cost, and the cores are
         what parallel reads can use; nothing waits, so no congestion is declared
         and the aware pipeline is the plain AUTOTUNE one without its tuner.
         Measured here: AUTOTUNE keeps up (about 1 % stall) and so does ours;
         the tuner has nothing to win on a store whose only cost is CPU.

sequential  shards read one after another, sequential decode, no prefetch
            (input_pipeline.mode='naive');
autotune    the pipeline a competent user writes from the tf.data performance
            guide: interleave and map with num_parallel_calls=AUTOTUNE (the
            interleave's cycle length tf.data's default, one per CPU),
            prefetch AUTOTUNE, nothing of ours (mode='autotune');
aware       ours: parallel interleave of `read_parallelism` shards, AUTOTUNE
            decode, prefetch, and the InputTuner of the trainer doubling read
            parallelism and prefetch after every window whose stall exceeds
            its target, rebuilding the iterator, exactly as bin/train.py does
            at log boundaries (mode='aware').

Each pipeline reports the stall of its last window (the steady state; the
sequential one never changes, so it gets one window after start-up) and the
per-window trace; the aware trace shows the tuner's settings.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from typing import Callable, List, Sequence

import tensorflow as tf

from paragan_tf.data import congestion as congestion_lib
from paragan_tf.data import datasets
from paragan_tf.data import pipeline
from paragan_tf.data import tuning


def _compute_step(target_ms: float) -> Callable[[tf.Tensor], None]:
    """A fixed amount of matmul work (independent of the pixels), about target_ms long here."""
    w = tf.random.stateless_normal([512, 512], [7, 8]) / 23.0

    def make(repeats):
        @tf.function
        def step(images):
            x = tf.reshape(images, [tf.shape(images)[0], -1])[:, :512]
            x = tf.tile(x, [4, 1])
            for _ in range(repeats):
                x = tf.tanh(tf.matmul(x, w))
            return tf.reduce_sum(x)
        return step
    probe = make(10)
    sample = tf.zeros([64, 32, 32, 1])
    probe(sample).numpy()
    start = time.perf_counter()
    for _ in range(5):
        probe(sample).numpy()
    per_repeat = (time.perf_counter() - start) / 50
    step = make(max(1, round(target_ms / 1000 / per_repeat)))
    step(sample).numpy()
    return lambda images: step(images).numpy()


def _windows(make_iterator, compute, tuner, windows: int, window_steps: int,
             progress, label: str) -> List[dict]:
    trace, generation = [], 0
    iterator = make_iterator(generation)
    next(iterator)  # pipeline start-up (thread pools, first shard opens) is not a step
    for w in range(windows):
        wait = busy = 0.0
        for _ in range(window_steps):
            t0 = time.perf_counter()
            images, _ = next(iterator)
            t1 = time.perf_counter()
            compute(images)
            t2 = time.perf_counter()
            wait, busy = wait + t1 - t0, busy + t2 - t1
        stall = wait / (wait + busy)
        entry = dict(window=w, stall_frac=stall, compute_ms=1000 * busy / window_steps,
                     wait_ms=1000 * wait / window_steps)
        # An aware pipeline over a store without declared congestion is the plain one.
        settings = {"naive": "sequential reads, no prefetch"}.get(
            tuner.config.mode, "tf.data AUTOTUNE, no tuner")
        if tuner.config.tuned:
            entry.update(dataclasses.asdict(tuner.tuning))
            settings = (f"read parallelism {tuner.tuning.read_parallelism}, "
                        f"prefetch {tuner.tuning.prefetch}")
        trace.append(entry)
        progress(f"{label} window {w}: stall {100 * stall:.1f}% ({settings})")
        if tuner.observe(stall):
            generation += 1
            iterator = make_iterator(generation)
            next(iterator)
    return trace


# pipeline name in the JSON -> input_pipeline.mode
PIPELINES = {"sequential": "naive", "autotune": "autotune", "aware": "aware"}


def _jpeg_folder(source: datasets.Source, root: str, size: int, progress) -> None:
    """Writes the source's examples as size x size RGB JPEG files, root/<label>/<n>.jpg."""
    progress(f"decode model: writing {source.num_examples} {size}x{size} JPEG files to {root}")

    @tf.function
    def encode(image):
        image = tf.image.resize(tf.cast(image, tf.float32), [size, size], method="bilinear")
        image = tf.image.grayscale_to_rgb(image) if image.shape[-1] == 1 else image
        return tf.io.encode_jpeg(tf.cast(tf.clip_by_value(image, 0, 255), tf.uint8),
                                 quality=90)
    for n, (image, label) in enumerate(source.make("train")):
        folder = os.path.join(root, str(int(label)))
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{n:05d}.jpg"), "wb") as f:
            f.write(encode(image).numpy())


def _compare(source: datasets.Source, data: pipeline.DatasetConfig,
             congestion: congestion_lib.Congestion, compute, batch: int, windows: int,
             window_steps: int, progress, label: str) -> dict:
    result = {"injected": dataclasses.asdict(congestion)}
    for name, mode in PIPELINES.items():
        inputs = dataclasses.replace(tuning.InputConfig(), mode=mode, congestion=congestion)
        tuner = tuning.InputTuner(inputs)

        def make_iterator(generation, inputs=inputs, tuner=tuner):
            fn = pipeline.real_input_fn(source, data, batch, seed=generation, inputs=inputs,
                                        tuning=tuner.tuning)
            return iter(fn(tf.distribute.InputContext()))
        trace = _windows(make_iterator, compute, tuner, 2 if name == "sequential" else windows,
                         window_steps, progress, f"{label} {name}")
        result[f"{name}_stall_frac"] = trace[-1]["stall_frac"]
        result[f"{name}_trace"] = trace
    return result


def input_suite(latency_ms: float = 10.0, jitter_ms: float = 5.0, batch: int = 64,
                compute_ms: float = 100.0, windows: int = 5, window_steps: int = 10,
                models: Sequence[str] = ("latency", "decode", "cpu"), decode_size: int = 256,
                decode_latency_ms: float = 2.0, decode_jitter_ms: float = 2.0,
                cpu_size: int = 512,
                progress=print) -> dict:
    """Stall fraction of the sequential, AUTOTUNE and congestion-aware pipelines, per model."""
    mnist = datasets.get_source("mnist5k")
    compute = _compute_step(compute_ms)
    result = {"suite": "input", "dataset": "mnist5k", "batch": batch,
              "pipelines": {name: f"input_pipeline.mode={mode!r}"
                            for name, mode in PIPELINES.items()}}
    if "latency" in models:
        data = pipeline.DatasetConfig("mnist5k", None, "train", 32, "pad", False, 10_000, False)
        result["latency"] = _compare(
            mnist, data, congestion_lib.Congestion(latency_ms, jitter_ms, "record"), compute,
            batch, windows, window_steps, progress, "latency")
        result["latency"]["store"] = "mnist5k in memory, a sleep per record (costs no CPU)"
    for name, size, latency, jitter in (("decode", decode_size, decode_latency_ms,
                                         decode_jitter_ms), ("cpu", cpu_size, 0.0, 0.0)):
        if name not in models:
            continue
        with tempfile.TemporaryDirectory(prefix="paragan_jpeg_") as root:
            _jpeg_folder(mnist, root, size, progress)
            files = datasets.get_source("image_folder", data_dir=root, channels=3)
            data = pipeline.DatasetConfig("image_folder", root, "train", 32, "resize", False,
                                          10_000, False)
            result[name] = _compare(
                files, data, congestion_lib.Congestion(latency, jitter, "record"),
                compute, batch, windows, window_steps, progress, name)
        result[name]["store"] = (f"mnist5k as {size}x{size} RGB JPEG files, "
                                 + ("a sleep per record, then " if latency else "no sleep: ")
                                 + "read + decode + area resize to 32x32 on the CPU")
    return result
