"""Benchmarks; each suite writes one JSON object to --output (and prints it).

    python bin/bench.py --suite=step --gin_file=gin/biggan_cifar10.gin --output=runs/bench/step.json
    python bin/bench.py --suite=input --output=runs/bench/input.json
    python bin/bench.py --suite=scaling --output=runs/bench/scaling.json
    python bin/bench.py --suite=straggler --output=runs/bench/straggler.json
    python bin/bench.py --suite=memory --output=runs/bench/memory.json
    python bin/bench.py --suite=data --output=runs/bench/data.json
    python bin/bench.py --suite=async_quality --output=runs/bench/async_quality.json
    python bin/bench.py --suite=small_data --output=runs/bench/small_data.json
    python bin/bench.py --suite=eval_scaling --output=runs/bench/eval_scaling.json
    python bin/bench.py --suite=eval --output=runs/bench/eval.json
    python bin/bench.py --suite=time_to_quality --output=runs/bench/time_to_quality.json
    python bin/bench.py --suite=layout --gin_file=gin/mnist_default.gin --output=runs/bench/layout.json
    python bin/bench.py --suite=model_parallel --output=runs/bench/model_parallel.json
    python bin/bench.py --suite=pix2pix_study --output=runs/bench/pix2pix_study.json

Suites (see benchmarks/, outside the package): step (seconds per training step per layout,
FLOP rates, the machine's float32/bfloat16 peaks, MFU), input (stall fraction
of the sequential, the tf.data-AUTOTUNE and the congestion-aware pipeline over
a latency-bound and a decode-bound congested store),
scaling (weak scaling of synchronous multi-worker training), straggler (one
slow worker: sync vs asynchronous parameter-server training), memory (measured
peak of a training step at 128-1024 px beside the dry run's memory plan), data
(bin/prepare_dataset.py's throughput and peak memory at 10,000 and 40,000 images,
start-up to the first batch of image_folder vs records, records streaming rate with
and without storage latency), async_quality (ParaGAN's ablation: synchronous
MultiWorkerMirrored vs asynchronous closures vs the sample buffer, each with the plain and
the asymmetric policy, with no straggler and each straggler kind, workers pinned to a core
each, --repeats interleaved, each for the same training seconds on mnist5k: images/s,
FCD, conditional accuracy, closures per worker, the tasks' CPU seconds), small_data
(the default model on 100 Fashion-MNIST images per class, the same --train_steps
with no augmentation, DiffAugment, ADA, DiffAugment + LeCam: FCD, intra-class FCD,
precision, recall, conditional accuracy, D's logit gap), eval_scaling (seconds to
generate and embed 10,000 evaluation samples with 1 and 2 MultiWorkerMirrored
workers of one core each), eval (seconds for the FID Inception features of 10,000
images at 32 and 128 px in float32 and the auto layout's precision, beside the
classifier of FCD; bfloat16's change of the FID on the golden sets), time_to_quality
(--configs trained in turn for at most --budget_minutes each, --repeats times, every
--mark_steps checkpoint scored afterwards: FCD, conditional accuracy, the last one's FID;
training seconds to the first config's end-of-run quality; or --runs, folders
trained elsewhere such as a sweep's, only scored), layout (every layout candidate of
--gin_file's step, XLA x oneDNN x thread counts and float32 beside bfloat16, each in its
own process, --rounds interleaved rounds; `auto`'s choice and the rule's against the
fastest), pix2pix_study (pix2pix on Fashion-MNIST's edges: baseline, data parallel on 2
processes, mixed precision, accumulation 4, clipping 2, sharded optimizer state, --epochs
each: seconds per epoch, peak memory per process, final losses, validation L1). Each but
async_quality (runs x (--budget_minutes + ~1.5 minutes of
start-up and scoring)), small_data (4 x ~10 minutes) and
time_to_quality (the configs' training plus ~1 minute of scoring each) runs with
its defaults in a few minutes here. Progress goes to stderr, the JSON to stdout.
Every JSON has a "machine" record (benchmarks/machine.py): CPU model, cores, ISA
flags, threads, load before and after, free memory, versions, git commit, UTC
time, command line, accelerators and the theoretical FLOP/s peak.
"""

from __future__ import annotations

import json
import os
import sys

from absl import app
from absl import flags

import common  # noqa: F401  (pins tf-keras, also for the children's environment)

# The suites live beside the package, not in it (docs/benchmarks.md): from the repository.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import async_quality as async_quality_bench
from benchmarks import cluster
from benchmarks import data as data_bench
from benchmarks import eval_features as eval_features_bench
from benchmarks import eval_scaling as eval_scaling_bench
from benchmarks import input as input_bench
from benchmarks import layout as layout_bench
from benchmarks import machine
from benchmarks import memory as memory_bench
from benchmarks import model_parallel as model_parallel_bench
from benchmarks import pix2pix_study as pix2pix_study_bench
from benchmarks import small_data as small_data_bench
from benchmarks import step as step_bench
from benchmarks import time_to_quality as time_to_quality_bench
from paragan_tf.errors import ConfigError
from paragan_tf import teardown

