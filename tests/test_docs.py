"""The documents tell the truth about the repository: every path they name exists, every
command they show uses flags its binary defines, gin bindings that parse against the real
configurables and gin files and make targets that exist; code cites only documents that
are in the repository. (tests/e2e/test_readme.py runs the README's quick start itself.)"""

from __future__ import annotations

import glob
import os
import re
import shlex

import pytest

from paragan_tf.train import experiment
from tests.helpers.repo import REPO

DOCS = ["README.md", "tests/README.md"] + sorted(os.path.relpath(p, REPO) for p in glob.glob(
    os.path.join(REPO, "docs", "**", "*.md"), recursive=True))
# Top-level folders and files of the repository: a backticked word starting with one of
# these is a path that must exist.
TOP = ("paragan_tf/", "bin/", "gin/", "tests/", "docs/", "benchmarks/", "tools/", "bazel/",
       "third_party/", ".ci/")
TOP_FILES = {"requirements.txt", "requirements-weights.txt", "Makefile", "BUILD", "WORKSPACE",
             "pyproject.toml", "README.md"}
PLACEHOLDER = re.compile(r"[<>*{}]|\.\.\.|NAME|/x[._]|/x$")
ABSL_FLAGS = {"help", "helpfull", "helpshort", "logtostderr", "alsologtostderr", "v",
              "verbosity", "log_dir"}


def _read(doc: str) -> str:
    with open(os.path.join(REPO, doc)) as f:
        return f.read()


def _backticked_paths(text: str) -> set:
    paths = set()
    for quoted in re.findall(r"`([^`\n]+)`", text):
        word = quoted.split()[0].split("::")[0]
        if (word.startswith(TOP) or word in TOP_FILES) and not PLACEHOLDER.search(word):
            paths.add(word.rstrip(".,:;"))
    return paths


def _commands(text: str) -> list:
    """The commands of every ```bash block, continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        pending = ""
        for line in block.replace("\\\n", " ").splitlines():
            pending = f"{pending}\n{line}" if pending else line
            try:
                words = shlex.split(pending, comments=True)
            except ValueError:  # a quote continues on the next line
                continue
            pending = ""
            if words:
                commands.append(words)
    return commands


def _flags(binary: str) -> set:
    """The flags `bin/<binary>` defines, with those of bin/common.py and absl's own."""
    names = set(ABSL_FLAGS)
    for path in (binary, "bin/common.py"):
        names |= set(re.findall(r"DEFINE_\w+\(\s*[\"'](\w+)[\"']", _read(path)))
    return names


def _invocations():
    for doc in DOCS:
        for words in _commands(_read(doc)):
            for i, word in enumerate(words):
                if re.fullmatch(r"bin/\w+\.py", word):
                    yield doc, word, words[i + 1:]
                    break


def test_every_document_is_found():
    assert {"README.md", "docs/data.md", "docs/evaluation.md", "docs/distributed.md",
            "docs/benchmarks.md", "docs/design.md", "docs/reliability.md",
            "docs/architecture.md", "docs/configuration.md", "docs/scale.md",
            "docs/upstream/tf_data_teardown.md"} <= set(DOCS)
    assert len(_read("README.md").splitlines()) <= 200


@pytest.mark.parametrize("doc", DOCS)
def test_every_path_and_link_exists(doc):
    text = _read(doc)
    missing = [p for p in sorted(_backticked_paths(text))
               if not os.path.exists(os.path.join(REPO, p))]
    for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", text):
        if not target.startswith(("http://", "https://")) and not os.path.exists(
                os.path.join(REPO, os.path.dirname(doc), target)):
            missing.append(target)
    for path, test in re.findall(r"`(tests/[\w/]+\.py)::(\w+)", text):
        if os.path.exists(os.path.join(REPO, path)) and f"def {test}(" not in _read(path):
            missing.append(f"{path}::{test}")
    assert not missing, f"{doc} names what does not exist: {missing}"


def test_every_command_uses_defined_flags_existing_files_and_make_targets():
    problems, seen = [], 0
    targets = set(re.findall(r"^([\w-]+):", _read("Makefile"), re.M))
    for doc in DOCS:
        for words in _commands(_read(doc)):
            if words[0] == "make" and len(words) > 1 and words[1] not in targets:
                problems.append(f"{doc}: make {words[1]}")
    for doc, binary, args in _invocations():
        seen += 1
        if not os.path.exists(os.path.join(REPO, binary)):
            problems.append(f"{doc}: {binary} does not exist")
            continue
        defined = _flags(binary)
        for arg in args:
            if not arg.startswith("--"):
                continue
            name, _, value = arg[2:].partition("=")
            if name not in defined and not (name.startswith("no") and name[2:] in defined):
                problems.append(f"{doc}: {binary} has no --{name}")
            if name in ("gin_file", "sweep") and value and not PLACEHOLDER.search(value) \
                    and not os.path.exists(os.path.join(REPO, value)):
                problems.append(f"{doc}: {binary} --{name}={value} does not exist")
    assert seen >= 20, f"only {seen} commands found: the block parsing broke"
    assert not problems, problems


