"""The dataset tool's engine (bin/prepare_dataset.py): images -> TFRecord shards + manifest.

Sources: an image folder (`<root>/<class>/<image>`, the rules of
data/image_files.py), a zip of one, or a prepared TFDS dataset (`tfds:NAME`); with
`paired`, a pix2pix folder's split (`<root>/<split>/<image>`, each image an input and its
target side by side: each half is fitted on its own, data/paired.py).
Every image (data/prepare_images.py) is decoded with Pillow (any format it
reads, EXIF orientation applied, transparency composited on black), brought to
a square of the chosen resolution by the policy (`center_crop`: the centred
square, resized; `pad`: resized to fit, centred on black; `resize`: stretched),
and stored as PNG (lossless; or JPEG) in shards of `images_per_shard` images
written in a fixed shuffled order (so every shard mixes the classes), or one
class per shard with group_by_class (per-class training then opens its classes'
shards only).

The work is split by shard over worker processes (one per core). A worker
holds one shard's images at a time and streams them to disk, so memory does
not grow with the dataset; the plan (which image goes to which shard) is a
list of names. A shard is written under a temporary name, its result (count,
checksum, corrupt files) saved beside it, then renamed: a rerun with the same
plan skips the finished shards. Files Pillow cannot read are skipped, listed
by name in the manifest and counted in the summary, never dropped silently.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import multiprocessing
import os
import shutil
import time
import zipfile
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from paragan_tf.data import image_files
from paragan_tf.data import prepare_images
from paragan_tf.data import records
from paragan_tf.errors import ConfigError

POLICIES = ("center_crop", "pad", "resize")
ENCODINGS = ("png", "jpeg")
_WORK = ".prepare"  # per-shard results of an unfinished preparation


@dataclasses.dataclass(frozen=True)
class Options:
    source: str
    output: str
    resolution: int
    policy: str = "center_crop"
    group_by_class: bool = False
    images_per_shard: int = 1000
    encoding: str = "png"
    channels: int = 0  # 0: 1 if the images are greyscale, else 3
    split: str = "train"  # TFDS sources and paired folders
    tfds_data_dir: Optional[str] = None
    workers: int = 0  # 0: one per core
    # A pix2pix folder (data/paired.py): <source>/<split>/<input|target image>; each half
    # is fitted on its own.
    paired: bool = False


@dataclasses.dataclass(frozen=True)
class ShardTask:
    index: int
    file: str
    items: Tuple  # ((member, label), ...) of a folder or zip; (start, stop) of a TFDS split
    label: Optional[int]


@dataclasses.dataclass
class Plan:
    kind: str  # folder, zip or tfds
    root: str
    classes: List[str]
    channels: int
    tasks: List[ShardTask]
    skipped: Dict[str, int]
    skipped_line: str
    num_images: int
    digest: str = ""


def _check_options(options: Options) -> None:
    if "://" in options.output:
        raise ConfigError(f"--output={options.output!r}: the tool writes to a local directory "
                          f"(it renames finished shards); copy the result to remote storage "
                          f"afterwards, e.g. `gsutil -m cp -r`, and train from there")
    if options.policy not in POLICIES:
        raise ConfigError(f"--policy={options.policy!r} must be one of {', '.join(POLICIES)}")
    if options.encoding not in ENCODINGS:
        raise ConfigError(f"--encoding={options.encoding!r} must be png or jpeg")
    if options.resolution < 1 or options.images_per_shard < 1:
        raise ConfigError("--resolution and --images_per_shard must be positive")
    if options.channels not in (0, 1, 3):
        raise ConfigError(f"--channels={options.channels} must be 1, 3 or 0 (detect)")
    if options.paired and (options.group_by_class or options.source.startswith("tfds:")):
        raise ConfigError("--paired reads a pix2pix folder (<split>/<pair image>): not a "
                          "TFDS source, and its pairs have no classes to group by")


def _shard_file(split: str, index: int, total: int) -> str:
    return f"{split}-{index:05d}-of-{total:05d}.tfrecord"


def _shards(split: str, groups: List[Tuple[Optional[int], list]], per_shard: int) -> list:
    chunks = [(label, items[i:i + per_shard]) for label, items in groups
              for i in range(0, len(items), per_shard)]
    return [ShardTask(i, _shard_file(split, i, len(chunks)), tuple(items), label)
            for i, (label, items) in enumerate(chunks)]


def plan(options: Options) -> Plan:
    """What goes into which shard (reads names and a few image headers, no pixels)."""
    _check_options(options)
    src = options.source
    if src.startswith("tfds:"):
        return _plan_tfds(options)
    if os.path.isdir(src):
        kind, root = "folder", src
        entries = image_files.folder_entries(src)
        prefix = ""
    elif zipfile.is_zipfile(src):
        kind, root = "zip", src
        entries, prefix = image_files.zip_entries(src)
    else:
        raise ConfigError(f"--source={src!r} is not a folder, a zip file or tfds:NAME")
    listing = image_files.list_tree(entries, image_files.PIL_EXTENSIONS)
    if not listing.files:
        raise ConfigError(f"--source={src!r} holds no images in class sub-folders (expected "
                          f"<class>/<image file>; {listing.skipped_line() or 'it is empty'})")
    items = [(prefix + f, label) for f, label in zip(listing.files, listing.labels)]
    if options.paired:  # the split's folder plays a class folder's part in the listing
        if options.split not in listing.classes:
            raise ConfigError(f"--split={options.split!r}: --source={src!r} has no "
                              f"{options.split}/ folder (it has {listing.classes})")
        split_label = listing.classes.index(options.split)
        items = [(member, 0) for member, label in items if label == split_label]
        listing = dataclasses.replace(listing, classes=["pairs"])
    order = np.random.default_rng(0).permutation(len(items))  # shards mix the classes
    items = [items[i] for i in order]
    channels = options.channels
    if not channels:
        opener = prepare_images.member_opener(kind, root)
        channels, _ = image_files.detect_channels(
            [m for m, _ in items], lambda member: prepare_images.image_mode(opener, member))
    if options.group_by_class:
        groups = [(label, [it for it in items if it[1] == label])
                  for label in range(len(listing.classes))]
    else:
        groups = [(None, items)]
    tasks = _shards("train", groups, options.images_per_shard)
    return Plan(kind, root, listing.classes, channels, tasks, listing.skipped,
                listing.skipped_line(), len(items))


def _plan_tfds(options: Options) -> Plan:
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
    name = options.source[len("tfds:"):]
    if options.group_by_class:
        raise ConfigError("--group_by_class needs every label before planning, which a TFDS "
                          "source gives only by reading it whole; prepare it without "
                          "--group_by_class (or export it to an image folder first)")
    try:
        builder = tfds.builder(name, data_dir=options.tfds_data_dir)
    except tfds.core.registered.DatasetNotFoundError as e:
        raise ConfigError(f"--source=tfds:{name} is not a TFDS dataset "
                          f"({str(e).splitlines()[0]})") from None
    if not builder.is_prepared():
        raise ConfigError(f"--source=tfds:{name} is not prepared in --tfds_data_dir="
                          f"{options.tfds_data_dir!r}; `tfds build {name} --data_dir=DIR` first")
    if options.split not in builder.info.splits:
        raise ConfigError(f"--split={options.split!r} does not exist for tfds:{name}; choose "
                          f"one of {sorted(builder.info.splits)}")
    features = builder.info.features
    if "image" not in features or "label" not in features:
        raise ConfigError(f"tfds:{name} needs 'image' and 'label' features")
    total = builder.info.splits[options.split].num_examples
    per = options.images_per_shard
    ranges = [(a, min(a + per, total)) for a in range(0, total, per)]
    tasks = [ShardTask(i, _shard_file(options.split, i, len(ranges)), r, None)
             for i, r in enumerate(ranges)]
    channels = options.channels or (1 if features["image"].shape[-1] == 1 else 3)
    return Plan("tfds", name, list(features["label"].names), channels, tasks, {}, "", total)


# ---- worker processes --------------------------------------------------------------

_worker: dict = {}


def _init_worker(plan_: Plan, options: Options, progress) -> None:
    _worker.update(plan=plan_, options=options, progress=progress)


def _write_shard(task: ShardTask) -> dict:
    """Writes one shard (temporary name, then renamed); returns its result."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    plan_, options, progress = _worker["plan"], _worker["options"], _worker["progress"]
    final = os.path.join(options.output, task.file)
    temporary = final + ".tmp"
    counts: Dict[int, int] = {}
    corrupt: List[str] = []
    fit = prepare_images.fit_pair if options.paired else prepare_images.fit
    with tf.io.TFRecordWriter(temporary) as writer:
        for name, label, image in prepare_images.read_images(
                plan_.kind, plan_.root, task.items, options.split, options.tfds_data_dir):
            if not isinstance(image, Exception):
                try:
                    fitted = fit(image, options.resolution, options.policy, plan_.channels)
                except prepare_images.NotAPair as e:
                    image = e  # skipped and listed, as a corrupt file is
            if isinstance(image, Exception):
                corrupt.append(f"{name}: {type(image).__name__}: {image}".splitlines()[0])
            else:
                encoded = prepare_images.encode(fitted, options.encoding)
                writer.write(records.example_bytes(encoded, label))
                counts[label] = counts.get(label, 0) + 1
            with progress.get_lock():
                progress.value += 1
    with open(temporary, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    result = dict(index=task.index, file=task.file, count=sum(counts.values()), sha256=digest,
                  bytes=os.path.getsize(temporary), label=task.label,
                  counts={str(k): v for k, v in counts.items()}, corrupt=corrupt,
                  images=len(task.items) if plan_.kind != "tfds" else
                  task.items[1] - task.items[0])
    _atomic_write(os.path.join(options.output, _WORK, task.file + ".json"), json.dumps(result))
    os.replace(temporary, final)
    return result


def _atomic_write(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def _finished(options: Options, task: ShardTask) -> Optional[dict]:
    path = os.path.join(options.output, _WORK, task.file + ".json")
    if os.path.exists(path) and os.path.exists(os.path.join(options.output, task.file)):
        with open(path) as f:
            return json.load(f)
    return None


# ---- the controller --------------------------------------------------------------------

def _digest(options: Options, plan_: Plan) -> str:
    """Names the plan: the same source listing and options give the same shards."""
    digest = hashlib.sha256(json.dumps(
        [dataclasses.asdict(dataclasses.replace(options, workers=0)), plan_.kind,
         plan_.classes, plan_.channels], sort_keys=True).encode())
    for task in plan_.tasks:  # streamed: a million names need not become one string
        digest.update(repr(dataclasses.astuple(task)).encode())
    return digest.hexdigest()[:16]


def _claim_output(options: Options, digest: str) -> bool:
    """Prepares the output directory; True when it already holds this preparation, done."""
    out = options.output
    work = os.path.join(out, _WORK)
    if os.path.exists(os.path.join(out, records.MANIFEST)):
        if records.Manifest.load(out).plan == digest:
            return True
        raise ConfigError(f"--output={out!r} holds a dataset prepared from another source or "
                          f"with other options; choose a new --output or delete it")
    if os.path.isdir(work):
        with open(os.path.join(work, "plan")) as f:
            if f.read().strip() != digest:
                raise ConfigError(f"--output={out!r} holds an unfinished preparation of another "
                                  f"source or other options; choose a new --output or "
                                  f"delete it")
        return False
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise ConfigError(f"--output={out!r} exists and is not an empty directory")
    os.makedirs(work)
    _atomic_write(os.path.join(work, "plan"), digest)
    return False


def _progress_line(done: int, total: int, rate: float) -> str:
    eta = (total - done) / rate if rate > 0 else float("nan")
    eta_text = f"{int(eta) // 60}m{int(eta) % 60:02d}s" if math.isfinite(eta) else "?"
    return (f"prepared {done:,}/{total:,} images ({100 * done / max(total, 1):.1f}%), "
            f"{rate:,.0f} images/s, ETA {eta_text}")


def prepare(options: Options, log: Callable[[str], None] = print,
            progress_every: float = 5.0) -> records.Manifest:
    """Prepares `options.source` into `options.output`; returns its manifest."""
    began = time.perf_counter()
    plan_ = plan(options)
    plan_.digest = _digest(options, plan_)
    log(f"{options.source}: {plan_.num_images:,} images of {len(plan_.classes)} classes "
        f"({plan_.kind}) -> {len(plan_.tasks)} shards of up to "
        f"{options.images_per_shard} at {options.resolution} px, {options.policy}, "
        f"{plan_.channels} channel(s), {options.encoding}")
    if plan_.skipped_line:
        log(plan_.skipped_line)
    if _claim_output(options, plan_.digest):
        log(f"{options.output} already holds this preparation; nothing to do")
        return records.Manifest.load(options.output)
    results = {t.index: _finished(options, t) for t in plan_.tasks}
    todo = [t for t in plan_.tasks if results[t.index] is None]
    if len(todo) < len(plan_.tasks):
        log(f"resuming: {len(plan_.tasks) - len(todo)} of {len(plan_.tasks)} shards were "
            f"already written")
    already = sum(r["images"] for r in results.values() if r is not None)
    if todo:
        _run_workers(options, plan_, todo, results, already, log, progress_every)
    manifest = _manifest(options, plan_, [results[t.index] for t in plan_.tasks])
    _atomic_write(os.path.join(options.output, records.MANIFEST), manifest.to_json())
    shutil.rmtree(os.path.join(options.output, _WORK))
    seconds = time.perf_counter() - began
    corrupt = manifest.corrupt
    named = ", ".join(c.split(": ")[0] for c in corrupt[:3]) + (", ..." if len(corrupt) > 3
                                                               else "")
    log(f"done: {manifest.num_examples:,} images of "
        f"{len(manifest.classes)} classes in {len(manifest.shards)} shards at "
        f"{options.resolution} px in {options.output} ({seconds:.1f} s, "
        f"{(plan_.num_images - already) / seconds:,.0f} images/s); {len(corrupt)} corrupt "
        f"file(s) skipped{f' ({named}; all in dataset.json)' if corrupt else ''}, "
        f"{sum(plan_.skipped.values())} other entries skipped")
    return manifest


def _run_workers(options: Options, plan_: Plan, todo: Sequence[ShardTask], results: dict,
                 already: int, log, progress_every: float) -> None:
    context = multiprocessing.get_context("spawn")  # no forked TensorFlow state
    progress = context.Value("q", 0)
    workers = min(options.workers or os.cpu_count() or 1, len(todo))
    began, last = time.perf_counter(), time.perf_counter()
    # Each worker gets the plan without its task list: a task brings its own names, and
    # a copy of every name per worker would grow with the dataset.
    with context.Pool(workers, initializer=_init_worker,
                      initargs=(dataclasses.replace(plan_, tasks=[]), options,
                                progress)) as pool:
        pending = pool.imap_unordered(_write_shard, todo)
        remaining = len(todo)
        while remaining:
            try:
                result = pending.next(timeout=1.0)
            except multiprocessing.TimeoutError:
                result = None
            if result is not None:
                results[result["index"]] = result
                remaining -= 1
            now = time.perf_counter()
            if now - last >= progress_every or not remaining:
                done = progress.value
                log(_progress_line(already + done, plan_.num_images,
                                   done / max(now - began, 1e-9)))
                last = now


def _manifest(options: Options, plan_: Plan, results: List[dict]) -> records.Manifest:
    counts = np.zeros(len(plan_.classes), np.int64)
    for r in results:
        for label, n in r["counts"].items():
            counts[int(label)] += n
    return records.Manifest(
        classes=plan_.classes, counts={name: int(n) for name, n in zip(plan_.classes, counts)},
        shards=[records.Shard(r["file"], r["count"], r["sha256"], r["bytes"], r["label"])
                for r in results if r["count"]],
        resolution=options.resolution, policy=options.policy, channels=plan_.channels,
        encoding=options.encoding,
        split=options.split if plan_.kind == "tfds" or options.paired else "train",
        source=options.source if plan_.kind == "tfds" else os.path.abspath(options.source),
        grouped_by_class=options.group_by_class,
        corrupt=[c for r in results for c in r["corrupt"]], skipped=plan_.skipped,
        plan=plan_.digest, paired=options.paired)
