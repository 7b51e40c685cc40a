"""The plan calibrates itself on the user's device (scale/measured.py): a step measured on a
device kind replaces the family's fitted efficiency in every later plan of that kind, or,
where the catalogue has the step model's constants and the step is of the planned network,
scales the model to it; the plan says which. GPU timings are injected here (no accelerator
on this machine); the CPU path runs bin/plan.py --calibrate for real."""

from __future__ import annotations

import dataclasses
import json

import pytest

from paragan_tf.errors import ConfigError
from paragan_tf.layout import cache as layout_cache
from paragan_tf.layout import rules as layout_lib
from paragan_tf.measure import built
from paragan_tf.scale import devices
from paragan_tf.scale import measured
from paragan_tf.scale import plan
from paragan_tf.scale import step_model
from paragan_tf.train import experiment

BF16 = "mixed_bfloat16"
# An H100 step of BigGAN-128 as a user might time it: 8 GPUs, 135 TFLOP/s each.
STEP = dict(resolution=128, batch_size=2048, precision=BF16, strategy="mirrored")
REPLICAS, SECONDS = 8, 5.21
FLOPS = 135e12 * SECONDS * REPLICAS


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PARAGAN_TF_LAYOUT_CACHE", str(tmp_path / "layouts.json"))
    return tmp_path / "layouts.json"


@pytest.fixture(scope="module")
def tiny_model():
    experiment.parse(["gin/tiny.gin"], ["layout.precision = 'auto'"], finalize=False)
    return built.plan_model([BF16], progress=lambda _: None)  # h100 and a100: auto = bf16


def _record(device="h100", **changes):
    fields = dict(hardware={"accelerator": "gpu"}, step=STEP, train_step_flops=FLOPS,
                  replicas=REPLICAS, seconds_per_step=SECONDS, origin="injected",
                  tensorflow="test")
    fields.update(changes)
    key, unwritten = measured.record(device, **fields)
    assert unwritten is None
    return key


def test_a_measured_step_replaces_the_fit_in_the_plan_and_says_so(cache, tiny_model):
    catalogue = devices.catalogue()
    h100 = catalogue.device("h100")
    fitted = plan.plan_target(tiny_model, h100, 1, catalogue, plan.Assumptions())
    assert fitted["efficiency_source"].startswith("step model fitted to 1 NVIDIA H200")
    assert f"caveat: {devices.STEP_MODEL_CAVEAT}" in fitted["advice"]

    _record()
    row = plan.plan_target(tiny_model, h100, 1, catalogue, plan.Assumptions())
    achieved = FLOPS / REPLICAS / SECONDS  # FLOP/s per device, as measured
    assert row["efficiency"] == pytest.approx(achieved / 989e12)
    # The plan's compute is the step's FLOPs at the rate measured, not at the fit's.
    assert row["seconds"]["compute"] == pytest.approx(
        row["train_step_tflop_per_device"] * 1e12 / achieved)
    assert row["efficiency_source"].startswith("measured on h100 ")
    assert "135 of 989 TFLOP/s on a 128 px step of batch 2048 (injected" in (
        row["efficiency_source"])
    assert "efficiency 0.137 (measured on h100 " in plan.describe(row)
    assert not any("caveat" in line for line in row["advice"])  # the model's caveat

    # Another device kind: still the step model; another precision: not measured.
    a100 = plan.plan_target(tiny_model, catalogue.device("a100"), 1, catalogue,
                            plan.Assumptions())
    assert a100["efficiency_source"] == fitted["efficiency_source"]
    assert catalogue.efficiency_of(h100, "float32")[0] == devices.EFFICIENCY[("gpu", "float32")]
    # A value given in gin still wins over the measurement.
    given = devices.catalogue(efficiency={f"gpu/{BF16}": 0.3})
    assert given.efficiency_of(h100, BF16) == (0.3, "given in gin (catalogue.efficiency)")


