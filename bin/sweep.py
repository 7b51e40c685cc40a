"""Expands a sweep file into training runs and runs, resumes, exports or compares them.

    python bin/sweep.py --sweep=gin/sweeps/tiny.gin --dry_run      # list the runs
    python bin/sweep.py --sweep=gin/sweeps/tiny.gin                # run them here, in turn
    python bin/sweep.py --sweep=gin/sweeps/tiny.gin --parallel=2   # two at a time, cores split
    python bin/sweep.py --sweep=gin/sweeps/tiny.gin --slurm        # write a Slurm job array
    python bin/sweep.py --sweep=... --tf_config_hosts=h1:2222,h2:2222  # TF_CONFIG per run
    python bin/sweep.py --sweep=gin/sweeps/tiny.gin --summarize    # table of results

Every run trains in <root>/<run name> (root: --root, default runs/sweeps/<sweep name>)
with bin/train.py. Every run's bindings are checked before any run starts. Running
the command again skips finished runs and resumes unfinished ones; a failed run is
reported and the others go on (the exit code is then 1). The sweep's hyper-parameters
go to TensorBoard's HParams dashboard: `tensorboard --logdir <root>`.
"""

from __future__ import annotations

import csv
import json
import os
import shlex
import subprocess
import sys
import time

from absl import app
from absl import flags

import common
from paragan_tf.errors import ConfigError
from paragan_tf.train import run_files
from paragan_tf.train import sweep as sweep_lib

FLAGS = flags.FLAGS
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
flags.DEFINE_string("sweep", None, "The sweep file (gin/sweeps/*.gin).")
flags.DEFINE_string("root", None, "Folder of the sweep's runs (default runs/sweeps/<name>).")
flags.DEFINE_multi_string("gin_bindings", [], "Extra bindings for every run.")
flags.DEFINE_bool("dry_run", False, "List the runs and their status; run nothing.")
flags.DEFINE_integer("parallel", 1, "Runs at once on this machine; the cores are divided.")
flags.DEFINE_bool("slurm", False, "Write <root>/sweep.sbatch, a Slurm job array; run nothing.")
flags.DEFINE_list("tf_config_hosts", [], "Write one TF_CONFIG set per run for these "
                  "multi-worker hosts (host:port, chief first); run nothing.")
flags.DEFINE_bool("summarize", False, "Print and write (CSV, Markdown) the results table.")
flags.DEFINE_string("python", sys.executable, "The Python that runs bin/train.py.")


def write_hparams(runs, root: str) -> None:
    """The HParams dashboard's view of the sweep: the axes and metrics, and each run's values."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tensorboard.plugins.hparams import api as hp  # pylint: disable=import-outside-toplevel
    from tensorboard.plugins.hparams import plugin_data_pb2  # pylint: disable=import-outside-toplevel

    # One type per axis, as the dashboard needs to filter and sort it: numbers as floats
    # (2e-4 and 1 on one axis), else booleans, else strings.
    axes = {name: [run.varying[name] for run in runs] for name in runs[0].varying}

    def kind(values):
        if all(isinstance(v, bool) for v in values):
            return bool
        return float if all(isinstance(v, (int, float)) for v in values) else str
    kinds = {name: kind(values) for name, values in axes.items()}

    def typed(run):
        return {name: kinds[name](run.varying[name]) for name in axes}
    metrics = [hp.Metric("metrics/" + m, display_name=m) for m in
               ("fcd", "fid", "conditional_accuracy")] + [
        hp.Metric("perf/images_per_sec", display_name="images/s"),
        hp.Metric("loss/G", display_name="loss/G"), hp.Metric("loss/D", display_name="loss/D")]
    config = hp.hparams_config_pb(
        hparams=[hp.HParam(name, hp.Discrete(sorted({kinds[name](v) for v in values})))
                 for name, values in axes.items()], metrics=metrics)
    # The dashboard shows an axis of a written config only where `differs` is set, which
    # TensorBoard's API leaves false: set it from the values.
    plugin_data = config.value[0].metadata.plugin_data
    content = plugin_data_pb2.HParamsPluginData.FromString(plugin_data.content)
    for info in content.experiment.hparam_infos:
        info.differs = len(set(map(str, axes[info.name]))) > 1
    plugin_data.content = content.SerializeToString()
    with tf.summary.create_file_writer(root).as_default():
        tf.summary.experimental.write_raw_pb(config.SerializeToString(), step=0)
    for run in runs:
        marker = os.path.join(run.model_dir, "hparams.json")
        if os.path.exists(marker):
            continue
        with tf.summary.create_file_writer(run.model_dir).as_default():
            hp.hparams(typed(run), trial_id=run.name)
        with open(marker, "w") as f:
            json.dump(typed(run), f, indent=1)


def _last_step(run) -> str:
    """`step/total` of the run's newest progress record (stats.jsonl), or 'starting'."""
    logged = run_files.read(run.model_dir, "log")
    return f"{logged[-1]['step']}/{logged[-1]['total_steps']}" if logged else "starting"


