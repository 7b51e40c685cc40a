"""Every option of a run, read from the parsed gin config: the one module that reads gin.

`Settings.read()` makes every option object of a run (each a gin-configurable dataclass,
checked as it is made) and decides the run's GAN family once (`ModelOptions`: `family.name`,
or the data's kind's default; paragan_tf/families/registry.py), with the family's own
options and what gin binds of every family's configurables. Modules below train/ receive
these objects, never gin.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, Mapping, Optional, Tuple

import gin

from paragan_tf import families
from paragan_tf.data import config as data_config
from paragan_tf.data import datasets
from paragan_tf.data import tuning
from paragan_tf.distribute import cluster
from paragan_tf.distribute import model_parallel as parallel_lib
from paragan_tf.distribute import strategy as strategy_lib
from paragan_tf.eval.config import EvalConfig
from paragan_tf.layout import rules as layout_lib
from paragan_tf.objective import augment as augment_lib
from paragan_tf.objective import penalties as penalties_lib
from paragan_tf.train import config as config_lib
from paragan_tf.train import optimizers


@dataclasses.dataclass(frozen=True)
class ModelOptions:
    """The run's GAN family and what the rest of a run reads of its networks before they
    exist (the family's refusals, the layout cache's key).

    Attributes:
      family: the registered family the run trains (families/registry.py).
      options: that family's own options (its `Options`, made from gin), or None.
      bound: what gin binds of every registered family's configurables, by configurable
        (references as '@name'): a family refuses the others' bindings by name.
      init: both networks' initialiser, overriding the constructors' (None: theirs): a
        plan builds with 'N02', whose values do not matter to it, where orthogonal
        initialisation (a QR decomposition per weight) was 40 of the 50 s that building
        BigGAN-128 took.
    """

    family: str
    options: Any = None
    bound: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    init: Optional[str] = None

    @classmethod
    def read(cls, data: data_config.DatasetConfig) -> "ModelOptions":
        kind = datasets.kind_of(data.name, data.data_dir)
        name = families.resolve(families.FamilyConfig().name, kind, data.name)
        family_class = families.family_class(name)
        return cls(family=name, bound=_bound(),
                   options=family_class.Options() if family_class.Options else None)


def _bound() -> Dict[str, Dict[str, Any]]:
    """Every registered family's configurables' bindings, as JSON has them (so a cache key
    made of them reads back equal)."""
    bound = {}
    for names in families.configurables().values():
        for name in names:
            found = gin.get_bindings(name, resolve_references=False)
            if found:
                bound[name] = json.loads(json.dumps(found, sort_keys=True, default=str))
    return bound


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every option object of a run, read from the parsed gin config by `read()`."""

    train: config_lib.TrainConfig
    data: data_config.DatasetConfig
    inputs: tuning.InputConfig
    eval: EvalConfig
    async_train: config_lib.AsyncConfig
    strategy: strategy_lib.StrategyConfig
    cluster: cluster.ClusterConfig
    augment: augment_lib.AugmentConfig
    penalties: penalties_lib.Penalties
    model_parallel: parallel_lib.ModelParallelConfig
    layout: layout_lib.LayoutConfig
    g_optimizer: optimizers.OptimizerConfig  # G/optimizer.*
    d_optimizer: optimizers.OptimizerConfig  # D/optimizer.*
    model: ModelOptions
    # The parsed config as gin text: what a layout probe child parses (measure/timing.py).
    parsed: str = ""

    @staticmethod
    def read_cluster() -> Tuple[strategy_lib.StrategyConfig, cluster.ClusterConfig, bool]:
        """The strategy and cluster options and layout.graph_optimizer alone: all a
        parameter-server task needs before it serves (it is started with whatever flags,
        maybe no experiment)."""
        return (strategy_lib.StrategyConfig(), cluster.ClusterConfig(),
                layout_lib.LayoutConfig().graph_optimizer)

    @classmethod
    def read(cls) -> "Settings":
        """The options the current gin config binds (ConfigError names a bad one)."""
        data = data_config.DatasetConfig()
        return cls(train=config_lib.TrainConfig(), data=data,
                   inputs=tuning.InputConfig(), eval=EvalConfig(),
                   async_train=config_lib.AsyncConfig(),
                   strategy=strategy_lib.StrategyConfig(), cluster=cluster.ClusterConfig(),
                   augment=augment_lib.AugmentConfig(), penalties=penalties_lib.Penalties(),
                   model_parallel=parallel_lib.ModelParallelConfig(),
                   layout=layout_lib.LayoutConfig(), g_optimizer=_optimizer("G"),
                   d_optimizer=_optimizer("D"), model=ModelOptions.read(data),
                   parsed=gin.config_str())

    @staticmethod
    def configured_precision() -> str:
        """layout.precision as the parsed gin config sets it ('auto' when it does not)."""
        return layout_lib.LayoutConfig().precision


def operative_config() -> str:
    """gin's operative config once a run is built: what operative_config.gin records."""
    return gin.operative_config_str()


def _optimizer(network: str) -> optimizers.OptimizerConfig:
    """One network's optimizer settings, read in its gin scope."""
    with gin.config_scope(network):
        return optimizers.OptimizerConfig(network=network)
