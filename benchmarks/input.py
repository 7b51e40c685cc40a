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
            (`baseline_input(parallel=False)`, here: a strawman, not the product);
autotune    the pipeline a competent user writes from the tf.data performance
            guide: interleave and map with num_parallel_calls=AUTOTUNE (the
            interleave's cycle length tf.data's default, one per CPU),
            prefetch AUTOTUNE, nothing of ours (`baseline_input(parallel=True)`);
aware       ours (data/pipeline.py): parallel interleave of `read_parallelism`
            shards, AUTOTUNE decode, prefetch, and the InputTuner of the trainer
            doubling read parallelism and prefetch after every window whose stall
            exceeds its target, rebuilding the iterator, exactly as bin/train.py
            does at log boundaries.

The slow stores are benchmarks/congestion.py's CongestedStore, handed to every
pipeline as its read hook (the product's seam: `input_pipeline.read_hook`).

Each pipeline reports the stall of its last window (the steady state; the
sequential one never changes, so it gets one window after start-up) and the
per-window trace; the aware trace shows the tuner's settings.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from typing import Callable, List, Optional, Sequence

import tensorflow as tf

from benchmarks.congestion import CongestedStore
from paragan_tf.data import config as data_config
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
             progress, label: str, settings: str) -> List[dict]:
    """Stall per window; `tuner` (ours only, else None) may rebuild the iterator after each."""
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
        if tuner is not None and tuner.config.tuned:
            entry.update(dataclasses.asdict(tuner.tuning))
            settings = (f"read parallelism {tuner.tuning.read_parallelism}, "
                        f"prefetch {tuner.tuning.prefetch}")
        trace.append(entry)
        progress(f"{label} window {w}: stall {100 * stall:.1f}% ({settings})")
        if tuner is not None and tuner.observe(stall):
            generation += 1
            iterator = make_iterator(generation)
            next(iterator)
    return trace


def baseline_input(source: datasets.Source, data: data_config.DatasetConfig, batch: int,
                   seed: int, store: Optional[CongestedStore], parallel: bool
                   ) -> tf.data.Dataset:
    """A strawman pipeline over the same shards as ours: `sequential` (parallel=False: one
    shard after another, sequential decode, no prefetch) or tf.data's AUTOTUNE alone."""
    num_shards = tuning.InputConfig().num_shards
    auto = tf.data.AUTOTUNE if parallel else None
    shards = tf.data.Dataset.range(num_shards).shuffle(
        num_shards, seed=seed, reshuffle_each_iteration=True).repeat()

    def read(shard):
        records = source.shard(data.split, num_shards, shard, parallel=auto)
        return store(records, shard) if store else records
    ds = (shards.interleave(read, num_parallel_calls=tf.data.AUTOTUNE) if parallel
          else shards.flat_map(read))
    ds = ds.map(lambda image, label: (pipeline.fit_image(image, data.resolution, data.fit),
                                      label), num_parallel_calls=auto)
    ds = ds.shuffle(min(data.shuffle_buffer, 8 * batch), seed=seed)
    ds = ds.batch(batch, drop_remainder=True)
    if parallel:
        return ds.prefetch(tf.data.AUTOTUNE)
    # Nothing read ahead: tf.data would otherwise add a prefetch of its own at the end
    # (inject_prefetch), which banks batches while the step is traced.
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    return ds.with_options(options)


PIPELINES = ("sequential", "autotune", "aware")


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


def _compare(source: datasets.Source, data: data_config.DatasetConfig,
             store: CongestedStore, compute, batch: int, windows: int, window_steps: int,
             progress, label: str) -> dict:
    result = {"injected": dataclasses.asdict(store)}
    # A store with no latency is read as the product reads fast data (no hook, no tuner).
    hook = store if store.latency_ms or store.jitter_ms else None
    for name in PIPELINES:
        if name == "aware":
            inputs = tuning.InputConfig(read_hook=hook)
            tuner = tuning.InputTuner(inputs)

            def make_iterator(generation, inputs=inputs, tuner=tuner):
                fn = pipeline.real_input_fn(source, data, batch, seed=generation,
                                            inputs=inputs, tuning=tuner.tuning)
                return iter(fn(tf.distribute.InputContext()))
            settings = "tf.data AUTOTUNE, no tuner"
        else:
            tuner = None

            def make_iterator(generation, parallel=name == "autotune"):
                return iter(baseline_input(source, data, batch, generation, hook, parallel))
            settings = ("tf.data AUTOTUNE" if name == "autotune" else
                        "sequential reads, no prefetch")
        trace = _windows(make_iterator, compute, tuner, 2 if name == "sequential" else windows,
                         window_steps, progress, f"{label} {name}", settings)
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
              "pipelines": {"sequential": "benchmarks/input.py baseline_input(parallel=False)",
                            "autotune": "benchmarks/input.py baseline_input(parallel=True)",
                            "aware": "data/pipeline.py real_input_fn with its tuner"}}
    if "latency" in models:
        data = data_config.DatasetConfig(name="mnist5k", resolution=32, fit="pad")
        result["latency"] = _compare(
            mnist, data, CongestedStore(latency_ms=latency_ms, jitter_ms=jitter_ms), compute,
            batch, windows, window_steps, progress, "latency")
        result["latency"]["store"] = "mnist5k in memory, a sleep per record (costs no CPU)"
    for name, size, latency, jitter in (("decode", decode_size, decode_latency_ms,
                                         decode_jitter_ms), ("cpu", cpu_size, 0.0, 0.0)):
        if name not in models:
            continue
        with tempfile.TemporaryDirectory(prefix="paragan_jpeg_") as root:
            _jpeg_folder(mnist, root, size, progress)
            files = datasets.get_source("image_folder", data_dir=root, channels=3)
            data = data_config.DatasetConfig(name="image_folder", data_dir=root, resolution=32,
                                             fit="resize")
            result[name] = _compare(
                files, data, CongestedStore(latency_ms=latency, jitter_ms=jitter),
                compute, batch, windows, window_steps, progress, name)
        result[name]["store"] = (f"mnist5k as {size}x{size} RGB JPEG files, "
                                 + ("a sleep per record, then " if latency else "no sleep: ")
                                 + "read + decode + area resize to 32x32 on the CPU")
    return result
