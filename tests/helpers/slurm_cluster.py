"""A single-node Slurm cluster on localhost for the integration test, from Debian's packages.

`local_cluster(folder)` installs slurm-wlm and munge when they are missing (root and
apt-get required, as in CI), starts munged (unless one runs), slurmctld and slurmd with a
configuration written into `folder`, yields the environment for srun/sbatch, and stops
every daemon it started.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time

PACKAGES = ("slurm-wlm", "munge")


def install() -> None:
    if shutil.which("slurmctld") and shutil.which("munged"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise RuntimeError(f"the Slurm test needs {' and '.join(PACKAGES)}: "
                           f"sudo apt-get install {' '.join(PACKAGES)}")
    command = ["apt-get", "install", "-y", "-q", *PACKAGES]
    if subprocess.run(command, capture_output=True, check=False).returncode:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, check=True)
        subprocess.run(command, capture_output=True, check=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(folder: str, host: str, cpus: int) -> str:
    return "\n".join([
        "ClusterName=paragan-test",
        f"SlurmctldHost={host}(127.0.0.1)",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}",
        f"StateSaveLocation={folder}/state",
        f"SlurmdSpoolDir={folder}/spool",
        f"SlurmctldPidFile={folder}/slurmctld.pid",
        f"SlurmdPidFile={folder}/slurmd.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log",
        f"SlurmdLogFile={folder}/slurmd.log",
        # No cgroups in a container: plain process tracking, no task binding.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "ReturnToService=2",
        "MpiDefault=none",
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
        "PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP "
        "OverSubscribe=FORCE",
    ]) + "\n"


def _wait(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while not condition():
        if time.time() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.5)


@contextlib.contextmanager
def local_cluster(folder: str):
    install()
    folder = os.path.abspath(folder)
    for sub in ("state", "spool"):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
    host = socket.gethostname().split(".")[0]
    conf = os.path.join(folder, "slurm.conf")
    with open(conf, "w") as f:
        f.write(_config(folder, host, os.cpu_count() or 1))
    env = dict(os.environ, SLURM_CONF=conf)
    started_munge = None
    if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode:
        os.makedirs("/run/munge", exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["runuser", "-u", "munge", "--", "munged"], check=True)
        started_munge = True
    try:
        subprocess.run(["slurmctld", "-f", conf], env=env, check=True)
        subprocess.run(["slurmd", "-f", conf], env=env, check=True)

        def idle():
            out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True,
                                 text=True)
            return out.returncode == 0 and out.stdout.strip() == "idle"
        _wait(idle, "the node to come up idle (see slurmctld.log, slurmd.log in " + folder + ")")
        yield env
    finally:
        subprocess.run(["scontrol", "shutdown"], env=env, capture_output=True)
        for name in ("slurmctld", "slurmd"):
            pid_file = os.path.join(folder, f"{name}.pid")
            with contextlib.suppress(OSError, ValueError):
                pid = int(open(pid_file).read())
                _wait(lambda: not os.path.exists(f"/proc/{pid}"), f"{name} to stop", 30)
        if started_munge:
            subprocess.run(["pkill", "-x", "munged"], capture_output=True)
