"""The environment a process starts TensorFlow with for its layout (layout/rules.py).

oneDNN and the thread counts are process settings, read from environment variables
when TensorFlow starts, so they cannot be changed by the process they apply to: this
module says what TensorFlow does without the variables (`onednn_default`), which ones
the user's environment fixes (`environment_pins`, never overridden), and which ones
a process needs for its layout (`environment`); bin/train.py restarts itself with
those before it builds anything, and measure/tuning.py starts each candidate's
child process with its own. What a running process has in effect, and the rules that
choose a layout, stay in rules.py.
"""

from __future__ import annotations

import os
from typing import Dict, Optional

from paragan_tf.errors import ConfigError
from paragan_tf.layout.choice import Choice
from paragan_tf.layout.rules import Hardware, ONEDNN_ENV, SWITCHES, THREAD_ENV

# TensorFlow turns oneDNN on by default on Linux x86 CPUs with any of these (its
# util.cc, DefaultOneDnnPolicy); elsewhere it is off unless TF_ENABLE_ONEDNN_OPTS=1.
ONEDNN_DEFAULT_FLAGS = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8",
                        "amx_bf16")


def onednn_default(hardware: Hardware) -> Optional[bool]:
    """oneDNN as TensorFlow starts without TF_ENABLE_ONEDNN_OPTS (None: no switch here)."""
    if not hardware.x86_cpu:
        return None
    return any(flag in hardware.cpu_features for flag in ONEDNN_DEFAULT_FLAGS)


# The restart protocol (bin/common.py execs; the variables are set and read here only): a
# process restarted for its layout carries RESTARTED, and each variable set for it a mark,
# so that it is not taken for the user's pin.
RESTARTED = "PARAGAN_TF_RESTARTED"
SET_BY_LAYOUT = "PARAGAN_TF_LAYOUT_SET_"


def environment_pins() -> Dict[str, str]:
    """The process settings the user's environment fixes (never overridden)."""
    return {name: os.environ[name] for name in (ONEDNN_ENV,) + THREAD_ENV
            if os.environ.get(name) and not os.environ.get(SET_BY_LAYOUT + name)}


def restarted() -> bool:
    """Whether this process was restarted for its layout already (it is, at most once)."""
    return bool(os.environ.get(RESTARTED))


def for_restart(environment: Dict[str, str]) -> Dict[str, str]:
    """This process's environment with `environment` added for a restart: each variable
    marked as the layout's, and the restart recorded."""
    return dict(os.environ, **environment, **{RESTARTED: "1"},
                **{SET_BY_LAYOUT + name: "1" for name in environment})


def environment(hardware: Hardware, onednn: str = "auto",
                measured: Optional[Choice] = None,
                threads_pinned: bool = False) -> Dict[str, str]:
    """The environment variables a process needs for its layout (before TensorFlow loads).

    A pinned `layout.onednn` comes first, then the measurement's own (`Choice.environment`);
    thread counts only when strategy.intra_op_threads/inter_op_threads do not pin them (the
    strategy sets those itself); variables the user set are left alone (environment_pins).
    Empty when TensorFlow's defaults are what was chosen.
    """
    if onednn not in SWITCHES:
        raise ConfigError(f"layout.onednn={onednn!r} must be auto, on or off")
    wanted = measured.environment() if measured is not None else {}
    if threads_pinned:
        for name in THREAD_ENV:
            wanted.pop(name, None)
    if hardware.x86_cpu:
        if onednn != "auto":
            wanted[ONEDNN_ENV] = "1" if onednn == "on" else "0"
    elif onednn != "auto":
        raise ConfigError(f"layout.onednn={onednn!r}: oneDNN's switch exists on x86 CPUs "
                          f"only; this is {hardware.accelerator} ({hardware.cpu_model})")
    else:
        wanted.pop(ONEDNN_ENV, None)
    pins = environment_pins()
    return {k: v for k, v in wanted.items() if k not in pins}
