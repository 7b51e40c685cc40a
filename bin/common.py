"""Flags and error handling shared by the absl binaries (library code reads no FLAGS)."""

from __future__ import annotations

import os
import sys
from typing import Callable, Dict, NoReturn, Optional

import quiet_startup

quiet_startup.install()  # before anything imports TensorFlow

from absl import flags  # noqa: E402  pylint: disable=wrong-import-position
from absl import logging  # noqa: E402  pylint: disable=wrong-import-position

import paragan_tf  # noqa: F401  (pins tf-keras before TensorFlow loads)
from paragan_tf.errors import ConfigError
from paragan_tf.train import model_dir as model_dir_lib
from paragan_tf import teardown

FLAGS = flags.FLAGS
# Last before the process ends: our stderr filter writes out the last lines.
teardown.before_exit(quiet_startup.drain)


def define_gin_flags() -> None:
    flags.DEFINE_string("model_dir", None, "Folder for checkpoints, summaries and samples.")
    flags.DEFINE_multi_string("gin_file", [], "Gin config file(s), applied in order.")
    flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings, e.g. train.total_steps=100.")


def model_dir(purpose: str = "a folder bin/train.py wrote") -> str:
    """--model_dir as every process of the run spells it (model_dir.resolve); required."""
    if not FLAGS.model_dir:
        fail(f"--model_dir is required ({purpose})")
    return model_dir_lib.resolve(FLAGS.model_dir)


def parse_gin(finalize: bool = True) -> None:
    from paragan_tf.train import experiment  # pylint: disable=import-outside-toplevel
    experiment.parse(FLAGS.gin_file, FLAGS.gin_bindings, finalize=finalize)


def restore_run(run_dir: str, checkpoint: Optional[str] = None):
    """experiment.restore of `run_dir` (at `checkpoint`, or its newest) with this binary's
    --gin_file and --gin_bindings: (Experiment, checkpoint path)."""
    from paragan_tf.train import experiment  # pylint: disable=import-outside-toplevel
    return experiment.restore(run_dir, checkpoint, FLAGS.gin_file, FLAGS.gin_bindings)


def restart_with(environment: Dict[str, str]) -> None:
    """Runs this binary again, from the start, with `environment` added (once).

    For settings TensorFlow reads only as it loads (oneDNN, its thread pools): the
    layout is chosen after TensorFlow is imported. The variables it sets are marked
    as ours, so the new process does not take them for the user's pins.
    """
    from paragan_tf.layout import env as layout_env  # pylint: disable=import-outside-toplevel
    if not environment:
        return
    if layout_env.restarted():
        logging.warning("the layout wants %s but this process was restarted for it once "
                        "already; going on as it is", environment)
        return
    logging.info("restarting with %s: TensorFlow reads them only as it loads",
                 " ".join(f"{k}={v}" for k, v in sorted(environment.items())))
    env = layout_env.for_restart(environment)
    logging.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def fail(message: str, code: int = 2) -> NoReturn:
    """Prints a one-line error and exits non-zero."""
    sys.stderr.flush()
    print(f"{sys.argv[0].rsplit('/', 1)[-1]}: error: {message}", file=sys.stderr, flush=True)
    teardown.exit_now(code)


def absl_main(body: Callable[[], int]) -> Callable[[list], int]:
    """An absl `main(argv)` running `body`, with configuration errors as one stderr line.

    A ConfigError (any wrong setting) becomes `<binary>: error: <message>` and exit code 2.
    """
    def main(argv):
        if len(argv) > 1:
            fail(f"unexpected arguments {argv[1:]}; settings go in --gin_bindings")
        logging.set_verbosity(logging.INFO)
        try:
            return body()
        except ConfigError as e:
            fail(str(e).strip().splitlines()[0])
        return 2
    return main
