"""The one table of what may be combined (train/combinations.py): each row refuses its setting
by name under its strategy and nothing else, and docs/configuration.md shows the table."""

from __future__ import annotations

import dataclasses
import os

import pytest

from paragan_tf.errors import ConfigError
from paragan_tf.train import combinations
from paragan_tf.train import experiment
from tests.helpers.repo import REPO


def _settings(**changes):
    """Default settings with `changes` ({option object: {field: value}}) applied."""
    experiment.parse([], ["train.total_steps = 1", "optimizer.learning_rate = 1e-4"],
                     finalize=False)
    settings = experiment.Settings.read()
    return dataclasses.replace(settings, **{
        name: dataclasses.replace(getattr(settings, name), **fields)
        for name, fields in changes.items()})


# One run breaking each row, and the kind it is refused under.
BREAKS = {
    "train.max_minutes": dict(train=dict(max_minutes=1.0)),
    "train.recompute": dict(train=dict(recompute=True)),
    "train.accumulation": dict(train=dict(accumulation=2),
                               async_train=dict(mode="sample_buffer")),
    "input_pipeline.service_workers": dict(inputs=dict(service_workers=1)),
    "eval.every_steps": dict(eval=dict(every_steps=5)),
    "train.profile_steps": dict(train=dict(profile_steps=2)),
    "train.simultaneous": dict(train=dict(simultaneous=True)),
    "penalties.lecam_weight": dict(penalties=dict(lecam_weight=0.1)),
    "augment.ada_target": dict(augment=dict(ada_target=0.6)),
}


@pytest.mark.parametrize("rule", combinations.RULES, ids=lambda r: r.setting)
def test_each_rule_refuses_its_setting_by_name_under_its_strategy_only(rule):
    settings = _settings(**BREAKS[rule.setting])
    with pytest.raises(ConfigError, match=f"^{rule.setting}=.* is not available "
                                          f".*{rule.kind if not rule.condition else ''}"):
        combinations.refuse(settings, rule.kind)
    for kind in ("one_device", "mirrored", "multi_worker_mirrored", "parameter_server"):
        if kind != rule.kind:
            combinations.refuse(settings, kind)  # refused under its kind only
    combinations.refuse(_settings(), rule.kind)  # the defaults break no row


def test_every_rule_has_a_breaking_run_and_the_docs_show_the_table():
    assert {r.setting for r in combinations.RULES} == set(BREAKS)
    with open(os.path.join(REPO, "docs", "configuration.md")) as f:
        assert combinations.table() in f.read(), \
            "docs/configuration.md: paste `python -m paragan_tf.train.combinations`"
