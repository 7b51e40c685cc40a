"""Starts a training cluster on this machine: one real process per task, on 127.0.0.1.

    # synchronous: 2 workers under MultiWorkerMirroredStrategy
    python bin/launch_local.py --num_workers=2 --model_dir=runs/mwms \
        --gin_file=gin/mnist_default.gin --gin_bindings="strategy.kind='multi_worker_mirrored'"
    # asynchronous (ParaGAN): coordinator + 2 workers + 1 parameter server
    python bin/launch_local.py --num_workers=2 --num_ps=1 --model_dir=runs/async \
        --gin_file=gin/async_ps.gin
    # per-class parallel training: K independent processes, one label group each
    python bin/launch_local.py --mode=per_class --num_groups=2 --model_dir=runs/per_class \
        --gin_file=gin/per_class.gin

Every task runs bin/train.py with the same --gin_file/--gin_bindings and its own
TF_CONFIG (free ports on 127.0.0.1). Output lines are prefixed with the task
("[worker:1] ..."). Parameter-server workers that die are restarted (as a
cluster manager would); the run ends when the training tasks end (all
workers; the chief when there is one), and the launcher exits non-zero if
any of them failed. Ctrl-C or SIGTERM is passed on to the tasks (they save a
checkpoint), then stragglers are killed. `model_dir/launch.json` names each
task's current pid (tests and operators use it to kill one).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional

from absl import app
from absl import flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(REPO, "bin", "train.py")

FLAGS = flags.FLAGS
flags.DEFINE_enum("mode", "cluster", ["cluster", "per_class"],
                  "cluster: one TF cluster (TF_CONFIG); per_class: independent processes.")
flags.DEFINE_integer("num_workers", 2, "Worker tasks.")
flags.DEFINE_integer("num_ps", 0, "Parameter-server tasks (> 0: asynchronous training).")
flags.DEFINE_bool("chief", None, "Add a chief task (default: when --num_ps > 0, as the "
                  "coordinator).")
flags.DEFINE_integer("num_groups", 2, "per_class mode: processes, one label group each.")
flags.DEFINE_string("model_dir", None, "Where the run writes (per_class: one subfolder per group).")
flags.DEFINE_multi_string("gin_file", [], "Forwarded to every task.")
flags.DEFINE_multi_string("gin_bindings", [], "Forwarded to every task.")
flags.DEFINE_integer("threads_per_task", 0,
                     "Intra-op threads per task (0: the cores divided among the compute tasks).")
flags.DEFINE_integer("max_restarts", 3, "Restarts of each dying parameter-server worker.")
flags.DEFINE_float("grace_secs", 60.0, "After Ctrl-C/SIGTERM, how long tasks get to checkpoint.")
flags.DEFINE_string("slow_task", None, "Rehearse a straggler: this task (e.g. worker:1) is "
                    "paused part of the time, see --slow_fraction.")
flags.DEFINE_float("slow_fraction", 0.5, "Share of wall time the --slow_task is paused.")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    # Children get SIGKILL if the launcher dies, so no orphaned servers hold ports.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Task:
    """One child process and the thread that streams its prefixed output."""

    def __init__(self, name: str, argv: List[str], env: Dict[str, str], restartable: bool):
        self.name, self.argv, self.env, self.restartable = name, argv, env, restartable
        self.restarts = 0
        self.process: Optional[subprocess.Popen] = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.argv, env=self.env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, bufsize=1, preexec_fn=_die_with_parent)
        say(f"started {self.name} (pid {self.process.pid})")
        threading.Thread(target=self._stream, args=(self.process,), daemon=True).start()

    def _stream(self, process: subprocess.Popen) -> None:
        for line in process.stdout:
            sys.stdout.write(f"[{self.name}] {line}")
        sys.stdout.flush()

    def poll(self) -> Optional[int]:
        return self.process.poll()


_LOCK = threading.Lock()


def say(message: str) -> None:
    with _LOCK:
        print(f"[launch] {message}", flush=True)


def _cluster_tasks(base_argv: List[str], env: Dict[str, str]) -> List[Task]:
    chief = FLAGS.chief if FLAGS.chief is not None else FLAGS.num_ps > 0
    jobs = {"worker": FLAGS.num_workers}
    if chief:
        jobs["chief"] = 1
    if FLAGS.num_ps:
        jobs["ps"] = FLAGS.num_ps
    spec = {job: [f"127.0.0.1:{free_port()}" for _ in range(n)] for job, n in jobs.items()}
    tasks = []
    for job, addresses in spec.items():
        for index in range(len(addresses)):
            config = json.dumps({"cluster": spec, "task": {"type": job, "index": index}})
            # Parameter-server workers are stateless servers: restart them like a
            # cluster manager would; TensorFlow re-admits them.
            restartable = FLAGS.num_ps > 0 and job == "worker"
            tasks.append(Task(f"{job}:{index}", base_argv, dict(env, TF_CONFIG=config),
                              restartable))
    return tasks


def _per_class_tasks(base_argv: List[str], env: Dict[str, str]) -> List[Task]:
    tasks = []
    for group in range(FLAGS.num_groups):
        argv = [a for a in base_argv if not a.startswith("--model_dir=")]
        argv += [f"--model_dir={os.path.join(FLAGS.model_dir, f'group_{group}')}",
                 f"--gin_bindings=per_class.group={group}",
                 f"--gin_bindings=per_class.num_groups={FLAGS.num_groups}"]
        tasks.append(Task(f"group:{group}", argv, dict(env), restartable=False))
    return tasks


def _is_training_task(task: Task, has_chief: bool) -> bool:
    job = task.name.split(":")[0]
    if job == "group":
        return True
    return job == "chief" if has_chief else job == "worker"


class Throttle(threading.Thread):
    """Pauses one task (SIGSTOP/SIGCONT) `fraction` of each 0.2 s: a slow machine."""

    PERIOD = 0.2

    def __init__(self, task: Task, fraction: float):
        super().__init__(daemon=True)
        self.task, self.fraction = task, fraction

    def run(self):
        while True:
            process = self.task.process
            if process.poll() is None:
                try:
                    process.send_signal(signal.SIGSTOP)
                    time.sleep(self.PERIOD * self.fraction)
                finally:
                    process.send_signal(signal.SIGCONT)
            time.sleep(self.PERIOD * (1 - self.fraction))


def _write_pids(tasks: List[Task]) -> None:
    path = os.path.join(FLAGS.model_dir, "launch.json")
    with open(path + ".tmp", "w") as f:
        json.dump({t.name: t.process.pid for t in tasks}, f)
    os.replace(path + ".tmp", path)


def main(argv):
    if len(argv) > 1:
        sys.exit(f"launch_local.py: error: unexpected arguments {argv[1:]}")
    if not FLAGS.model_dir:
        sys.exit("launch_local.py: error: --model_dir is required")
    if FLAGS.num_workers < 1 or FLAGS.num_ps < 0 or FLAGS.num_groups < 1:
        sys.exit("launch_local.py: error: --num_workers and --num_groups must be >= 1, "
                 "--num_ps >= 0")
    os.makedirs(FLAGS.model_dir, exist_ok=True)
    per_class = FLAGS.mode == "per_class"
    compute_tasks = FLAGS.num_groups if per_class else FLAGS.num_workers
    threads = FLAGS.threads_per_task or max(1, (os.cpu_count() or 1) // compute_tasks)
    base_argv = [sys.executable, TRAIN, f"--model_dir={FLAGS.model_dir}"]
    base_argv += [f"--gin_file={f}" for f in FLAGS.gin_file]
    # Ours first, so the user's bindings override them.
    base_argv += [f"--gin_bindings=strategy.intra_op_threads={threads}"]
    base_argv += [f"--gin_bindings={b}" for b in FLAGS.gin_bindings]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("TF_CONFIG", None)
    tasks = _per_class_tasks(base_argv, env) if per_class else _cluster_tasks(base_argv, env)
    has_chief = any(t.name.startswith("chief") for t in tasks)
    training = [t for t in tasks if _is_training_task(t, has_chief)]
    for task in tasks:
        task.start()
    _write_pids(tasks)
    if FLAGS.slow_task:
        slow = [t for t in tasks if t.name == FLAGS.slow_task]
        if not slow:
            sys.exit(f"launch_local.py: error: --slow_task={FLAGS.slow_task} is not one of "
                     f"{[t.name for t in tasks]}")
        Throttle(slow[0], FLAGS.slow_fraction).start()

    stopping: List[float] = []

    def on_signal(signum, frame):
        del frame
        if stopping:
            return
        say(f"signal {signum}: asking the tasks to checkpoint and stop")
        stopping.append(time.monotonic())
        for t in training:
            if t.poll() is None:
                t.process.send_signal(signal.SIGTERM)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    failed: Dict[str, int] = {}
    while any(t.poll() is None for t in training):
        for t in tasks:
            code = t.poll()
            if code is None or t in training or stopping:
                continue
            if t.restartable and t.restarts < FLAGS.max_restarts:
                t.restarts += 1
                say(f"{t.name} exited with {code}; restarting ({t.restarts}/"
                    f"{FLAGS.max_restarts})")
                t.start()
                _write_pids(tasks)
            elif t.name not in failed:
                say(f"{t.name} exited with {code}")
                failed[t.name] = code
        if stopping and time.monotonic() - stopping[0] > FLAGS.grace_secs:
            say("grace period over: killing the remaining tasks")
            break
        time.sleep(0.2)
    for t in training:
        code = t.poll()
        if code not in (None, 0):
            failed[t.name] = code
    for t in tasks:  # servers never exit on their own
        if t.poll() is None:
            t.process.send_signal(signal.SIGCONT)
            t.process.terminate()
    deadline = time.monotonic() + 10
    for t in tasks:
        try:
            t.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            t.process.kill()
            t.process.wait()
    time.sleep(0.2)  # let the output threads drain
    codes = {t.name: t.poll() for t in training}
    say(f"training tasks exited: {codes}")
    bad = {n: c for n, c in failed.items() if any(n == t.name for t in training)}
    if bad:
        say(f"failed: {bad}")
        sys.exit(next(iter(bad.values())) if all(c > 0 for c in bad.values()) else 1)
    return 0


if __name__ == "__main__":
    app.run(main)