SUITES = dict(cluster.SUITES, step=step_bench.step_suite, input=input_bench.input_suite,
              memory=memory_bench.memory_suite, data=data_bench.data_suite,
              async_quality=async_quality_bench.async_quality,
              small_data=small_data_bench.small_data,
              eval_scaling=eval_scaling_bench.eval_scaling,
              eval=eval_features_bench.eval_features,
              time_to_quality=time_to_quality_bench.time_to_quality,
              layout=layout_bench.layout_suite,
              model_parallel=model_parallel_bench.model_parallel,
              pix2pix_study=pix2pix_study_bench.pix2pix_study)

FLAGS = flags.FLAGS
flags.DEFINE_enum("suite", None, sorted(SUITES), "Which benchmark to run.")
flags.DEFINE_string("output", None, "Where to write the JSON result (default: stdout only).")
flags.DEFINE_string("gin_file", "gin/biggan_cifar10.gin", "step, layout: the experiment to "
                    "time; async_quality: the experiment of every arm (default "
                    f"{async_quality_bench.CONFIG}).")
flags.DEFINE_multi_string("gin_bindings", [], "step, layout, time_to_quality: extra gin "
                          "bindings.")
flags.DEFINE_integer("rounds", 3, "layout: interleaved rounds of timings per candidate.")
flags.DEFINE_list("layouts", ["fp32", "auto"], "step: layouts (gin/layouts/<name>.gin) to time.")
flags.DEFINE_integer("steps", 5, "step: timed steps per layout (after 2 warm-up steps); "
                     "model_parallel: training steps per mode (default 24).")
flags.DEFINE_string("profile_dir", None,
                    "step: also trace 2 steps per layout with tf.profiler into this folder.")
flags.DEFINE_float("budget_minutes", None, "async_quality: training minutes per run "
                   f"(default {async_quality_bench.BUDGET_MINUTES:g}); time_to_quality: the "
                   "most training minutes per config (20 by default).")
flags.DEFINE_list("configs", list(time_to_quality_bench.CONFIGS),
                  "time_to_quality: gin files to compare; the first sets the quality targets.")
flags.DEFINE_integer("mark_steps", None, "time_to_quality, small_data: steps between scored "
                     "checkpoints (default: 100, 400).")
flags.DEFINE_integer("repeats", None, "time_to_quality: runs per config, in turn (A B A B; "
                     "default 1); async_quality: interleaved rounds of every run (default 3).")
flags.DEFINE_multi_string("runs", [], "time_to_quality: score these finished run folders "
                          "(or every run under a sweep's folder) instead of training; "
                          "needs --fcd_target and --accuracy_target. Repeatable.")
flags.DEFINE_integer("fid_samples", None, "time_to_quality, small_data: generated images of "
                     "the last checkpoint's FID (default: 2,000, 1,000); 0: no FID.")
flags.DEFINE_float("fcd_target", None, "time_to_quality: FCD to reach (default: the first "
                   "config's last mark).")
flags.DEFINE_float("accuracy_target", None, "time_to_quality: conditional accuracy to reach "
                   "(default: the first config's last mark).")
flags.DEFINE_list("arms", [], "async_quality, small_data, model_parallel, pix2pix_study: "
                  f"arms (modes) to run (default: {list(async_quality_bench.ARMS)} of "
                  f"{list(async_quality_bench.MODES)}; all of {list(small_data_bench.ARMS)}; "
                  f"all of {list(model_parallel_bench.MODES)}; all of "
                  f"{list(pix2pix_study_bench.ARMS)}).")
flags.DEFINE_list("conditions", list(async_quality_bench.CONDITIONS_RUN),
                  "async_quality: straggler kinds "
                  f"(benchmarks/straggler.py), of {list(async_quality_bench.CONDITIONS)}.")
flags.DEFINE_integer("per_worker_batch", None, "async_quality: images per worker and "
                     "update (default 16).")
flags.DEFINE_list("policies", ["plain"], "async_quality: optimizer policies of every "
                  f"arm, of {list(async_quality_bench.POLICIES)}.")
flags.DEFINE_integer("eval_samples", 0, "async_quality, small_data: generated images per "
                     "FCD (default: 2,000 and 10,000); eval: images per arm (10,000).")
flags.DEFINE_integer("train_steps", 1600, "small_data: training steps of every arm.")
flags.DEFINE_integer("per_class", 50, "small_data: training images of each class.")
flags.DEFINE_integer("epochs", 2, "pix2pix_study: epochs of every arm.")
flags.mark_flag_as_required("suite")


def _progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _training_layout():
    """`auto` as bin/train.py's run of --gin_file chooses it: the layout tuner's choice (the
    cache, or timed now and cached), this process restarted with its oneDNN and threads
    when they differ (every layout of the suite then runs under them)."""
    from paragan_tf.measure import tuning as layout_tuning  # pylint: disable=C0415
    from paragan_tf.train import experiment  # pylint: disable=import-outside-toplevel
    experiment.parse([FLAGS.gin_file, "gin/layouts/auto.gin"], FLAGS.gin_bindings)
    settings = experiment.Settings.read()
    measured = layout_tuning.settle(settings, progress=_progress)
    common.restart_with(layout_tuning.restart_environment(settings, measured))
    return measured