def test_every_gin_binding_in_a_command_parses():
    """Each command's bindings on its own gin files (gin/tiny.gin when it names none), as
    the binary would parse them; a binding of an unknown setting is a ConfigError."""
    checked = 0
    for doc, binary, args in _invocations():
        values = [a.partition("=") for a in args if a.startswith("--gin_")]
        files = [v for k, _, v in values if k == "--gin_file" and not PLACEHOLDER.search(v)]
        bindings = [v for k, _, v in values if k == "--gin_bindings"]
        if not bindings or binary in ("bin/sweep.py",):
            continue
        experiment.parse(files or ["gin/tiny.gin"], bindings, finalize=False)
        checked += 1
    assert checked >= 8, checked


def test_code_cites_only_documents_in_the_repository():
    cited = {}
    for path in glob.glob(os.path.join(REPO, "**", "*"), recursive=True):
        rel = os.path.relpath(path, REPO)
        if (not rel.endswith((".py", ".gin", ".sbatch", ".sh")) or rel.startswith(
                (".venv", "runs", "tmp", "work", "bazel-"))):
            continue
        with open(path, errors="replace") as f:
            # Documents are named in capitals or under docs/ (summary.md is a sweep's output).
            for name in re.findall(r"\b(docs/[\w/-]+\.md|[A-Z][A-Z_]*\.md)\b", f.read()):
                if not any(os.path.exists(os.path.join(REPO, d, name)) for d in ("", "docs")):
                    cited.setdefault(name, []).append(rel)
    assert not cited, cited


# A repository path named in a gin comment: tests/, docs/, benchmarks/, bin/ (and gin/,
# paragan_tf/), up to its last word character; `*` is a glob (recipe_mnist5k*.gin).
GIN_COMMENT_PATH = re.compile(
    r"(?<![\w/.-])(?:tests|docs|benchmarks|bin|gin|paragan_tf)/[\w./*-]*[\w*/]")


def gin_comment_paths(text: str) -> set:
    """The repository paths named in the comments of a gin file's text; a path broken
    after a `/` at the end of a comment line continues on the next comment line."""
    comments = "\n".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line)
    return set(GIN_COMMENT_PATH.findall(re.sub(r"/\n\s*", "/", comments)))


def missing_gin_comment_paths(texts: dict) -> list:
    """`file: path` for every path a gin comment names that is not in the repository."""
    missing = []
    for name, text in sorted(texts.items()):
        for path in sorted(gin_comment_paths(text)):
            found = (glob.glob(os.path.join(REPO, path)) if "*" in path
                     else os.path.exists(os.path.join(REPO, path)))
            if not found:
                missing.append(f"{name}: {path}")
    return missing


def test_every_path_a_gin_comment_names_exists():
    """Gin files cite the tests, documents, benchmarks and binaries behind their numbers;
    a file that moved (tests/ into tests/e2e/ or tests/<package>/) must take them along."""
    texts = {os.path.relpath(p, REPO): open(p).read() for p in glob.glob(
        os.path.join(REPO, "gin", "**", "*.gin"), recursive=True)}
    assert len(texts) >= 20
    assert sum(len(gin_comment_paths(t)) for t in texts.values()) >= 30, "parsing broke"
    assert missing_gin_comment_paths(texts) == []


def test_a_gin_comment_naming_a_missing_file_is_reported():
    """The negative control: a moved test, a path broken over two comment lines and a glob
    that matches nothing are reported; existing paths and code outside comments are not."""
    text = ("# Tested by tests/test_binaries.py and tests/test_docs.py (bin/train.py).\n"
            "# See docs/\n#   no_such_notes.txt and gin/sweeps/no_such_sweep*.gin; docs/scale.md.\n"
            "include 'tests/not_a_comment.py'\n")
    assert missing_gin_comment_paths({"gin/fake.gin": text}) == [
        "gin/fake.gin: docs/no_such_notes.txt", "gin/fake.gin: gin/sweeps/no_such_sweep*.gin",
        "gin/fake.gin: tests/test_binaries.py"]


def test_the_calibration_section_names_every_measured_constant():
    """docs/benchmarks.md's calibration section lists each entry of the calibration table
    (paragan_tf/scale/calibration.py) by name, so a new constant is documented with it."""
    from paragan_tf.scale import calibration  # pylint: disable=import-outside-toplevel
    section = _read("docs/benchmarks.md").partition("\n## Calibration")[2].partition("\n## ")[0]
    assert section, "docs/benchmarks.md has no '## Calibration' section"
    missing = [name for name in calibration.TABLE if f"`{name}`" not in section]
    assert not missing, f"docs/benchmarks.md's calibration section omits {missing}"
