"""The project's .venv python as Bazel's Python toolchain.

A repository rule, because py_runtime needs an absolute interpreter path and the
checkout can live anywhere: it finds <workspace>/.venv/bin/python (made by
`make setup`) and registers it, so py_binary and py_test run with our pinned
TensorFlow instead of whatever `python3` is on PATH.
"""

def _venv_python_impl(ctx):
    workspace = ctx.path(Label("//:WORKSPACE")).dirname
    python = workspace.get_child(".venv").get_child("bin").get_child("python")
    if not python.exists:
        fail("%s is missing: run `make setup` first" % python)
    ctx.file("BUILD", """
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

py_runtime(
    name = "runtime",
    interpreter_path = "{python}",
    python_version = "PY3",
)

py_runtime_pair(name = "runtime_pair", py3_runtime = ":runtime")

toolchain(
    name = "toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)
""".format(python = python))

venv_python = repository_rule(implementation = _venv_python_impl, local = True)