def test_a_step_of_the_planned_network_scales_the_step_model_which_the_plan_follows(
        cache, tiny_model):
    """A step of tiny's own network measured on an H100 at 32 per device, 1.7 times what
    the catalogue's model gives: the plan at 8 per device is 1.7 times the model's there,
    not the measured batch's efficiency carried to 8 (the cost per op weighs more at 8), and
    not the model's own (what it would be with the measurement ignored)."""
    catalogue = devices.catalogue()
    h100 = catalogue.device("h100")
    base = devices.STEP_MODELS[("gpu", BF16)][0]

    def model_seconds(batch):
        return step_model.seconds(base, step_model.Point(
            "", tiny_model.roofline[BF16], batch, 1, tiny_model.d_steps, 989e12,
            h100.memory_gbps * 1e9, 0.0))

    ignored = plan.plan_target(tiny_model, h100, 1, catalogue, plan.Assumptions())
    assert ignored["seconds"]["compute"] == pytest.approx(model_seconds(8))
    measured_seconds = 1.7 * model_seconds(32)
    flops = tiny_model.roofline[BF16].totals(32, tiny_model.d_steps, 1)["flops"]
    step = dict(tiny_model.network, batch_size=64, d_steps=tiny_model.d_steps,
                accumulation=1, recompute=False, precision=BF16, strategy="mirrored")
    _record(step=step, replicas=2, train_step_flops=2 * flops,
            seconds_per_step=measured_seconds)
    row = plan.plan_target(tiny_model, h100, 1, catalogue, plan.Assumptions())
    assert (row["micro_batch"], row["accumulation"]) == (8, 1)
    assert row["seconds"]["compute"] == pytest.approx(1.7 * model_seconds(8), rel=1e-9)
    assert row["efficiency_source"].startswith("step model scaled to the step measured on "
                                               "h100 ")
    assert "a step of 32 per device (injected" in row["efficiency_source"]
    assert row["efficiency_source"].endswith("1.7x the catalogue's model")
    assert "(step model scaled to the step measured on h100 " in plan.describe(row)
    assert not any("caveat" in line for line in row["advice"])
    # One efficiency from the measured step (its FLOP/s over the peak), carried to 8.
    carried = measured_seconds * row["train_step_tflop_per_device"] * 1e12 / flops
    assert row["seconds"]["compute"] > 1.5 * carried

    # A step of another network (a wider D) is its measured efficiency, as before.
    cache.unlink()  # entries are ordered by their dates, to the second
    _record(step=dict(step, discriminator_ch=step["discriminator_ch"] * 2), replicas=2,
            train_step_flops=2 * flops, seconds_per_step=measured_seconds)
    other = plan.plan_target(tiny_model, h100, 1, catalogue, plan.Assumptions())
    assert other["efficiency_source"].startswith("measured on h100 ")
    assert other["seconds"]["compute"] == pytest.approx(carried)
    # A step 10x faster than the model (an XLA-fused one, say): the model's shape still,
    # its fractions capped at the datasheet and the rest of the speed in the cost per op
    # (tiny's step is launch-bound at 8 and 32 alike: the plan is 0.1x the model's at 8).
    # Before, anything over 1.25x faster fell back to one efficiency (`carried` at 0.1x).
    cache.unlink()
    _record(step=step, replicas=2, train_step_flops=2 * flops,
            seconds_per_step=0.1 * model_seconds(32))
    fast = plan.plan_target(tiny_model, h100, 1, catalogue, plan.Assumptions())
    assert fast["efficiency_source"].startswith("step model scaled to the step measured")
    assert fast["efficiency_source"].endswith("0.1x the catalogue's model")
    assert fast["seconds"]["compute"] == pytest.approx(0.1 * model_seconds(8), rel=1e-6)
    assert fast["regime"] == "launch-bound"
    # The bound: no step is faster than its roofline at the datasheet's peak and bandwidth
    # with free ops; one measured faster is refused by the model and planned as measured.
    point = step_model.Point("", tiny_model.roofline[BF16], 32, 1, tiny_model.d_steps,
                             989e12, h100.memory_gbps * 1e9, 0.0)
    fastest = step_model.seconds(step_model.Constants(1.0, 1.0, 0.0, overlap=True), point)
    assert measured.scaled(base, dataclasses.replace(point, seconds=1.01 * fastest))
    assert measured.scaled(base, dataclasses.replace(point, seconds=0.99 * fastest)) is None
    cache.unlink()
    _record(step=step, replicas=2, train_step_flops=2 * flops, seconds_per_step=0.5 * fastest)
    too_fast = plan.plan_target(tiny_model, h100, 1, catalogue, plan.Assumptions())
    assert too_fast["efficiency_source"].startswith("measured on h100 ")


def test_the_newest_measurement_counts_and_the_tuners_entries_too(cache):
    catalogue = devices.catalogue()
    h100 = catalogue.device("h100")
    _record(seconds_per_step=10.0)
    entries = json.loads(cache.read_text())
    (key,) = entries
    entries[key]["date"] = "2026-01-01 00:00:00 UTC"
    # What the layout tuner writes on a GPU (measure/tuning.py): its choice, its FLOPs and
    # replicas, and the catalogue row it ran on; a GPU the catalogue lacks names none.
    tuner = dict(schema=layout_cache.SCHEMA, hardware={"accelerator": "gpu"}, step=STEP,
                 choice=dict(precision=BF16, xla=True), train_step_flops=FLOPS,
                 replicas=REPLICAS, seconds_per_step=SECONDS, date="2026-02-01 00:00:00 UTC",
                 device="h100")
    entries["tuned"] = tuner
    entries["unnamed"] = dict(tuner, device=None, seconds_per_step=1.0,
                              date="2026-03-01 00:00:00 UTC")
    cache.write_text(json.dumps(entries))
    efficiency, source = catalogue.efficiency_of(h100, BF16)
    assert efficiency == pytest.approx(FLOPS / REPLICAS / SECONDS / 989e12)
    assert "measured on h100 2026-02-01" in source and "(the layout tuner;" in source
    # A rate above the device's peak (a miscounted step, a wrong row) is refused by name.
    entries["fast"] = dict(tuner, seconds_per_step=SECONDS / 10, date="2026-04-01 00:00:00 UTC")
    cache.write_text(json.dumps(entries))
    with pytest.raises(ConfigError, match="reached 1.35e.03 TFLOP/s per device, above the "
                                          "catalogue's 989 peak at mixed_bfloat16"):
        catalogue.efficiency_of(h100, BF16)


