"""Runs one test file under pytest: the `main` of every py_test in BUILD.

Bazel starts it from the runfiles tree with the test file as argument; the
slow tests are left to `make test`.
"""

import os
import sys

import pytest

if __name__ == "__main__":
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(pytest.main([sys.argv[1], "-q", "-m", "not slow", "-p", "no:cacheprovider"] +
                         sys.argv[2:]))
