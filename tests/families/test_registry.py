"""The GAN families' registry and the settings' one decision of a run's family
(paragan_tf/families/registry.py, train/settings.py): the data's kind names the default,
`family.name` another, and a family that does not train on the data is refused by name."""

from __future__ import annotations

import gin
import pytest

from paragan_tf import families
from paragan_tf.data import datasets
from paragan_tf.errors import ConfigError
from paragan_tf.families import contract
from paragan_tf.families import registry
from paragan_tf.train import experiment


def _settings(*bindings: str, gin_file: str = "gin/tiny.gin"):
    gin.clear_config()
    experiment.parse([gin_file], list(bindings), finalize=False)
    try:
        return experiment.Settings.read()
    finally:
        gin.clear_config()


def test_the_data_kind_names_the_default_family():
    assert families.names() == ("biggan", "pix2pix")
    assert families.resolve("auto", datasets.LABELLED, "mnist5k") == "biggan"
    assert families.resolve("auto", datasets.PAIRS, "mnist5k_edges") == "pix2pix"
    assert _settings().model.family == "biggan"
    pix2pix = _settings(gin_file="gin/tiny_pix2pix.gin").model
    assert pix2pix.family == "pix2pix" and pix2pix.options.test_mode == "inference"
    assert pix2pix.bound["Pix2PixGenerator"] == {"ch": 4}


def test_a_family_that_does_not_train_on_the_data_or_is_unknown_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"family.name='pix2pix' trains on pairs, but "
                                          r"dataset.name='mnist5k' holds labelled images"):
        _settings("family.name = 'pix2pix'")
    with pytest.raises(ConfigError, match=r"family.name='stylegan' is not a registered GAN "
                                          r"family; choose one of \['biggan', 'pix2pix'\]"):
        _settings("family.name = 'stylegan'")


def test_another_familys_binding_is_refused_naming_the_family_it_configures():
    settings = _settings("Pix2PixGenerator.ch = 8")
    family = families.family_class(settings.model.family)(settings.model.options)
    with pytest.raises(ConfigError, match=r"Pix2PixGenerator.ch configures pix2pix, but "
                                          r"dataset.name='mnist5k' holds labelled images, so "
                                          r"this run trains biggan"):
        family.refuse(settings)


class _Stub(contract.Family):
    """Enough of a family to register (the registry reads its class attributes only)."""

    name, data_kind, configurables = "stub", datasets.LABELLED, ("StubGenerator",)

    def networks(self, *args):
        raise NotImplementedError

    def objective(self, *args):
        raise NotImplementedError

    def grid(self, *args):
        raise NotImplementedError

    def export(self, *args):
        raise NotImplementedError

    def evaluator(self, *args):
        raise NotImplementedError


def test_registering_keeps_names_and_defaults_unique(monkeypatch):
    monkeypatch.setattr(registry, "_FAMILIES", dict(registry._FAMILIES))
    registry.register(_Stub)
    registry.register(_Stub)  # the same class again: a module imported twice
    assert "stub" in families.names()
    assert families.resolve("stub", datasets.LABELLED, "mnist5k") == "stub"
    other = type("Other", (_Stub,), {})
    with pytest.raises(ValueError, match="'stub' is registered already"):
        registry.register(other)
    with pytest.raises(ValueError, match="'biggan' is the default family of labelled images"):
        registry.register(type("Third", (_Stub,), {"name": "third"}), default=True)


def test_what_a_family_does_not_do_is_refused_by_name():
    stub = _Stub()
    with pytest.raises(ConfigError, match=r"'stub' \(labelled images\) cannot translate"):
        stub.translate(None, None)
    with pytest.raises(ConfigError, match=r"cannot take bin/sample.py's --pairs \(its options "
                                          r"for stub: --seed\)"):
        stub.options_of("bin/sample.py", {"seed": 0}, {"pairs": 3})
