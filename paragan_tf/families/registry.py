"""The registry of GAN families by name, and the setting that picks a run's (`family.name`).

A family registers itself when its module is imported: the built-in ones when
paragan_tf.families is, a user's own through a gin file's `import` line (gin imports the
module while it parses, before any setting is read) or any import of theirs before
paragan_tf reads the settings. docs/families.md has the recipe.

Each family says which kind of data it trains on (`data_kind`); the data's kind names the
default family (`register(..., default=True)`), so a run on pairs trains pix2pix and one
on labelled images BigGAN unless `family.name` says otherwise, and a family that cannot
train on the data's kind is refused by name.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Tuple, Type

import gin

from paragan_tf.errors import ConfigError

AUTO = "auto"
_FAMILIES: Dict[str, type] = {}
_DEFAULTS: Dict[str, str] = {}  # data kind -> the family that trains it by default


@gin.configurable("family")
@dataclasses.dataclass(frozen=True, kw_only=True)
class FamilyConfig:
    """`family.name`: the registered family a run trains, or 'auto': the default family
    of the data's kind (pairs: pix2pix, labelled images: BigGAN)."""

    name: str = AUTO


def register(family_class: type, default: bool = False) -> type:
    """Adds `family_class` (a contract.Family subclass) under its `name`; `default`: it
    trains its `data_kind` unless `family.name` picks another. Returns the class, so it
    can decorate it. Registering a second class under a taken name is an error; the same
    class again (a module imported twice) is not."""
    name = family_class.name
    if _FAMILIES.get(name, family_class) is not family_class:
        raise ValueError(f"a GAN family named {name!r} is registered already "
                         f"({_FAMILIES[name].__module__}); choose another name")
    _FAMILIES[name] = family_class
    if default:
        taken = _DEFAULTS.setdefault(family_class.data_kind, name)
        if taken != name:
            raise ValueError(f"{taken!r} is the default family of {family_class.data_kind} "
                             f"already; register {name!r} without default=True")
    return family_class


def names() -> Tuple[str, ...]:
    """The registered families' names."""
    return tuple(sorted(_FAMILIES))


def family_class(name: str) -> Type:
    """The registered class called `name`; ConfigError naming `family.name` when none is."""
    if name not in _FAMILIES:
        raise ConfigError(f"family.name={name!r} is not a registered GAN family; choose one "
                          f"of {list(names())} or import the module that registers it (a "
                          f"gin file's `import` line: docs/families.md)")
    return _FAMILIES[name]


def resolve(name: str, data_kind: str, dataset: str) -> str:
    """The family a run trains: `name`, or the default of `data_kind` when it is 'auto'.
    ConfigError when the family does not train on that kind of data (`dataset` names it)."""
    if name == AUTO:
        if data_kind not in _DEFAULTS:
            raise ConfigError(f"dataset.name={dataset!r} holds {data_kind}, which no "
                              f"registered family trains by default; set family.name to "
                              f"one of {list(names())}")
        return _DEFAULTS[data_kind]
    wanted = family_class(name).data_kind
    if wanted != data_kind:
        raise ConfigError(f"family.name={name!r} trains on {wanted}, but dataset.name="
                          f"{dataset!r} holds {data_kind}; choose a dataset of {wanted} or "
                          f"another family")
    return name


def configurables() -> Dict[str, Tuple[str, ...]]:
    """Every registered family's gin configurables, by family: what its gin files bind."""
    return {name: tuple(cls.configurables) for name, cls in sorted(_FAMILIES.items())}
