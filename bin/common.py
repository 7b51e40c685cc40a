"""Flags and error handling shared by the absl binaries (library code reads no FLAGS)."""

from __future__ import annotations

import os
import sys
from typing import Callable, Dict, List, NoReturn, Optional

import quiet_startup

quiet_startup.install()  # before anything imports TensorFlow

from absl import flags  # noqa: E402  pylint: disable=wrong-import-position
from absl import logging  # noqa: E402  pylint: disable=wrong-import-position

import paragan_tf  # noqa: F401  (pins tf-keras before TensorFlow loads)
from paragan_tf.errors import ConfigError
from paragan_tf.train import model_dir as model_dir_lib
from paragan_tf.train import teardown

FLAGS = flags.FLAGS
# Run by exit_now before the process ends (exit_now skips Python's atexit handlers).
_BEFORE_EXIT: List[Callable[[], None]] = []


def define_gin_flags() -> None:
    flags.DEFINE_string("model_dir", None, "Folder for checkpoints, summaries and samples.")
    flags.DEFINE_multi_string("gin_file", [], "Gin config file(s), applied in order.")
    flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings, e.g. train.total_steps=100.")


def model_dir(purpose: str = "a folder bin/train.py wrote") -> str:
    """--model_dir as every process of the run spells it (model_dir.resolve); required."""
    if not FLAGS.model_dir:
        fail(f"--model_dir is required ({purpose})")
    return model_dir_lib.resolve(FLAGS.model_dir)


def before_exit(fn: Callable[[], None]) -> None:
    """Runs `fn` when the binary ends through exit_now or fail (in reverse order of calls)."""
    _BEFORE_EXIT.append(fn)


def parse_gin(finalize: bool = True) -> None:
    from paragan_tf.train import experiment  # pylint: disable=import-outside-toplevel
    experiment.parse(FLAGS.gin_file, FLAGS.gin_bindings, finalize=finalize)


def restore_run(run_dir: str, checkpoint: Optional[str] = None):
    """(Experiment, checkpoint path): a finished or running training run, rebuilt from its
    operative_config.gin (then --gin_file/--gin_bindings) at `checkpoint` or its newest.

    One device unless the bindings choose another strategy: sampling, evaluation
    and export run beside the training job, not inside its cluster.
    """
    from paragan_tf.train import checkpoints  # pylint: disable=import-outside-toplevel
    from paragan_tf.train import experiment  # pylint: disable=import-outside-toplevel
    run_dir = model_dir_lib.resolve(run_dir)
    operative = os.path.join(run_dir, "operative_config.gin")
    if not os.path.exists(operative):
        fail(f"{run_dir} has no operative_config.gin; is it a bin/train.py --model_dir?")
    experiment.parse([operative] + FLAGS.gin_file,
                     ["strategy.kind = 'one_device'"] + FLAGS.gin_bindings, finalize=False)
    exp = experiment.build(check_data=False)
    from paragan_tf.data import class_list  # pylint: disable=import-outside-toplevel
    class_list.keep_or_check(run_dir, exp.source.class_names, exp.data.name, write=False)
    saver = checkpoints.Checkpointer(run_dir, max_to_keep=1000, **exp.trackables())
    path = saver.restore(checkpoint) if checkpoint else saver.restore_latest()
    if path is None:
        fail(f"{run_dir} holds no checkpoint yet")
    logging.info("%s: step %d, classes %s", path, int(exp.step.numpy()), exp.classes)
    return exp, path


def restart_with(environment: Dict[str, str]) -> None:
    """Runs this binary again, from the start, with `environment` added (once).

    For settings TensorFlow reads only as it loads (oneDNN, its thread pools): the
    layout is chosen after TensorFlow is imported. The variables it sets are marked
    as ours, so the new process does not take them for the user's pins.
    """
    if not environment:
        return
    if os.environ.get("PARAGAN_TF_RESTARTED"):
        logging.warning("the layout wants %s but this process was restarted for it once "
                        "already; going on as it is", environment)
        return
    logging.info("restarting with %s: TensorFlow reads them only as it loads",
                 " ".join(f"{k}={v}" for k, v in sorted(environment.items())))
    env = dict(os.environ, PARAGAN_TF_RESTARTED="1", **environment,
               **{f"PARAGAN_TF_LAYOUT_SET_{name}": "1" for name in environment})
    logging.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def fail(message: str, code: int = 2) -> NoReturn:
    """Prints a one-line error and exits non-zero."""
    sys.stderr.flush()
    print(f"{sys.argv[0].rsplit('/', 1)[-1]}: error: {message}", file=sys.stderr, flush=True)
    exit_now(code)


def exit_now(code: int) -> NoReturn:
    """Runs the before-exit functions, then ends without TensorFlow's destructors.

    Called once the checkpoint and summaries are written: tearing down tf.data
    iterators can block for a minute (paragan_tf/train/teardown.py says why), and a
    preempted job has a short grace period.
    """
    while _BEFORE_EXIT:
        _BEFORE_EXIT.pop()()
    logging.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    quiet_startup.drain()
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
