"""The repository as the tests see it: its root, the python that runs them, its binaries.

REPO and PYTHON; `scratch_checkout` (a folder that looks like the repository to a user at
its root), `relative` (a path as a user types it there) and `run_binary` (bin/<script> in a
fresh process, up to a fixed timeout; tests/helpers/clusters.py's waits while it prints).
"""

from __future__ import annotations

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = sys.executable

# What a user's checkout holds for the binaries and `make train`; a scratch checkout links
# these, so commands typed with relative folders (runs/default) write under it, not here.
CHECKOUT = ("Makefile", "bin", "docs", "gin", "paragan_tf", "requirements.txt",
            "requirements-weights.txt", "pyproject.toml", ".venv")


def scratch_checkout(path) -> str:
    """A folder that looks like the repository to a user at its root (links to ours)."""
    os.makedirs(path, exist_ok=True)
    for name in CHECKOUT:
        os.symlink(os.path.join(REPO, name), os.path.join(path, name))
    return str(path)


def relative(path) -> str:
    """`path` as a user types it in the repository root, where the binaries run: relative
    (../../tmp/... for a test's folder). Users type relative folders; tests that pass
    absolute ones missed a double join of checkpoint paths (docs/reliability.md)."""
    return os.path.relpath(str(path), REPO)


def run_binary(script: str, *args: str, timeout: float = 300, env=None) -> subprocess.CompletedProcess:
    """Runs bin/<script> in a fresh process from the repository root."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run([PYTHON, os.path.join(REPO, "bin", script), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, env=full_env)
