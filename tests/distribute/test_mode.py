"""distribute/mode.py and distribute/model_parallel.py: which settings choose which mode, what
each refuses by name, and that every mode's plan answers in the same fields (the modes' own
behaviour is tested in test_placement.py and test_sharded_adam.py)."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest

from paragan_tf.distribute import model_parallel
from paragan_tf.distribute import strategy as strategy_lib
from paragan_tf.distribute.mode import Mode, ModePlan
from paragan_tf.distribute.model_parallel import ModelParallelConfig, ShardedOptimizer, Spread
from paragan_tf.errors import ConfigError
from paragan_tf.scale import memory as memory_lib
from paragan_tf.scale import modes as modes_lib


def test_each_setting_chooses_one_mode_and_two_at_once_are_refused_by_name():
    assert ModelParallelConfig().mode_class is Mode
    assert ModelParallelConfig(shard_optimizer=True).mode_class is ShardedOptimizer
    assert ModelParallelConfig(placement="split").mode_class is Spread
    assert ModelParallelConfig(stages=2).mode_class is Spread
    with pytest.raises(ConfigError, match=r"model_parallel.shard_optimizer=True is not "
                                          r"available with model_parallel.stages=2"):
        ModelParallelConfig(shard_optimizer=True, stages=2)
    assert not Mode().model_parallel and not Mode().spread
    assert ShardedOptimizer().model_parallel and Spread().spread


def test_each_mode_refuses_the_strategies_it_does_not_run_under_by_name():
    for kind in strategy_lib.KINDS:
        Mode.refuse(ModelParallelConfig(), kind)  # the default runs under every strategy
    for config in (ModelParallelConfig(shard_optimizer=True),
                   ModelParallelConfig(placement="split"), ModelParallelConfig(stages=2)):
        mode_class = config.mode_class
        assert mode_class in model_parallel.MODES
        for kind in strategy_lib.KINDS:
            if kind in mode_class.strategies:
                mode_class.refuse(config, kind)
                continue
            with pytest.raises(ConfigError, match=rf"{mode_class(config).setting} is "
                                                  rf"available under .* only, not {kind!r}"):
                mode_class.refuse(config, kind)


def _memory(per_example: int) -> memory_lib.Plan:
    """A replica's plan whose G and D sides each hold half of its state and activations."""
    def plan(share):
        activations = {u: memory_lib.Activations(np.array([0]), np.array([per_example * share]))
                       for u in ("d_update", "g_update")}
        return memory_lib.Plan(parameter_bytes=200 * share, optimizer_bytes=400 * share,
                               ema_bytes=0, gradient_bytes={"d_update": 0, "g_update": 0},
                               activations=activations, activations_recompute=activations)
    return dataclasses.replace(plan(1), sides={"G": plan(0.5), "D": plan(0.5)})


MODEL = types.SimpleNamespace(effective_batch=64, d_steps=1, g_params=100, d_params=100,
                              image_bytes=12, g_blocks=[(8, 8, 4)] * 4,
                              d_blocks=[(8, 8, 4)] * 4, g_block_costs=[1.0] * 4,
                              d_block_costs=[1.0] * 4)


def test_every_planned_mode_answers_in_the_same_fields_and_the_first_that_fits_is_needed():
    plans = modes_lib.plan_modes(MODEL, _memory(10), count=8, examples=8, budget_bytes=10_000)
    assert list(plans) == ["shard", "split", "stages2", "stages4"]
    fields = {f.name for f in dataclasses.fields(ModePlan)}
    for name, plan in plans.items():
        assert set(plan.as_dict()) == fields, name
        assert plan.possible and plan.fits and not plan.recompute, (name, plan)
    # 8 devices: 8 replicas sharded, 4 split, 2 in two stages, 1 in four.
    assert [plans[n].replicas for n in plans] == [8, 4, 2, 1]
    assert plans["shard"].memory_gib_per_device.keys() == {"replica"}
    assert plans["split"].memory_gib_per_device.keys() == {"G", "D"}
    # 12 devices make no replicas of 8: the four stages are not possible, and say why.
    assert not modes_lib.plan_modes(MODEL, _memory(10), 12, 8, 10_000)["stages4"].possible
    # Data parallelism fits here, so it is the mode needed. With 800 bytes an example a
    # replica's device needs 600 + 1.4 x 800 bytes, 1,370 sharded: only the split and the
    # stages fit 1,300 (their devices hold half of it).
    assert modes_lib.mode_needed(_memory(10).fit(8, 10_000), plans)[0] == "data"
    tight = modes_lib.plan_modes(MODEL, _memory(800), 8, 8, 1_300)
    assert _memory(800).fit(8, 1_300) is None and not tight["shard"].fits
    assert modes_lib.mode_needed(None, tight)[0] == "split"
