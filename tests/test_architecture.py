"""The package layout of docs/architecture.md, held against the code: imports run only
downward, the product never imports the benchmarks or the binaries, modules stay short."""

from __future__ import annotations

import ast
import glob
import os
import re

from tests.helpers.repo import REPO

# Lowest first; a module may import from its own layer and the ones before it.
LAYERS = [
    {"paragan_tf", "paragan_tf.config", "paragan_tf.errors", "paragan_tf.files",
     "paragan_tf.precision",
     "paragan_tf.layout", "paragan_tf.layout.rules", "paragan_tf.layout.choice",
     "paragan_tf.layout.cache",
     "paragan_tf.layout.env",
     "paragan_tf.tfgan_compat", "paragan_tf.teardown"},
    {"paragan_tf.scale", "paragan_tf.distribute", "paragan_tf.data"},
    {"paragan_tf.models"},
    {"paragan_tf.objective"},
    {"paragan_tf.generate"},
    {"paragan_tf.eval"},
    {"paragan_tf.families"},
    # The layout package's tuner builds and times the training step itself; the scale
    # package's `built` builds experiments to plan them.
    {"paragan_tf.train", "paragan_tf.layout.candidates", "paragan_tf.layout.timing",
     "paragan_tf.layout.tuning", "paragan_tf.layout.probe", "paragan_tf.scale.built"},
]
MAX_LINES = 400


def _layer(module: str) -> int:
    """The layer of a module: that of its package (or its own, at the top level)."""
    for name in (module, module.rsplit(".", 1)[0], ".".join(module.split(".")[:2])):
        for index, layer in enumerate(LAYERS):
            if name in layer:
                return index
    raise AssertionError(f"{module} is in no layer of LAYERS: add its package")


def _modules():
    for path in sorted(glob.glob(os.path.join(REPO, "paragan_tf", "**", "*.py"),
                               recursive=True)):
        rel = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
        yield rel[:-len(".__init__")] if rel.endswith(".__init__") else rel, path


def _imports(path: str):
    tree = ast.parse(open(path).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def upward_imports(modules) -> list:
    found = []
    for module, path in modules:
        for imported in _imports(path):
            if imported.split(".")[0] in ("benchmarks", "bin", "common"):
                found.append(f"{module} imports {imported}")
            elif imported.startswith("paragan_tf") and _is_module(imported) and \
                    _layer(imported) > _layer(module):
                found.append(f"{module} imports {imported} from above")
    return found


def _is_module(name: str) -> bool:
    base = os.path.join(REPO, *name.split("."))
    return os.path.exists(base + ".py") or os.path.isdir(base)


def test_imports_run_downward_only():
    modules = list(_modules())
    assert len(modules) > 60
    assert upward_imports(modules) == []


def test_an_upward_import_is_found(tmp_path):
    """The negative control: a data module importing the trainer is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("from paragan_tf.train import sync_trainer\nimport benchmarks.input\n")
    assert upward_imports([("paragan_tf.data.bad", str(bad))]) == [
        "paragan_tf.data.bad imports paragan_tf.train from above",
        "paragan_tf.data.bad imports paragan_tf.train.sync_trainer from above",
        "paragan_tf.data.bad imports benchmarks.input"]


def test_every_module_is_short():
    long = {module: n for module, path in _modules()
            if (n := len(open(path).read().splitlines())) > MAX_LINES}
    assert long == {}


# Reading gin's bindings: train/settings.py alone does (paragan_tf/config.py parses).
GIN_READS = re.compile(r"\bgin\.(query_parameter|get_bindings|config_str|operative_config_str|"
                       r"config_scope)\b")
# Asking which GAN family a run trains: a family's name as a string, or the data's pairing.
FAMILY_DECISIONS = re.compile(r"""["'](biggan|pix2pix)["']|\.paired\b""")


def _python_files(*folders: str):
    for folder in folders:
        for path in sorted(glob.glob(os.path.join(REPO, folder, "**", "*.py"), recursive=True)):
            yield os.path.relpath(path, REPO), open(path).read()


def offending(files, pattern, allowed) -> list:
    """'path:line: text' of every line of `files` ((path, text)) matching `pattern`, but in
    the `allowed` paths or folders."""
    return [f"{path}:{n}: {line.strip()}" for path, text in files
            if not path.startswith(tuple(allowed))
            for n, line in enumerate(text.splitlines(), 1) if pattern.search(line)]


def test_gin_is_read_in_the_settings_module_alone():
    assert offending(_python_files("paragan_tf", "bin"), GIN_READS,
                     ["paragan_tf/train/settings.py"]) == []


def test_no_module_outside_the_families_asks_which_family_a_run_trains():
    """Data know whether they are pairs (data/); the families decide what that means."""
    assert offending(_python_files("paragan_tf", "bin"), FAMILY_DECISIONS,
                     ["paragan_tf/families/", "paragan_tf/data/", "bin/prepare_dataset.py"]
                     ) == []


def test_a_gin_read_and_a_family_decision_are_found():
    """The negative controls of the two tests above."""
    files = [("paragan_tf/layout/bad.py", "x = gin.query_parameter('Generator.ch')\n"
              "if family.name == 'pix2pix':\n    pass\nif source.paired:\n    pass\n")]
    assert len(offending(files, GIN_READS, ["paragan_tf/train/settings.py"])) == 1
    assert len(offending(files, FAMILY_DECISIONS, ["paragan_tf/families/"])) == 2
