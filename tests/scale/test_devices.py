"""The device catalogue (scale/devices.py): rows and efficiencies added or changed in gin
without touching the shipped ones, and what it does not know named."""

from __future__ import annotations

import pytest

from paragan_tf.errors import ConfigError
from paragan_tf.scale import devices


def test_gin_adds_a_device_changes_a_field_and_refuses_an_unknown_one():
    catalogue = devices.catalogue(extra={"mygpu": dict(peak_fp32_tflops=20.0, memory_gib=24.0),
                                         "v100": dict(memory_gib=16.0)})
    mine = catalogue.device("mygpu")
    assert (mine.name, mine.family, mine.peak_fp32_tflops, mine.memory_gib, mine.per_host,
            mine.source) == ("mygpu", "gpu", 20.0, 24.0, 1, "given in gin")
    assert catalogue.device("v100").memory_gib == 16.0
    assert devices.CATALOGUE["v100"].memory_gib == 32.0  # the shipped row is left alone
    with pytest.raises(ConfigError, match=r"catalogue.extra\['mygpu'\]: unknown fields "
                                          r"\['tflops'\]"):
        devices.catalogue(extra={"mygpu": dict(tflops=20.0)})
    with pytest.raises(ConfigError, match="unknown device 'v200'"):
        catalogue.device("v200")


def test_efficiency_by_family_and_precision_and_a_missing_one_named():
    catalogue = devices.catalogue(efficiency={"gpu/float32": 0.5})
    v100, tpu = catalogue.device("v100"), catalogue.device("tpu_v3")
    assert catalogue.efficiency(v100, "float32") == 0.5
    assert devices.EFFICIENCY[("gpu", "float32")] == 0.64  # the shipped value is left alone
    assert catalogue.efficiency(tpu, "mixed_bfloat16") == devices.EFFICIENCY[
        ("tpu", "mixed_bfloat16")]
    with pytest.raises(ConfigError, match=r"no efficiency for tpu devices at mixed_float16; "
                                          r"measure one \(bin/plan.py --calibrate on the "
                                          r"device\) or give one: catalogue.efficiency = "
                                          r"\{'tpu/mixed_float16': 0.5\}"):
        catalogue.efficiency(tpu, "mixed_float16")
    # Peaks by precision, and what layout.precision='auto' would pick there.
    assert (v100.peak_tflops("mixed_float16"), v100.auto_precision()) == (125.0, "float32")
    assert (tpu.peak_tflops("float32"), tpu.auto_precision()) == (61.5, "mixed_bfloat16")