def main(argv):
    if len(argv) > 1:
        common.fail(f"unexpected arguments {argv[1:]}")
    options = {}
    if FLAGS.suite == "step":
        options = dict(gin_file=FLAGS.gin_file, bindings=FLAGS.gin_bindings,
                       layouts=FLAGS.layouts, steps=FLAGS.steps, profile_dir=FLAGS.profile_dir,
                       measured=_training_layout() if "auto" in FLAGS.layouts else None)
    if FLAGS.suite == "layout":
        options = dict(gin_file=FLAGS.gin_file, bindings=FLAGS.gin_bindings,
                       rounds=FLAGS.rounds)
    if FLAGS.suite == "async_quality":
        options = dict(conditions=FLAGS.conditions, policies=FLAGS.policies)
        if FLAGS["gin_file"].present:
            options["config"] = FLAGS.gin_file
        if FLAGS.per_worker_batch:
            options["per_worker_batch"] = FLAGS.per_worker_batch
        if FLAGS.budget_minutes is not None:
            options["budget_minutes"] = FLAGS.budget_minutes
        if FLAGS["repeats"].present:
            options["repeats"] = FLAGS.repeats
    if FLAGS.suite == "small_data":
        options = dict(steps=FLAGS.train_steps, per_class=FLAGS.per_class)
    if FLAGS.suite == "time_to_quality":
        options = dict(configs=FLAGS.configs, repeats=FLAGS.repeats or 1, runs=FLAGS.runs,
                       bindings=FLAGS.gin_bindings, fcd_target=FLAGS.fcd_target,
                       accuracy_target=FLAGS.accuracy_target)
        if FLAGS["budget_minutes"].present:
            options["budget_minutes"] = FLAGS.budget_minutes
    if FLAGS.suite == "model_parallel" and FLAGS["steps"].present:
        options = dict(steps=FLAGS.steps)
    if FLAGS.suite == "pix2pix_study":
        options = dict(epochs=FLAGS.epochs)
    if FLAGS.arms and FLAGS.suite not in ("async_quality", "small_data", "model_parallel",
                                          "pix2pix_study"):
        common.fail(f"--arms applies to the async_quality, small_data, model_parallel and "
                    f"pix2pix_study suites, not to {FLAGS.suite}")
    if FLAGS.eval_samples and FLAGS.suite not in ("async_quality", "small_data", "eval",
                                                  "time_to_quality"):
        common.fail(f"--eval_samples applies to the async_quality, small_data, eval and "
                    f"time_to_quality suites, not to {FLAGS.suite}")
    own = {"configs": ("time_to_quality",), "mark_steps": ("time_to_quality", "small_data"),
           "repeats": ("time_to_quality", "async_quality"), "runs": ("time_to_quality",),
           "conditions": ("async_quality",), "policies": ("async_quality",),
           "fid_samples": ("time_to_quality", "small_data"),
           "fcd_target": ("time_to_quality",), "accuracy_target": ("time_to_quality",),
           "train_steps": ("small_data",), "per_class": ("small_data",),
           "rounds": ("layout",), "gin_file": ("step", "layout", "async_quality"),
           "per_worker_batch": ("async_quality",), "epochs": ("pix2pix_study",)}
    for name, suites in own.items():
        if FLAGS[name].present and FLAGS.suite not in suites:
            common.fail(f"--{name} applies to the {' and '.join(suites)} suite"
                        f"{'s' if len(suites) > 1 else ''}, not to {FLAGS.suite}")
        if FLAGS[name].present and name in ("mark_steps", "fid_samples"):
            options[name] = FLAGS[name].value
    if FLAGS.arms:
        options["modes" if FLAGS.suite == "model_parallel" else "arms"] = FLAGS.arms
    if FLAGS.eval_samples:
        options["eval_samples" if FLAGS.suite != "eval" else "images"] = FLAGS.eval_samples
    record = machine.describe()
    _progress(f"machine: {record['cpu_model']}, {record['physical_cores']} cores at "
              f"{record['peak']['clock_ghz']:.2f} GHz, load {record['load_before']}")
    try:
        result = SUITES[FLAGS.suite](progress=_progress, **options)
    except ConfigError as e:
        common.fail(str(e).strip().splitlines()[0])
    except step_bench.BeyondPeak as e:  # a number that cannot be true: no JSON
        common.fail(str(e), code=1)
    record["load_after"] = machine.load_average()
    result["machine"] = record
    text = json.dumps(result, indent=1, sort_keys=True)
    if FLAGS.output:
        os.makedirs(os.path.dirname(os.path.abspath(FLAGS.output)), exist_ok=True)
        with open(FLAGS.output, "w") as f:
            f.write(text + "\n")
    print(text, flush=True)
    teardown.exit_now(0)  # the step suite's input iterators: see teardown.exit_now


if __name__ == "__main__":
    app.run(main)
