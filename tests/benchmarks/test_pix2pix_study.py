"""The pix2pix study suite (benchmarks/pix2pix_study.py) on the tiny pix2pix run."""

from __future__ import annotations

import pytest

from paragan_tf.errors import ConfigError


def test_the_pix2pix_study_times_an_epoch_and_reads_memory_losses_and_validation(tmp_path):
    from benchmarks import pix2pix_study
    # Two one-process arms: the baseline and accumulation (4 micro-batches an update, so
    # a quarter of the baseline's steps for the same epoch).
    result = pix2pix_study.pix2pix_study(
        progress=lambda m: None, epochs=1, arms=["baseline", "accumulation"],
        work_dir=str(tmp_path), config="gin/tiny_pix2pix.gin", epoch_pairs=64, batch=8,
        eval_pairs=8)
    baseline, accumulation = result["arms"]["baseline"], result["arms"]["accumulation"]
    assert (baseline["steps"], accumulation["steps"]) == (8, 2)
    for row in (baseline, accumulation):
        assert row["seconds_per_epoch"] > 0 and row["peak_rss_gib"] > 0.2  # TensorFlow's
        assert set(row["final_losses"]) == {"loss/D", "loss/G"}
        assert row["validation"]["l1_identity"] > 0.05
    with pytest.raises(ConfigError, match="unknown pix2pix_study arms"):
        pix2pix_study.pix2pix_study(arms=["zero3"])


def test_every_pix2pix_table_in_the_docs_is_its_committed_results_table():
    """Each `python benchmarks/probes/pix2pix_table.py PATH` in docs/benchmarks.md is
    followed by the table it prints from that committed JSON."""
    import json
    import os
    import re
    from benchmarks.probes import pix2pix_table
    from tests.helpers.repo import REPO
    with open(os.path.join(REPO, "docs", "benchmarks.md")) as f:
        docs = f.read()
    found = re.findall(r"^python benchmarks/probes/pix2pix_table\.py (\S+)\n\n((?:\|.*\n)+)",
                       docs, re.M)
    assert found, "docs/benchmarks.md shows no pix2pix table with its command"
    for path, shown in found:
        with open(os.path.join(REPO, path)) as f:
            assert shown.strip() == pix2pix_table.table(json.load(f)), path
