"""What a benchmark number was measured on, and what that hardware can do in theory.

`describe()` is the record every benchmark JSON carries (bin/bench.py adds it):
CPU model, cores, the ISA flags that decide speed, TensorFlow's thread
settings, load average, free memory, versions, git commit, time, command line,
accelerators, and the CPU's theoretical peak (paragan_tf/scale/cpu_peak.py:
cores x measured clock x FLOP per cycle of the detected ISA), the ceiling no
achieved FLOP/s may pass.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from typing import Optional

import tensorflow as tf

from paragan_tf.layout import rules as layout_lib
from paragan_tf.scale import cpu_peak
from paragan_tf.scale.cpu_peak import physical_cores, theoretical_peak  # noqa: F401 (re-exported)

ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def _git_commit() -> Optional[str]:
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    try:
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return git("rev-parse", "HEAD") + ("+uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def _free_memory_gib() -> Optional[float]:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2 ** 20
    except OSError:
        pass
    return None


def load_average() -> Optional[list]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def describe() -> dict:
    """The machine record of a benchmark JSON (call at the start; add load_after at the end)."""
    info = cpu_peak.cpuinfo()
    flags = layout_lib.cpu_features()
    accelerators = []
    for gpu in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(gpu)
        accelerators.append(details.get("device_name", gpu.name))
    accelerators += [d.name for d in tf.config.list_logical_devices("TPU")]
    return dict(
        cpu_model=info.get("model name", platform.processor() or platform.machine()),
        cpu_vendor=info.get("vendor_id"), cpu_family=info.get("cpu family"),
        cpu_model_number=info.get("model"), physical_cores=physical_cores(),
        logical_cpus=os.cpu_count(), isa={f: f in flags for f in ISA_FLAGS},
        tf_intra_op_threads=tf.config.threading.get_intra_op_parallelism_threads(),
        tf_inter_op_threads=tf.config.threading.get_inter_op_parallelism_threads(),
        load_before=load_average(), free_memory_gib=_free_memory_gib(),
        tensorflow=tf.__version__, python=platform.python_version(),
        git_commit=_git_commit(),
        utc=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        command=" ".join(sys.argv), accelerators=accelerators,
        peak=theoretical_peak())
