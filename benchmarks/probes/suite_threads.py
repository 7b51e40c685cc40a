"""Does capping TensorFlow's intra-op threads speed up the test suite, where several pytest
workers share the cores? Runs the same test file in N concurrent pytest processes (as N
xdist workers would), once per setting, alternating, and prints each round's wall seconds.

    python benchmarks/probes/suite_threads.py --file=tests/train/test_sync_trainer.py \
        --workers=3 --rounds=2 --intra=0,1

--intra 0 is TensorFlow's default (one thread per core); any other value is exported as
TF_NUM_INTRAOP_THREADS to the processes (and the binaries they start).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def one_round(test_file: str, workers: int, intra: int) -> float:
    env = dict(os.environ)
    env.pop("TF_NUM_INTRAOP_THREADS", None)
    if intra:
        env["TF_NUM_INTRAOP_THREADS"] = str(intra)
    began = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               test_file], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(workers)]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise RuntimeError(f"intra={intra}: pytest exited {codes}")
    return time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", required=True)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--intra", default="0,1")
    args = parser.parse_args()
    settings = [int(x) for x in args.intra.split(",")]
    seconds = {s: [] for s in settings}
    for _ in range(args.rounds):
        for setting in settings:
            seconds[setting].append(round(one_round(args.file, args.workers, setting), 1))
            print(f"intra={setting}: {seconds[setting][-1]} s", flush=True)
    print(json.dumps(dict(file=args.file, workers=args.workers, cores=os.cpu_count(),
                          seconds={str(k): v for k, v in seconds.items()})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
