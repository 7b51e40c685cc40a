"""How the suite is run, held against the tree: BUILD makes every test file a Bazel test with
what it imports (Bazel is not needed: BUILD is read as the Python it also is), and the start
order of tests/conftest.py names only files that exist."""

from __future__ import annotations

import glob
import os

import pytest

from tests import conftest
from tests.helpers.repo import REPO


def _build() -> tuple:
    """BUILD's rules by kind and its top-level names, evaluated with Bazel's glob (files
    only, sorted)."""
    rules = {}

    def rule(kind):
        def record(**attributes):
            rules.setdefault(kind, []).append(attributes)
        return record

    def bazel_glob(include, exclude=()):
        def expand(patterns):
            return {p for pattern in patterns for p in glob.glob(pattern, root_dir=REPO,
                                                                 recursive=True)
                    if os.path.isfile(os.path.join(REPO, p))}
        return sorted(expand(include) - expand(exclude))
    names = dict(glob=bazel_glob, py_library=rule("py_library"), py_binary=rule("py_binary"),
                 py_test=rule("py_test"))
    with open(os.path.join(REPO, "BUILD")) as f:
        exec(compile(f.read(), "BUILD", "exec"), names)  # pylint: disable=exec-used
    return rules, names


def _test_files() -> list:
    return sorted(os.path.relpath(p, REPO) for p in glob.glob(
        os.path.join(REPO, "tests", "**", "test_*.py"), recursive=True)
        if os.sep + "e2e" + os.sep not in p)


@pytest.mark.skipif(not os.path.exists(os.path.join(REPO, "BUILD")),
                    reason="run by Bazel: BUILD is not among its files")
def test_every_test_file_is_a_bazel_test_with_what_it_imports():
    rules, names = _build()
    tests = {t["name"]: t for t in rules["py_test"]}
    # An output is never another's folder: a binary `train` and a test `train/test_step`
    # would both need bazel-bin/train.
    outputs = [r["name"] for kind in rules.values() for r in kind]
    assert not [(a, b) for a in outputs for b in outputs if b.startswith(a + "/")]
    # A test is named by its file's path.
    assert sorted(f"{name}.py" for name in tests) == _test_files()
    helpers = {os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "tests",
                                                                         "helpers", "*.py"))}
    for name, target in tests.items():
        srcs = target["srcs"]
        assert len(srcs) == len(set(srcs)), f"{name}: a file twice in srcs (Bazel refuses it)"
        packages = {"tests/__init__.py", os.path.join(os.path.dirname(name), "__init__.py")}
        assert {f"{name}.py", "tests/conftest.py", target["main"]} | packages | helpers <= \
            set(srcs), name
        assert target["args"] == [f"$(location {name}.py)"], name
        missing = [p for p in srcs + target["data"] if not os.path.exists(os.path.join(REPO, p))]
        assert not missing, (name, missing)
    # The unit set names tests that exist, tagged so that `make bazel-test` runs them.
    assert set(names["UNIT_TESTS"]) <= set(tests), set(names["UNIT_TESTS"]) - set(tests)
    assert {n for n, target in tests.items() if target["tags"] == ["unit"]} == set(
        names["UNIT_TESTS"])


def test_the_start_order_names_only_test_files_that_exist():
    files = {os.path.relpath(p, os.path.join(REPO, "tests")) for p in glob.glob(
        os.path.join(REPO, "tests", "**", "test_*.py"), recursive=True)}
    listed = set(conftest._FILE_SECONDS)  # pylint: disable=protected-access
    assert listed <= files, listed - files
