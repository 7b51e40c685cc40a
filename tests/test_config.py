"""Gin parsing (paragan_tf/config.py): every gin file parses against the real configurables and
opens with its header comment; an unknown binding or a malformed file is named."""

from __future__ import annotations

import glob
import os
import re

import pytest

from paragan_tf.errors import ConfigError
from paragan_tf.train import experiment
from tests.helpers.repo import REPO

# Sweep files bind `sweep.*` only: tests/train/test_sweep.py checks them.
GIN_FILES = sorted(os.path.relpath(p, REPO)
                   for p in glob.glob(os.path.join(REPO, "gin", "**", "*.gin"), recursive=True)
                   if not p.startswith(os.path.join(REPO, "gin", "sweeps", "")))


def test_there_are_gin_files():
    assert {"gin/tiny.gin", "gin/mnist_default.gin", "gin/biggan_cifar10.gin"} <= set(GIN_FILES)


@pytest.mark.parametrize("path", GIN_FILES)
def test_gin_file_parses_and_builds(path):
    with open(os.path.join(REPO, path)) as f:
        first = f.readline()
    assert first.startswith("# Reproduces:"), f"{path} must open with what it reproduces"
    # Small widths so building every experiment stays cheap, and one device: multi-process
    # strategies need a cluster (tests/e2e/test_scale_out.py); every binding is still checked.
    # Layouts and policies are fragments: they go on top of an experiment.
    files = (["gin/tiny.gin", path] if path.startswith(("gin/layouts/", "gin/policies/"))
             else [path])
    # D ch 8: self-attention needs 8 channels (the paper configs attend at 64 px). Each family
    # takes only its own networks' bindings (families/contract.py), and a pix2pix file names them.
    with open(os.path.join(REPO, path)) as f:
        pix2pix = "Pix2PixGenerator." in f.read()
    widths = (["Pix2PixGenerator.ch = 4", "PatchDiscriminator.ch = 4"] if pix2pix
              else ["Generator.ch = 4", "Discriminator.ch = 8"])
    experiment.parse(files, widths + ["strategy.kind = 'one_device'"], finalize=False)
    exp = experiment.build(check_data=False)
    assert exp.generator.resolution == exp.settings.data.resolution


def test_unknown_binding_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="no_such_option"):
        experiment.parse(["gin/tiny.gin"], ["train.no_such_option = 3"])
    with pytest.raises(ConfigError, match="--gin_file=gin/missing.gin does not exist"):
        experiment.parse(["gin/missing.gin"], [])


@pytest.mark.parametrize("text,where", [
    ("train.total_steps = 5\ntrain.batch_size = (\n", "EOF in multi-line statement in {} "),
    ("include 'gin/tiny.gin'\ntrain.batch_size 8\n", r"\({}, line 2: train.batch_size 8\)"),
    ("train.total_steps = 5\nGeneratr.ch = 3\n", r"'Generatr'.*{}\", line 2: Generatr.ch = 3"),
])
def test_a_malformed_gin_file_is_named_with_its_line(tmp_path, text, where):
    from paragan_tf.train import experiment  # pylint: disable=import-outside-toplevel
    path = tmp_path / "broken.gin"
    path.write_text(text)
    with pytest.raises(ConfigError, match=where.format(re.escape(str(path)))):
        experiment.parse([str(path)], [])
