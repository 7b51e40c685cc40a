"""The data suite: preparing, starting and streaming image folders of growing size.

For each size (10,000 and 40,000 PNGs at 64 px by default, written to a
temporary folder by the suite: mnist5k digits enlarged and tinted, ten class
folders) it measures
  prepare     bin/prepare_dataset.py on the folder, as a separate process:
              seconds, images/s, and peak resident memory of the whole process
              tree (the tool and its workers, sampled every 0.1 s from /proc),
              which must not grow with the number of images;
  start-up    seconds from naming the data to the first training batch, in this
              process: image_folder with the full scan (decodes every file),
              image_folder with lazy checks (lists the files), and records
              (reads the manifest);
  streaming   training-input images/s from the records (decode, fit, batch)
              with no injected latency and with a sleep per record, at the
              input tuner's starting read parallelism and at its ceiling
              for this shard count.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from typing import Sequence

import numpy as np
from PIL import Image
import tensorflow as tf

from benchmarks import memory_sampler
from benchmarks.congestion import CongestedStore
from paragan_tf.data import config as data_config
from paragan_tf.data import datasets
from paragan_tf.data import pipeline
from paragan_tf.data import records
from paragan_tf.data import tuning

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write_folder(root: str, count: int, size: int) -> None:
    """`count` PNGs in ten class folders: mnist5k digits enlarged to `size`, tinted per image."""
    images, labels = datasets._load_mnist5k()  # pylint: disable=protected-access
    rng = np.random.default_rng(0)
    for c in range(10):
        os.makedirs(os.path.join(root, str(c)))
    for i in range(count):
        k = i % len(labels)
        digit = Image.fromarray(images[k, ..., 0]).resize((size, size), Image.BILINEAR)
        tint = rng.integers(64, 256, 3).astype(np.float32) / 255.0
        rgb = (np.asarray(digit, np.float32)[..., None] * tint).astype(np.uint8)
        Image.fromarray(rgb).save(os.path.join(root, str(labels[k]), f"{i:06d}.png"))


def _prepare(source: str, output: str, resolution: int, progress) -> dict:
    command = [sys.executable, os.path.join(REPO, "bin", "prepare_dataset.py"),
               f"--source={source}", f"--output={output}", f"--resolution={resolution}"]
    began = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = memory_sampler.Sampler(proc.pid)
    sampler.start()
    out, err = proc.communicate()
    seconds = time.perf_counter() - began
    peak = sampler.stop().peak_total
    if proc.returncode:
        raise RuntimeError(f"prepare_dataset failed: {err[-2000:]}")
    summary = out.strip().splitlines()[-1]
    progress(summary)
    return dict(seconds=round(seconds, 2), peak_rss_bytes=peak, summary=summary)


def _first_batch_seconds(name: str, data_dir: str, resolution: int, batch: int,
                         **options) -> float:
    began = time.perf_counter()
    config = data_config.DatasetConfig(name=name, data_dir=data_dir, resolution=resolution,
                                       fit="resize", **options)
    source = pipeline.load_source(config)
    inputs = tuning.InputConfig(prepared=source.prepared is not None)
    fn = pipeline.real_input_fn(source, config, batch, seed=0, inputs=inputs)
    next(iter(fn(tf.distribute.InputContext())))
    return round(time.perf_counter() - began, 3)


def _stream_rate(data_dir: str, resolution: int, batch: int, batches: int, latency_ms: float,
                 read_parallelism: int) -> float:
    config = data_config.DatasetConfig(name="records", data_dir=data_dir, resolution=resolution,
                                       fit="resize")
    source = pipeline.load_source(config)
    inputs = tuning.InputConfig(prepared=True, read_parallelism=read_parallelism, prefetch=4,
                                read_hook=CongestedStore(latency_ms=latency_ms,
                                                         jitter_ms=latency_ms / 2)
                                if latency_ms else None)
    it = iter(pipeline.real_input_fn(source, config, batch, seed=0, inputs=inputs)(
        tf.distribute.InputContext()))
    # Warm-up: the shards' opening and the first shuffle window (8 batches of records,
    # read before the first batch); every timed batch then costs a batch of reads.
    for _ in range(3):
        next(it)
    began = time.perf_counter()
    for _ in range(batches):
        next(it)
    return round(batches * batch / (time.perf_counter() - began), 1)


def data_suite(sizes: Sequence[int] = (10_000, 40_000), resolution: int = 64,
               batch: int = 64, batches: int = 40, latency_ms: float = 4.0,
               progress=print) -> dict:
    """Prepare throughput and memory, start-up to the first batch, records streaming rate."""
    result = {"suite": "data", "resolution": resolution, "batch": batch,
              "images": "mnist5k digits enlarged and tinted, PNG, ten class folders",
              "latency": f"{latency_ms} ms + U(0, {latency_ms / 2}) ms sleep per record",
              "sizes": {}}
    for count in sizes:
        with tempfile.TemporaryDirectory(prefix="paragan_data_") as tmp:
            folder, prepared = os.path.join(tmp, "folder"), os.path.join(tmp, "records")
            began = time.perf_counter()
            _write_folder(folder, count, resolution)
            progress(f"{count} PNGs written in {time.perf_counter() - began:.1f} s")
            row = {"prepare": _prepare(folder, prepared, resolution, progress)}
            row["prepare"]["images_per_sec"] = round(count / row["prepare"]["seconds"], 1)
            row["startup_seconds"] = {
                "image_folder_full_scan": _first_batch_seconds(
                    "image_folder", folder, resolution, batch, scan_images="full"),
                "image_folder_lazy": _first_batch_seconds(
                    "image_folder", folder, resolution, batch, scan_images="lazy"),
                "records": _first_batch_seconds("records", prepared, resolution, batch)}
            progress(f"{count}: start-up {row['startup_seconds']}")
            shards = len(records.Manifest.load(prepared).shards)
            row["shards"] = shards
            row["records_images_per_sec"] = {
                f"{label}_read_parallelism_{p}": _stream_rate(
                    prepared, resolution, batch, batches, latency, p)
                for label, latency in (("no_latency", 0.0), ("latency", latency_ms))
                for p in (4, min(shards, 64))}
            progress(f"{count}: records streaming {row['records_images_per_sec']}")
            result["sizes"][str(count)] = row
    return result