def test_a_float32_step_on_tensor_cores_is_held_to_the_tf32_peak(cache):
    """A float32 step an A100 runs as TF32 at 135 TFLOP/s (over the CUDA cores' 19.5, under
    TF32's 156) is the A100's measured efficiency at float32, as a share of TF32's peak."""
    catalogue = devices.catalogue()
    _record(device="a100", step=dict(STEP, precision="float32"))
    efficiency, source = catalogue.efficiency_of(catalogue.device("a100"), "float32")
    assert efficiency == pytest.approx(FLOPS / REPLICAS / SECONDS / 156e12)
    assert "135 of 156 TFLOP/s" in source


def test_this_cpu_counts_only_this_machines_own_steps(cache, monkeypatch):
    here = layout_lib.detect().signature()
    elsewhere = dict(here, cpu_model="another CPU")
    step = dict(STEP, resolution=32, batch_size=8, precision="float32", strategy="one_device")
    this_cpu = devices.this_cpu()
    catalogue = devices.catalogue()
    _record("this_cpu", hardware=elsewhere, step=step, replicas=1, train_step_flops=1e9,
            seconds_per_step=1.0)
    with pytest.raises(ConfigError, match="this_cpu has no measured step at float32 yet"):
        catalogue.efficiency_of(this_cpu, "float32")
    # A tuner entry from before entries named their device, written on this machine.
    entries = json.loads(cache.read_text())
    entries["old"] = dict(schema=layout_cache.SCHEMA, hardware=here, step=step,
                          choice=dict(precision="float32"), train_step_flops=2e9,
                          seconds_per_step=1.0, date="2026-11-01 00:00:00 UTC")
    cache.write_text(json.dumps(entries))
    efficiency, source = catalogue.efficiency_of(this_cpu, "float32")
    assert efficiency == pytest.approx(2.0 / this_cpu.peak_fp32_tflops / 1000)
    assert source.startswith("measured on this_cpu 2026-11-01")


def test_plan_calibrate_times_this_cpu_records_it_and_plans_with_it(cache, tiny_model):
    from tests.helpers.repo import run_binary
    result = run_binary("plan.py", "--gin_file=gin/tiny.gin", "--calibrate",
                        "--calibrate_steps=2", "--devices=this_cpux1",
                        env={"PARAGAN_TF_LAYOUT_CACHE": str(cache)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "calibrating: step 4/4" in result.stderr
    assert "calibrated this_cpu at float32: " in result.stderr
    assert " GB/s of memory traffic" in result.stderr
    (entry,) = json.loads(cache.read_text()).values()
    assert (entry["kind"], entry["device"], entry["replicas"]) == ("step_rate", "this_cpu", 1)
    assert entry["seconds_per_step"] > 0 and entry["train_step_flops"] > 0
    # The bytes its ops move: gin/tiny.gin's step (batch 8, 2 D steps) at ~5 FLOP a byte.
    assert 1 < entry["train_step_flops"] / entry["train_step_bytes"] < 20
    assert entry["step"]["resolution"] == 32 and entry["origin"].startswith(
        "bin/plan.py --calibrate")
    # The network it records is the one a plan of the same config compares it with.
    assert measured.network(entry["step"]) == tiny_model.network
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("this_cpux1")]
    assert "(measured on this_cpu " in line
    source = devices.catalogue().efficiency_of(devices.this_cpu(), "float32")[1]
    assert " TFLOP/s and " in source and " GB/s moved on a 32 px step" in source


def test_calibrate_refuses_a_strategy_of_several_processes_and_a_wrong_device():
    with pytest.raises(ConfigError, match="strategy.kind 'parameter_server' spans processes"):
        built.measure_step(["gin/tiny.gin"], ["strategy.kind = 'parameter_server'"], 2)
    catalogue = devices.catalogue()
    with pytest.raises(ConfigError, match="--calibrate_device=h100 is a gpu device; this "
                                          "machine's steps run on its cpu"):
        devices.to_calibrate(catalogue, "cpu", "h100")
    with pytest.raises(ConfigError, match="this tpu has no catalogue row that names it; say "
                                          "which it is with --calibrate_device"):
        devices.to_calibrate(catalogue, "tpu", None)
    assert devices.to_calibrate(catalogue, "tpu", "tpu_v4").name == "tpu_v4"
    assert devices.to_calibrate(catalogue, "cpu", None).name == "this_cpu"
