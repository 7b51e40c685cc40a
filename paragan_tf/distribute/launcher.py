"""Runs a training cluster on this machine: one real process per task, on 127.0.0.1.

Every task runs bin/train.py with the same gin files and bindings and its own
TF_CONFIG (free ports on 127.0.0.1). Output lines are prefixed with the task
("[worker:1] ..."). Parameter-server workers that die are restarted, as a
cluster manager would (TensorFlow re-admits them). The run ends when the
training tasks end (the chief when there is one, else every worker); the
exit code is non-zero if any of them failed. SIGINT/SIGTERM are passed on to
the training tasks (they save a checkpoint); after `grace_secs` the rest are
killed. `model_dir/launch.json` names each task's current pid.

Used by bin/launch_local.py and by the cluster benchmarks (bin/bench.py).
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, TextIO


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(REPO, "bin", "train.py")


@dataclasses.dataclass
class LaunchConfig:
    model_dir: str
    gin_files: List[str] = dataclasses.field(default_factory=list)
    gin_bindings: List[str] = dataclasses.field(default_factory=list)
    mode: str = "cluster"  # "cluster" (one TF cluster) or "per_class" (independent processes)
    num_workers: int = 2
    num_ps: int = 0
    chief: Optional[bool] = None  # default: a chief (the coordinator) when num_ps > 0
    num_groups: int = 2  # per_class mode
    threads_per_task: int = 0  # intra-op (inter-op: at least 2); 0: cores / compute tasks
    max_restarts: int = 3  # per parameter-server worker
    grace_secs: float = 60.0
    # > 0: training task i runs on cores [i * n, (i + 1) * n) of this process's cores
    # (sched_setaffinity): what a benchmark of "one worker = one core" needs, since
    # threads alone do not keep a lone task off the idle cores, nor a paused task's
    # core from the others. Parameter servers and the chief (the coordinator) are not
    # pinned: they run on whichever core is free. 0: no pinning.
    cores_per_task: int = 0

    @property
    def compute_tasks(self) -> int:
        """Tasks that train: the workers, or the groups under per_class."""
        return self.num_groups if self.mode == "per_class" else self.num_workers

    def check(self) -> None:
        if self.mode not in ("cluster", "per_class"):
            raise ValueError(f"mode={self.mode!r} must be cluster or per_class")
        # The tasks run from the repository root: a relative folder would be another one.
        if "://" not in self.model_dir and not os.path.isabs(self.model_dir):
            raise ValueError(f"model_dir={self.model_dir} must be absolute (resolve it where "
                             f"the user typed it: train/model_dir.resolve)")
        if self.num_workers < 1 or self.num_ps < 0 or self.num_groups < 1:
            raise ValueError("num_workers and num_groups must be >= 1, num_ps >= 0")
        compute, cores = self.compute_tasks, len(os.sched_getaffinity(0))
        if self.cores_per_task and compute * self.cores_per_task > cores:
            raise ValueError(f"cores_per_task={self.cores_per_task} needs that many cores per "
                             f"training task: {compute} tasks, {cores} cores")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    # Children get SIGKILL if the launcher dies, so no orphaned server holds a port.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class _Output:
    """Serialises prefixed lines from many threads onto one stream."""

    def __init__(self, stream: TextIO):
        self.stream, self.lock = stream, threading.Lock()

    def line(self, prefix: str, text: str) -> None:
        with self.lock:
            self.stream.write(f"[{prefix}] {text.rstrip()}\n")
            self.stream.flush()


class Task:
    """One child process and the thread that streams its prefixed output."""

    def __init__(self, name: str, argv: List[str], env: Dict[str, str], restartable: bool,
                 output: _Output, cores: Optional[List[int]] = None):
        self.name, self.argv, self.env, self.restartable = name, argv, env, restartable
        self.output, self.cores = output, cores
        self.restarts = 0
        self.process: Optional[subprocess.Popen] = None

    def _prepare_child(self) -> None:
        _die_with_parent()
        if self.cores:
            os.sched_setaffinity(0, self.cores)

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.argv, env=self.env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, bufsize=1, preexec_fn=self._prepare_child)
        pinned = f" on cores {self.cores}" if self.cores else ""
        self.output.line("launch", f"started {self.name} (pid {self.process.pid}){pinned}")
        threading.Thread(target=self._stream, args=(self.process,), daemon=True).start()

    def _stream(self, process: subprocess.Popen) -> None:
        for line in process.stdout:
            self.output.line(self.name, line)

    def poll(self) -> Optional[int]:
        return self.process.poll()

    @property
    def job(self) -> str:
        return self.name.split(":")[0]


def _tasks(config: LaunchConfig, output: _Output) -> List[Task]:
    compute = config.compute_tasks
    threads = (config.threads_per_task or config.cores_per_task
               or max(1, (os.cpu_count() or 1) // compute))
    argv = [sys.executable, TRAIN] + [f"--gin_file={f}" for f in config.gin_files]
    # Ours first, so the caller's bindings override them. Intra-op threads cap a task's
    # compute; inter-op threads stay >= 2: MultiWorkerMirrored's input (a
    # MultiDeviceIterator) is fetched by an inter-op thread, and with only one it waits
    # for every step to finish (a third of each step went to input in the scaling suite).
    argv += [f"--gin_bindings=strategy.intra_op_threads={threads}",
             f"--gin_bindings=strategy.inter_op_threads={max(2, threads)}"]
    argv += [f"--gin_bindings={b}" for b in config.gin_bindings]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("TF_CONFIG", None)
    allowed, n = sorted(os.sched_getaffinity(0)), config.cores_per_task
    cores = [allowed[i * n:(i + 1) * n] if n else None for i in range(compute)]
    if config.mode == "per_class":
        return [Task(f"group:{g}", argv + [
            f"--model_dir={os.path.join(config.model_dir, f'group_{g}')}",
            f"--gin_bindings=per_class.group={g}",
            f"--gin_bindings=per_class.num_groups={config.num_groups}"], env, False, output,
            cores[g]) for g in range(config.num_groups)]
    jobs = {"worker": config.num_workers}
    if config.chief if config.chief is not None else config.num_ps > 0:
        jobs["chief"] = 1
    if config.num_ps:
        jobs["ps"] = config.num_ps
    spec = {job: [f"127.0.0.1:{free_port()}" for _ in range(n)] for job, n in jobs.items()}
    tasks = []
    for job, addresses in spec.items():
        for index in range(len(addresses)):
            tf_config = json.dumps({"cluster": spec, "task": {"type": job, "index": index}})
            # Parameter-server workers are stateless servers: restart them.
            restartable = config.num_ps > 0 and job == "worker"
            tasks.append(Task(f"{job}:{index}", argv + [f"--model_dir={config.model_dir}"],
                              dict(env, TF_CONFIG=tf_config), restartable, output,
                              cores[index] if job == "worker" else None))
    return tasks


def _write_pids(model_dir: str, tasks: List[Task]) -> None:
    path = os.path.join(model_dir, "launch.json")
    with open(path + ".tmp", "w") as f:
        json.dump({t.name: t.process.pid for t in tasks}, f)
    os.replace(path + ".tmp", path)


def launch(config: LaunchConfig, stream: TextIO = sys.stdout, handle_signals: bool = True,
           on_started: Optional[Callable[[List[Task]], None]] = None,
           stop: Optional[threading.Event] = None) -> int:
    """Runs the cluster to completion; returns 0, or the failing training task's exit code.

    Two seams for callers that drive a cluster from Python (benchmarks/): `on_started`
    is called once with the started tasks (a Task's `process` is its current child,
    replaced when a worker restarts); setting `stop` asks the training tasks to
    checkpoint and stop, as SIGINT/SIGTERM to the launcher does.
    """
    config.check()
    os.makedirs(config.model_dir, exist_ok=True)
    output = _Output(stream)
    say = lambda message: output.line("launch", message)  # noqa: E731
    tasks = _tasks(config, output)
    has_chief = any(t.job == "chief" for t in tasks)
    training = [t for t in tasks if t.job in (("chief", "group") if has_chief
                                              else ("worker", "group"))]
    for task in tasks:
        task.start()
    _write_pids(config.model_dir, tasks)
    if on_started:
        on_started(tasks)

    stopping: List[float] = []

    def request_stop(why: str) -> None:
        if stopping:
            return
        say(f"{why}: asking the training tasks to checkpoint and stop")
        stopping.append(time.monotonic())
        for t in training:
            if t.poll() is None:
                t.process.send_signal(signal.SIGTERM)
    if handle_signals:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda number, frame: request_stop(f"signal {number}"))

    while any(t.poll() is None for t in training):
        if stop is not None and stop.is_set():
            request_stop("stop requested")
        for t in tasks:
            code = t.poll()
            if code is None or t in training or stopping:
                continue
            if t.restartable and t.restarts < config.max_restarts:
                t.restarts += 1
                say(f"{t.name} exited with {code}; restarting ({t.restarts}/"
                    f"{config.max_restarts})")
                t.start()
                _write_pids(config.model_dir, tasks)
        if stopping and time.monotonic() - stopping[0] > config.grace_secs:
            say("grace period over: killing the remaining tasks")
            break
        time.sleep(0.2)
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
    failed = {name: code for name, code in codes.items() if code != 0}
    if not failed:
        return 0
    say(f"failed: {failed}")
    code = next(iter(failed.values()))
    return code if code > 0 else 1  # killed by a signal: plain failure
