"""The package layout of docs/architecture.md, held against the code: the folders of
paragan_tf/ are floors (tests/helpers/floors.py), imports run only downward and no two
folders import each other, the product never imports the benchmarks or the binaries,
modules stay short."""

from __future__ import annotations

import ast
import glob
import os
import re

from tests.helpers import floors
from tests.helpers.repo import REPO

MAX_LINES = 400


def _modules():
    for path in sorted(glob.glob(os.path.join(REPO, "paragan_tf", "**", "*.py"),
                               recursive=True)):
        rel = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
        yield rel[:-len(".__init__")] if rel.endswith(".__init__") else rel, path


def test_folders_are_floors():
    """No arrow runs back up and no two folders import each other."""
    found = floors.arrows()
    assert len(found) > 30
    assert floors.back_up(found) == []
    assert floors.pairs(found) == []


def test_an_arrow_back_up_and_a_pair_are_found(tmp_path):
    """The negative control: a copy of the package where data/ imports train/ and
    layout/ imports measure/ (which imports layout/) shows both."""
    for rel in ("paragan_tf/data/bad.py", "paragan_tf/layout/bad.py",
                "paragan_tf/measure/ok.py", "paragan_tf/train/ok.py"):
        os.makedirs(tmp_path / os.path.dirname(rel), exist_ok=True)
    (tmp_path / "paragan_tf/data/bad.py").write_text("from paragan_tf.train import step\n")
    (tmp_path / "paragan_tf/layout/bad.py").write_text("from paragan_tf import measure\n")
    (tmp_path / "paragan_tf/measure/ok.py").write_text("from paragan_tf.layout import rules\n")
    (tmp_path / "paragan_tf/train/ok.py").write_text("import paragan_tf.data.bad\n")
    found = floors.arrows(str(tmp_path))
    assert [line.split(":")[0] for line in floors.back_up(found)] == [
        "data/ (floor 2) imports train/ (floor 6)", "layout/ (floor 2) imports measure/ (floor 7)"]
    assert floors.pairs(found) == [("data/", "train/"), ("layout/", "measure/")]


def test_the_picture_is_drawn_from_the_floors():
    """docs/architecture.md's picture is the table's (`python -m tests.helpers.floors
    --draw` prints it)."""
    with open(os.path.join(REPO, "docs", "architecture.md")) as f:
        assert floors.picture() in f.read()


def _imports(path: str):
    tree = ast.parse(open(path).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


def foreign_imports(modules) -> list:
    return [f"{module} imports {imported}" for module, path in modules
            for imported in _imports(path)
            if imported.split(".")[0] in ("benchmarks", "bin", "common")]


def test_the_product_imports_no_benchmark_or_binary(tmp_path):
    assert foreign_imports(_modules()) == []
    bad = tmp_path / "bad.py"  # the negative control
    bad.write_text("import benchmarks.input\nfrom bin import common\n")
    assert foreign_imports([("paragan_tf.data.bad", str(bad))]) == [
        "paragan_tf.data.bad imports benchmarks.input", "paragan_tf.data.bad imports bin"]


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