def run_local(runs, parallel: int, python: str) -> int:
    """Runs the unfinished runs, `parallel` at a time; returns how many failed."""
    todo = []
    for run in runs:
        state = sweep_lib.status(run)
        if state == "finished":
            print(f"skip   {run.name}: finished", flush=True)
        else:
            todo.append((run, state))
    groups = sweep_lib.divide_cores(sorted(os.sched_getaffinity(0)), parallel)
    free, active, failed, total, started = list(range(len(groups))), {}, [], len(todo), 0
    heartbeat = time.time()
    while todo or active:
        while todo and free:
            (run, state), slot = todo.pop(0), free.pop(0)
            cores = groups[slot]
            threads = [f"strategy.intra_op_threads = {len(cores)}",
                       f"strategy.inter_op_threads = {min(2, len(cores))}"]
            command = sweep_lib.train_command(run, python, REPO)
            command += [f"--gin_bindings={b}" for b in threads] if len(groups) > 1 else []
            os.makedirs(run.model_dir, exist_ok=True)
            log = open(os.path.join(run.model_dir, "train.log"), "a")  # pylint: disable=consider-using-with
            proc = subprocess.Popen(  # pylint: disable=consider-using-with
                command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
                preexec_fn=lambda cores=cores: os.sched_setaffinity(0, cores))
            started += 1
            verb = "resume" if state == "unfinished" else "start "
            print(f"{verb} {run.name} [{started}/{total}] on core(s) {cores}: "
                  f"{run.model_dir}/train.log", flush=True)
            active[proc] = (run, slot, time.time(), log)
        time.sleep(0.5)
        for proc in [p for p in active if p.poll() is not None]:
            run, slot, begun, log = active.pop(proc)
            log.close()
            free.append(slot)
            seconds = time.time() - begun
            if proc.returncode == 0:
                print(f"done   {run.name} in {seconds:.0f} s", flush=True)
            else:
                with open(os.path.join(run.model_dir, "train.log"), errors="replace") as f:
                    lines = [line.strip() for line in f.read()[-4000:].splitlines() if line]
                failed.append(run.name)
                print(f"FAILED {run.name} (exit {proc.returncode} after {seconds:.0f} s): "
                      f"{lines[-1] if lines else ''}", flush=True)
        if active and time.time() - heartbeat > 60:
            heartbeat = time.time()
            print("running: " + ", ".join(f"{r.name} at step {_last_step(r)}"
                                          for r, *_ in active.values()), flush=True)
    if failed:
        print(f"{len(failed)} run(s) failed: {', '.join(failed)} (their train.log says why; "
              f"run the command again to retry them)", flush=True)
    return len(failed)


