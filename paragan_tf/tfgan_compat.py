"""tensorflow-gan's losses and eval math, imported without its package __init__.

`import tensorflow_gan` fails on TF >= 2.16: its __init__ imports the estimator
and train modules, which use the removed tf.estimator. The losses and eval
modules themselves only need TensorFlow (and TFP), so we register empty parent
packages pointing at the installed directories and import just those modules.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types


def _stub_package(name: str, path: str) -> None:
    if name not in sys.modules:
        module = types.ModuleType(name)
        module.__path__ = [path]
        sys.modules[name] = module


def _package_root() -> str:
    stub = sys.modules.get("tensorflow_gan")
    if stub is not None and getattr(stub, "__path__", None):
        return list(stub.__path__)[0]
    spec = importlib.util.find_spec("tensorflow_gan")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("tensorflow-gan is not installed; run `make setup`")
    return list(spec.submodule_search_locations)[0]


def _load(submodule: str):
    root = _package_root()
    _stub_package("tensorflow_gan", root)
    _stub_package("tensorflow_gan.python", f"{root}/python")
    package = submodule.rsplit(".", 1)[0]
    _stub_package(f"tensorflow_gan.python.{package}", f"{root}/python/{package.replace('.', '/')}")
    return importlib.import_module(f"tensorflow_gan.python.{submodule}")


losses_impl = _load("losses.losses_impl")


def __getattr__(name: str):
    """`classifier_metrics` on first use: it imports TensorFlow Probability (~0.7 CPU s),
    which every process that trains (losses_impl) would otherwise pay before evaluating."""
    if name == "classifier_metrics":
        module = globals()[name] = _load("eval.classifier_metrics")
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
