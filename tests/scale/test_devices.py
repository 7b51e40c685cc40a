"""The device catalogue (scale/devices.py): rows and efficiencies added or changed in gin
without touching the shipped ones, and what it does not know named."""

from __future__ import annotations

import dataclasses

import pytest

from paragan_tf.errors import ConfigError
from paragan_tf.layout import rules as layout_lib
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
    # Peaks by precision, and what layout.precision='auto' picks there: a V100 trains
    # float16 on its tensor cores (125 TFLOP/s, not float32's 15.7).
    assert (v100.peak_tflops("mixed_float16"), v100.auto_precision()) == (125.0,
                                                                          "mixed_float16")
    assert (tpu.peak_tflops("float32"), tpu.auto_precision()) == (61.5, "mixed_bfloat16")


def test_plans_and_training_pick_one_precision_on_every_catalogue_device():
    """The plan's `auto` (Device.auto_precision) is the layout a run training on that
    hardware chooses (layout/rules.py choose, nothing measured): one rule for both."""
    catalogue = devices.catalogue()
    picked = {}
    for name in [*devices.CATALOGUE, "this_cpu"]:
        device = catalogue.device(name)
        trained = layout_lib.choose(device.hardware(),
                                    config=layout_lib.LayoutConfig()).precision
        assert device.auto_precision() == trained, name
        picked[name] = trained
    assert picked["v100"] == "mixed_float16"
    assert {picked[n] for n in ("a100", "h100", "h200", "tpu_v3", "tpu_v4")} == {
        "mixed_bfloat16"}
    # The negative control: a V100 whose compute capability the row lost plans float32,
    # which its training (7.0 detected) would not pick.
    blind = dataclasses.replace(catalogue.device("v100"), compute_capability=None)
    assert blind.auto_precision() == "float32"


def test_float32_on_a_gpu_with_tf32_runs_at_the_tf32_peak_and_says_so():
    """TensorFlow runs float32 convolutions and matrix products as TF32 on an A100, H100 or
    H200 by default: a float32 plan there divides by TF32's peak, not the CUDA cores'
    (8x lower on an A100), and carries the tensor-core caveat; a V100 has no TF32."""
    catalogue = devices.catalogue()
    a100, h100, v100 = (catalogue.device(n) for n in ("a100", "h100", "v100"))
    assert (a100.peak_tflops("float32"), h100.peak_tflops("float32")) == (156.0, 494.5)
    assert a100.peak_tflops("mixed_bfloat16") == 312.0  # the other units are unchanged
    assert v100.peak_tflops("float32") == 15.7
    assert devices.caveat(a100, "float32") == devices.caveat(a100, "mixed_bfloat16")
    assert devices.caveat(v100, "float32") is None
    mine = devices.catalogue(extra={"mygpu": dict(peak_fp32_tflops=20.0, peak_tf32_tflops=80.0)})
    assert mine.device("mygpu").peak_tflops("float32") == 80.0