def write_slurm(runs, root: str, python: str) -> str:
    """A Slurm job array: task i trains run i through srun (resubmitting resumes)."""
    cases = []
    for i, run in enumerate(runs):
        command = " ".join(shlex.quote(a) for a in sweep_lib.train_command(run, python, REPO))
        cases.append(f"  {i}) exec srun {command} ;;")
    script = "\n".join([
        "#!/usr/bin/env bash",
        f"# Sweep {FLAGS.sweep}: {len(runs)} runs, one array task each.",
        f"#   sbatch {os.path.join(root, 'sweep.sbatch')}",
        "# Add --nodes/--ntasks-per-node and multi-worker bindings to the runs for",
        "# multi-process runs; every run resumes from its checkpoint when resubmitted.",
        "#SBATCH --job-name=paragan-sweep",
        f"#SBATCH --array=0-{len(runs) - 1}",
        f"#SBATCH --output={os.path.join(root, 'slurm-%A_%a.out')}",
        "#SBATCH --signal=TERM@120",
        "set -euo pipefail",
        f"cd {shlex.quote(REPO)}",
        'case "${SLURM_ARRAY_TASK_ID:?not a Slurm array task}" in',
        *cases,
        '  *) echo "no run for array task $SLURM_ARRAY_TASK_ID" >&2; exit 2 ;;',
        "esac",
    ]) + "\n"
    path = os.path.join(root, "sweep.sbatch")
    with open(path, "w") as f:
        f.write(script)
    return path


def write_tf_config(runs, root: str, hosts, python: str) -> str:
    """Per run, one TF_CONFIG per task (chief first) and the command each task runs."""
    lines = [f"# Sweep {FLAGS.sweep}: run each run's tasks on their hosts, one run at a time."]
    for run in runs:
        folder = os.path.join(run.model_dir, "tf_config")
        os.makedirs(folder, exist_ok=True)
        cluster = {"chief": hosts[:1], "worker": hosts[1:]} if len(hosts) > 1 else \
            {"chief": hosts}
        tasks = [("chief", 0)] + [("worker", i) for i in range(len(hosts) - 1)]
        bindings = ["strategy.kind = 'multi_worker_mirrored'"]
        command = sweep_lib.train_command(run, python, REPO) + [
            f"--gin_bindings={b}" for b in bindings]
        lines.append(f"# {run.name}")
        for (kind, index), host in zip(tasks, hosts):
            path = os.path.join(folder, f"{kind}-{index}.json")
            with open(path, "w") as f:
                json.dump({"cluster": cluster, "task": {"type": kind, "index": index}}, f)
            lines.append(f"TF_CONFIG=\"$(cat {shlex.quote(path)})\" " +
                         " ".join(shlex.quote(a) for a in command) + f"  # on {host}")
    path = os.path.join(root, "tf_config_commands.sh")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def summarize(runs, root: str) -> None:
    rows = sweep_lib.summarize(runs)
    columns = sweep_lib.table_columns(rows, runs)
    table = sweep_lib.markdown(rows, columns)
    with open(os.path.join(root, "summary.md"), "w") as f:
        f.write(table)
    with open(os.path.join(root, "summary.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    print(table, end="")
    print(f"written: {os.path.join(root, 'summary.md')}, {os.path.join(root, 'summary.csv')}")


def _main() -> int:
    if not FLAGS.sweep:
        common.fail("--sweep=<gin/sweeps/NAME.gin> is required")
    name = os.path.splitext(os.path.basename(FLAGS.sweep))[0]
    root = os.path.abspath(FLAGS.root or os.path.join("runs", "sweeps", name))
    spec = sweep_lib.load(FLAGS.sweep)
    runs = sweep_lib.expand(spec, root, FLAGS.gin_bindings)
    if FLAGS.summarize:
        summarize(runs, root)
        return 0
    try:
        sweep_lib.validate(runs)
    except ConfigError as e:
        common.fail(str(e))  # every bad run, one per line
    print(f"sweep {FLAGS.sweep}: {len(runs)} run(s) in {root}", flush=True)
    if FLAGS.dry_run:
        for run in runs:
            print(f"  {run.name:40s} {sweep_lib.status(run):10s} "
                  f"{'; '.join(b for b in run.bindings if b not in spec['bindings'])}")
        return 0
    os.makedirs(root, exist_ok=True)
    if FLAGS.slurm:
        print(f"wrote {write_slurm(runs, root, FLAGS.python)}: submit it with sbatch")
        return 0
    if FLAGS.tf_config_hosts:
        path = write_tf_config(runs, root, FLAGS.tf_config_hosts, FLAGS.python)
        print(f"wrote the TF_CONFIG files and {path}")
        return 0
    write_hparams(runs, root)
    failed = run_local(runs, FLAGS.parallel, FLAGS.python)
    summarize(runs, root)
    return 1 if failed else 0


if __name__ == "__main__":
    app.run(common.absl_main(_main))
