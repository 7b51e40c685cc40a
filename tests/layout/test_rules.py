"""Hardware-aware layout: the rules per detected hardware, how a measurement and pins combine
with them, and real bfloat16 and XLA training steps."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from paragan_tf.layout import rules as layout_lib
from paragan_tf.layout.choice import Choice
from paragan_tf.layout import env as layout_env
from paragan_tf.errors import ConfigError
from paragan_tf.families.biggan import networks as biggan
from paragan_tf.train import experiment
from paragan_tf.train import driver
from paragan_tf.train import step as step_lib
from paragan_tf.train import sync_trainer
from tests.helpers.training import mirrored_2


Config = layout_lib.LayoutConfig
ONE_DEVICE = tf.distribute.OneDeviceStrategy("/cpu:0")
CPU_PLAIN = layout_lib.Hardware("cpu", frozenset({"sse2", "avx2", "avx512f"}))
CPU_AVX2 = layout_lib.Hardware("cpu", frozenset({"sse2", "avx2", "fma"}),
                               cpu_model="AMD EPYC (family 25 model 1)", cores=2)  # Zen 3
CPU_AVX512_BF16 = layout_lib.Hardware("cpu", frozenset({"avx512f", "avx512_bf16"}))
CPU_AMX = layout_lib.Hardware("cpu", frozenset({"avx512_bf16", "amx_bf16", "amx_tile"}))
GPU_AMPERE = layout_lib.Hardware("gpu", frozenset(), (8, 0))
GPU_VOLTA = layout_lib.Hardware("gpu", frozenset(), (7, 0))
GPU_PASCAL = layout_lib.Hardware("gpu", frozenset(), (6, 1))
TPU = layout_lib.Hardware("tpu")


@pytest.mark.parametrize("hardware,precision,xla,multiple", [
    (CPU_PLAIN, "float32", False, 1),
    (CPU_AVX2, "float32", False, 1),
    (CPU_AVX512_BF16, "mixed_bfloat16", False, 16),
    (CPU_AMX, "mixed_bfloat16", False, 32),
    (GPU_AMPERE, "mixed_bfloat16", True, 8),
    (GPU_VOLTA, "mixed_float16", True, 8),
    (GPU_PASCAL, "float32", True, 8),
    (TPU, "mixed_bfloat16", True, 128),
])
def test_auto_layout_per_hardware(hardware, precision, xla, multiple):
    chosen = layout_lib.choose(hardware, ONE_DEVICE)
    assert (chosen.precision, chosen.xla, chosen.channel_multiple) == (precision, xla, 1)
    assert chosen.reasons  # every automatic choice says why
    rounded = layout_lib.choose(hardware, ONE_DEVICE, Config(round_channels=True))
    assert rounded.channel_multiple == multiple


def test_explicit_settings_override_detection_and_impossible_xla_is_refused():
    assert layout_lib.choose(CPU_AMX, ONE_DEVICE,
                             Config(precision="float32")).precision == "float32"
    assert layout_lib.choose(CPU_PLAIN, ONE_DEVICE, Config(xla="on")).xla
    # Two replicas on CPU devices: XLA cannot compile the step; auto says so, "on" is an error.
    auto = layout_lib.choose(CPU_PLAIN, mirrored_2())
    assert not auto.xla and any("does not support XLA" in r for r in auto.reasons)
    with pytest.raises(ConfigError, match="layout.xla='on' cannot be used here"):
        layout_lib.choose(CPU_PLAIN, mirrored_2(), Config(xla="on"))
    with pytest.raises(ConfigError, match="layout.precision"):
        layout_lib.choose(CPU_PLAIN, ONE_DEVICE, Config(precision="float8"))
    with pytest.raises(ConfigError, match="round_channels"):
        layout_lib.choose(CPU_PLAIN, ONE_DEVICE, Config(channel_multiple=16))


def test_graph_optimizer_setting_reaches_the_process_and_is_named_in_the_log_line():
    """layout.graph_optimizer = False turns Grappler off for the functions called after
    `apply`, and True on again (tests/conftest.py may have left either)."""
    for on in (False, True):
        layout = layout_lib.choose(CPU_PLAIN, ONE_DEVICE, Config(graph_optimizer=on))
        layout_lib.apply(layout)
        assert tf.config.optimizer.get_experimental_options().get(
            "disable_meta_optimizer", False) is (not on)
        assert layout.as_dict()["graph_optimizer"] is on
        assert any("graph optimiser off" in r for r in layout.reasons) is (not on)


@pytest.mark.parametrize("binding,named", [
    ("layout.graph_optimizer = 'no'", "layout.graph_optimizer='no' must be True or False"),
    ("layout.tune = 'sometimes'", "layout.tune='sometimes' must be auto, off or again"),
    ("layout.tune_seconds = 0", "layout.tune_seconds=0 must be > 0"),
    ("layout.onednn = 'yes'", "layout.onednn='yes' must be auto, on or off"),
])
def test_layout_settings_are_read_with_the_runs_settings_and_refused_by_name(
        tiny_gin, binding, named):
    tiny_gin("layout.tune = 'again'", "layout.tune_seconds = 30")
    layout = experiment.Settings.read().layout
    assert (layout.tune, layout.tune_seconds, layout.precision) == ("again", 30, "float32")
    assert layout.pins() == {"precision": "float32", "xla": "off"}  # gin/layouts/fp32.gin
    tiny_gin(binding)
    with pytest.raises(ConfigError, match=named):
        experiment.Settings.read()


def test_a_measurement_decides_only_what_the_rules_leave_to_it():
    faster_xla = Choice(xla=True, onednn=True, source="cache")
    chosen = layout_lib.choose(CPU_AVX2, ONE_DEVICE, measured=faster_xla)
    assert chosen.xla and chosen.source == "cache" and chosen.precision == "float32"
    assert any(r.startswith("XLA on: cache") for r in chosen.reasons)
    # Pinned settings are never overridden; an impossible XLA is never taken from a cache.
    assert not layout_lib.choose(CPU_AVX2, ONE_DEVICE, Config(xla="off"),
                                 measured=faster_xla).xla
    assert not layout_lib.choose(CPU_AVX2, mirrored_2(), measured=faster_xla).xla
    # A precision is taken from a measurement only when the config leaves it to `auto`.
    bf16_slower = Choice(xla=False, onednn=True, precision="float32")
    assert layout_lib.choose(CPU_AVX512_BF16, ONE_DEVICE,
                             measured=bf16_slower).precision == "float32"
    assert layout_lib.choose(CPU_AVX512_BF16, ONE_DEVICE, Config(precision="mixed_bfloat16"),
                             measured=bf16_slower).precision == "mixed_bfloat16"
    # Without a measurement the rules say so.
    rule = layout_lib.choose(CPU_AVX2, ONE_DEVICE)
    assert rule.source == "rule" and not rule.xla
    assert any("no measurement" in r for r in rule.reasons)


def test_process_settings_come_from_pins_then_the_measurement(monkeypatch):
    for name in ("TF_ENABLE_ONEDNN_OPTS",) + layout_lib.THREAD_ENV:
        monkeypatch.delenv(name, raising=False)
    measured = Choice(xla=False, onednn=True, intra_op_threads=2,
                                   inter_op_threads=1)
    assert layout_env.environment(CPU_AVX2, measured=measured) == {
        "TF_ENABLE_ONEDNN_OPTS": "1", "TF_NUM_INTRAOP_THREADS": "2",
        "TF_NUM_INTEROP_THREADS": "1"}
    # strategy.intra_op_threads/inter_op_threads pin the threads: the strategy sets them.
    assert layout_env.environment(CPU_AVX2, measured=measured, threads_pinned=True) == {
        "TF_ENABLE_ONEDNN_OPTS": "1"}
    assert layout_env.environment(CPU_AVX2, onednn="off", measured=measured)[
        "TF_ENABLE_ONEDNN_OPTS"] == "0"
    assert layout_env.environment(CPU_AVX2) == {}  # no measurement: TensorFlow's defaults
    # What the user's environment sets is theirs: never in what we would set.
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    assert "TF_ENABLE_ONEDNN_OPTS" not in layout_env.environment(CPU_AVX2, measured=measured)
    # ...unless our own restart set it (marked so).
    monkeypatch.setenv(layout_env.SET_BY_LAYOUT + "TF_ENABLE_ONEDNN_OPTS", "1")
    assert "TF_ENABLE_ONEDNN_OPTS" in layout_env.environment(CPU_AVX2, measured=measured)
    with pytest.raises(ConfigError, match="x86 CPUs only"):
        layout_env.environment(GPU_AMPERE, onednn="on")
    with pytest.raises(ConfigError, match="layout.onednn"):
        layout_env.environment(CPU_AVX2, onednn="yes")


def test_onednn_default_follows_tensorflows_rule_and_a_mismatch_is_refused():
    assert layout_env.onednn_default(CPU_AVX2) is False
    assert layout_env.onednn_default(CPU_AVX512_BF16) is True
    assert layout_env.onednn_default(CPU_AMX) is True
    assert layout_env.onednn_default(GPU_AMPERE) is None
    in_effect = layout_lib.onednn_in_effect(CPU_AVX2)
    other = "off" if in_effect else "on"
    with pytest.raises(ConfigError, match="set TF_ENABLE_ONEDNN_OPTS"):
        layout_lib.choose(CPU_AVX2, ONE_DEVICE, Config(onednn=other))
    assert layout_lib.choose(CPU_AVX2, ONE_DEVICE,
                             Config(onednn="on" if in_effect else "off")).onednn == in_effect


def test_detection_reads_cpu_flags(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD "
                       "EPYC\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile\n")
    features = layout_lib.cpu_features(str(cpuinfo))
    assert layout_lib.cpu_model(str(cpuinfo)) == "AMD EPYC (family 25 model 1)"
    assert {"amx_bf16", "avx2"} <= features
    assert layout_lib.cpu_features(str(tmp_path / "missing")) == frozenset()
    # Stub the boundary only: detect() and choose() then run for real.
    monkeypatch.setattr(layout_lib, "cpu_features", lambda path="": features)
    hardware = layout_lib.detect(ONE_DEVICE)
    assert hardware.accelerator == "cpu" and hardware.bf16_unit == "AMX-BF16"
    assert layout_lib.choose(hardware, ONE_DEVICE).precision == "mixed_bfloat16"


def test_channel_rounding_widens_every_block():
    keras.mixed_precision.set_global_policy("float32")
    g = biggan.Generator(resolution=32, num_classes=10, ch=3, dim_z=8, channel_multiple=16)
    d = biggan.Discriminator(resolution=32, num_classes=10, ch=3, channel_multiple=16)
    biggan.build(g, d, 3)
    # ch * 4 = 12 -> 16 in every block; the 3-channel image output is not a block width.
    assert g.blocks[0].conv1.kernel.shape[-1] == 16
    assert d.blocks[0].conv1.kernel.shape[-1] == 16
    assert g.out_conv.kernel.shape[-1] == 3


def test_bfloat16_step_is_finite_and_keeps_float32_state(tiny_gin, tmp_path):
    experiment.parse(["gin/tiny.gin", "gin/layouts/bf16.gin"],
                     ["train.total_steps = 2", "train.d_steps = 1"], finalize=False)
    exp = experiment.build(ONE_DEVICE)
    try:
        assert exp.layout.precision == "mixed_bfloat16"
        assert exp.generator.blocks[0].conv1.op_dtype == "bfloat16"  # matrix work in bf16
        assert exp.discriminator.linear.op_dtype == "float32"  # logits in float32
        result = driver.train(exp, str(tmp_path))
        for key in ("loss/D", "loss/G", "grad_norm/D", "grad_norm/G"):
            assert np.isfinite(result[key]), key
        variables = (exp.generator.variables + exp.discriminator.variables
                     + exp.generator_ema.variables + exp.g_optimizer.variables()
                     + exp.d_optimizer.variables())
        assert {v.dtype for v in variables if v.dtype != tf.int64} == {tf.float32}
        labels = tf.constant([0, 1])
        images = exp.generator((tf.zeros([2, exp.generator.dim_z]), labels))
        logits = exp.discriminator((images, labels))
        assert images.dtype == tf.float32 and logits.dtype == tf.float32
        assert np.all(np.isfinite(images.numpy())) and np.all(np.abs(images.numpy()) <= 1)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def _xla_compiled_calls(exp) -> int:
    """Function calls marked must-compile (XLA) in the training loop's traced graph."""
    fn = sync_trainer.make_loop_fn(exp, step_lib.for_experiment(exp))
    graph = fn.get_concrete_function(
        sync_trainer.real_batches(exp, 0), sync_trainer.noise_batches(exp, 0),
        tf.constant(1, tf.int64)).graph.as_graph_def()
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    return sum(n.attr["_XlaMustCompile"].b for n in nodes)


def test_xla_compiled_step_trains(tiny_gin, tmp_path):
    tiny_gin("layout.xla = 'on'", "train.total_steps = 2")
    exp = experiment.build(ONE_DEVICE)
    assert exp.layout.xla
    # The per-replica step is the one XLA cluster (0 with layout.xla = 'off', tried).
    assert _xla_compiled_calls(exp) == 1
    result = driver.train(exp, str(tmp_path))
    assert result["step"] == 2 and np.isfinite(result["loss/D"])
