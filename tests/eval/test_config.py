"""The evaluation's options (eval/config.py): counts, batch and the PRDC neighbourhood
checked when made."""

from __future__ import annotations

import pytest

from paragan_tf.errors import ConfigError
from paragan_tf.eval import config


@pytest.mark.parametrize("options", [
    dict(every_steps=-1), dict(num_samples=0), dict(num_real=0), dict(batch_size=0)],
    ids=lambda options: next(iter(options)))
def test_negative_intervals_and_empty_counts_are_refused(options):
    with pytest.raises(ConfigError, match="eval.every_steps must be >= 0, eval.num_samples, "
                                          "eval.num_real and eval.batch_size > 0"):
        config.EvalConfig(**options)


def test_prdc_needs_more_samples_than_neighbours():
    config.EvalConfig(every_steps=0, prdc_samples=7, nearest_k=5)
    with pytest.raises(ConfigError, match=r"eval.prdc_samples=6 must exceed eval.nearest_k \+ 1 "
                                          r"\(eval.nearest_k=5 >= 1\)"):
        config.EvalConfig(prdc_samples=6, nearest_k=5)
    with pytest.raises(ConfigError, match="eval.nearest_k=0 >= 1"):
        config.EvalConfig(nearest_k=0)
