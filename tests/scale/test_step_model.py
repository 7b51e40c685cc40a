"""The step model (scale/step_model.py): a roofline at fitted fractions of the peaks plus a
cost per op, fitted to measured steps, and the plan costing a step with it."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import tensorflow as tf

from paragan_tf.errors import ConfigError
from paragan_tf.measure import built
from paragan_tf.scale import calibration
from paragan_tf.scale import devices as devices_lib
from paragan_tf.scale import plan as plan_lib
from paragan_tf.scale import roofline
from paragan_tf.scale import step_model
from paragan_tf.train import experiment
from tests.helpers.training import parse_tiny

# A device small enough that gin/tiny.gin's network (5 FLOP per byte, 1,770 ops a step) is
# bound by its FLOPs, its bytes or its op costs, each at some batch: else a fit could not
# tell the constants apart.
PEAK, BANDWIDTH = 2e12, 1e12
TRUE = step_model.Constants(compute=0.6, bandwidth=0.7, op_seconds=8e-6)


@pytest.fixture(scope="module")
def cost():
    parse_tiny()
    exp = experiment.build(strategy=tf.distribute.OneDeviceStrategy("/cpu:0"),
                           check_data=False)
    return roofline.cost_of(built.update_graphs(exp))


def _points(cost, constants, batches, accumulation=1, d_steps=1):
    points = [step_model.Point(f"batch {b}", cost, b, accumulation, d_steps, PEAK, BANDWIDTH,
                               0.0) for b in batches]
    return [step_model.Point(**{**p.__dict__, "seconds": step_model.seconds(constants, p)})
            for p in points]


def test_the_model_is_the_roofline_at_the_fractions_plus_a_cost_per_op(cost):
    point = _points(cost, TRUE, [16], accumulation=2, d_steps=2)[0]
    bound = cost.seconds(16, 2, 2, 0.6 * PEAK, 0.7 * BANDWIDTH)
    ops = cost.totals(16, 2, 2)["ops"]
    assert point.seconds == pytest.approx(bound + ops * 8e-6)
    assert ops > 100  # the tiny network's two updates, d_steps x accumulation times over


def test_a_fixed_cost_per_op_makes_small_batches_reach_less_of_the_peak(cost):
    """What one efficiency per family cannot say: the same network on the same device
    reaches a smaller fraction of the peak at a smaller batch."""
    fractions = [step_model.fraction_of_peak(p, p.seconds)
                 for p in _points(cost, TRUE, [1, 8, 64, 512])]
    assert fractions == sorted(fractions) and fractions[-1] > 5 * fractions[0], fractions
    flat = step_model.Constants(0.6, 0.7, 0.0)  # no op cost: far flatter
    no_cost = [step_model.fraction_of_peak(p, p.seconds)
               for p in _points(cost, flat, [1, 8, 64, 512])]
    assert no_cost[-1] / no_cost[0] < fractions[-1] / fractions[0]


def test_an_overlapped_update_takes_the_longer_of_its_work_and_its_dispatch(cost):
    """A GPU's form (overlap): at batch 1 tiny's updates are all dispatch (launch-bound), at
    a large batch all work; the CPU's form adds the two."""
    gpu = dataclasses.replace(TRUE, overlap=True)
    small, large = _points(cost, gpu, [1, 16384])
    ops = cost.totals(1, 1, 1)["ops"]
    assert small.seconds == pytest.approx(ops * TRUE.op_seconds)
    assert step_model.regime(gpu, small) == "launch-bound"
    assert large.seconds == pytest.approx(cost.seconds(16384, 1, 1, 0.6 * PEAK, 0.7 * BANDWIDTH))
    assert step_model.regime(gpu, large) in ("compute-bound", "memory-bound")
    terms = step_model.terms(gpu, large)
    assert terms["launch-bound"] == 0 and sum(terms.values()) == pytest.approx(large.seconds)
    added = step_model.seconds(TRUE, large)  # negative control: the CPU's form
    assert added == pytest.approx(large.seconds + cost.totals(16384, 1, 1)["ops"] * 8e-6)


def test_the_fit_predicts_batches_it_did_not_see(cost):
    """Fitted on three batches, the model gives the true constants' seconds at three others
    and at another D-step count. The cost per op, the one batch-independent term, is
    recovered; compute and bandwidth only as a pair that predicts alike (a batch sweep of
    one network scales both bounds with the batch: fix one to pin the other, below)."""
    fitted = step_model.fit(_points(cost, TRUE, [1, 32, 1024], accumulation=4))
    assert fitted.op_seconds == pytest.approx(8e-6, rel=1e-3)
    held_out = _points(cost, TRUE, [4, 256, 2048], d_steps=2)
    np.testing.assert_allclose(step_model.ratios(fitted, held_out), 1.0, rtol=1e-2)
    wrong = step_model.Constants(0.6, 0.7, 4e-6)  # negative control: another op cost
    assert np.max(np.abs(step_model.ratios(wrong, held_out) - 1)) > 0.1


def test_fixed_constants_stay_and_the_rest_are_fitted(cost):
    fitted = step_model.fit(_points(cost, TRUE, [1, 1024]), fixed={"bandwidth": 0.7})
    assert fitted.bandwidth == 0.7
    assert fitted.compute == pytest.approx(0.6, rel=1e-3)
    assert fitted.op_seconds == pytest.approx(8e-6, rel=1e-3)


def test_too_few_points_unknown_names_and_impossible_constants_are_refused(cost):
    with pytest.raises(ConfigError, match="2 measured points cannot fit 3 constants"):
        step_model.fit(_points(cost, TRUE, [4, 64]))
    with pytest.raises(ConfigError, match="unknown constants"):
        step_model.fit(_points(cost, TRUE, [4, 64]), fixed={"launch": 1e-6})
    with pytest.raises(ConfigError, match="fractions in"):
        step_model.Constants(compute=1.5, bandwidth=0.5, op_seconds=0.0)


def test_the_fit_probe_fits_the_points_it_is_told_and_checks_the_rest(cost, tiny_model,
                                                                      tmp_path):
    """benchmarks/probes/fit_step_model.py on a reference JSON whose seconds the true
    constants give for gin/tiny.gin's network: it fits the --fit points alone, recovers the
    cost per op, and lists every point with its ratio and our memory plan of it beside the
    measured peak; a precision it cannot fit is said."""
    from benchmarks.probes import fit_step_model  # pylint: disable=import-outside-toplevel
    parse_tiny()
    resolution = experiment.Settings.read().data.resolution
    batches = [1, 256, 4096, 16384]  # on an H100's float32 peak, as large as that
    accumulations = [1, 2, 1, 1]
    # float32's cost: the probe traces it the same.
    points = [_points(cost, TRUE, [b], a)[0] for b, a in zip(batches, accumulations)]
    h100 = devices_lib.CATALOGUE["h100"]
    rows = [dict(resolution=resolution, batch=b, accumulations=a, d_steps=1,
                 precision="float32", status="ok", flops_per_iteration=2.0,
                 seconds_per_iteration=step_model.seconds(TRUE, dataclasses.replace(
                     p, peak_flops=h100.peak_fp32_tflops * 1e12,
                     bandwidth=h100.memory_gbps * 1e9)))
            for b, a, p in zip(batches, accumulations, points)]
    rows[1]["peak_memory_bytes"] = 3 * 2 ** 20
    rows.append(dict(rows[0], batch=2, status="out of memory"))
    rows.append(dict(rows[0], precision="bfloat16", seconds_per_iteration=0.1))
    measured = tmp_path / "reference_step.json"
    measured.write_text(json.dumps(dict(device="NVIDIA H100 80GB HBM3", points=rows)))
    out = tmp_path / "fit.json"
    assert fit_step_model.main([f"--measured={measured}", "--gin_file=gin/tiny.gin",
                                "--no-overlap", f"--fit={resolution}:1:*:float32",
                                f"--fit={resolution}:4096:*", f"--fit={resolution}:16384:*",
                                f"--output={out}"]) == 0
    result = json.loads(out.read_text())
    assert result["constants"]["float32"]["op_seconds"] == pytest.approx(8e-6, rel=1e-3)
    assert [(r["point"], r["fitted"]) for r in result["rows"]] == [
        (f"{resolution}:1:1:1:bfloat16", False)] + [
        (f"{resolution}:{b}:{a}:1:float32", b != 256) for b, a in zip(batches, accumulations)]
    np.testing.assert_allclose([r["ratio"] for r in result["rows"][1:]], 1.0, rtol=1e-3)
    plans = [dataclasses.replace(tiny_model.memory["float32"], accumulation=a)
             for a in accumulations]
    planned = [plan.total_bytes(b, recompute=False) for b, plan in zip(batches, plans)]
    assert [r["planned_memory_bytes"] for r in result["rows"][1:]] == planned
    assert [r["memory_ratio"] for r in result["rows"][1:]] == [
        None, planned[1] / (3 * 2 ** 20), None, None]
    # One bfloat16 point, matched by no --fit: listed, traced at bfloat16, not modelled.
    assert "0 measured points cannot fit 3 constants" in result["not_fitted"]["bfloat16"]
    assert result["rows"][0]["modelled_seconds"] is None
    # The device's probes hold bandwidth and the cost per op: one point then fits compute,
    # and every other point lands (a cost per op probed 2x too high would not).
    copy_gbps = TRUE.bandwidth * h100.memory_gbps
    for op_seconds, lands in ((TRUE.op_seconds, True), (2 * TRUE.op_seconds, False)):
        measured.write_text(json.dumps(dict(
            device="NVIDIA H100 80GB HBM3", points=rows[:4],
            device_probes=dict(copy_gbps=copy_gbps, op_seconds=op_seconds))))
        assert fit_step_model.main([f"--measured={measured}", "--gin_file=gin/tiny.gin",
                                    "--no-overlap", f"--fit={resolution}:16384:*",
                                    "--fix_from_probes",
                                    f"--output={out}"]) == 0
        result = json.loads(out.read_text())
        assert result["fixed"] == pytest.approx(dict(bandwidth=TRUE.bandwidth,
                                                     op_seconds=op_seconds))
        ratios = [r["ratio"] for r in result["rows"]]
        assert np.allclose(ratios, 1.0, rtol=1e-3) == lands, ratios


@pytest.fixture(scope="module")
def tiny_model():
    parse_tiny()
    return built.plan_model(["float32"], progress=lambda _: None)


def test_the_plan_costs_the_step_with_the_model_where_the_catalogue_has_its_constants(
        tiny_model, tmp_path, monkeypatch):
    """Given constants for gpu/float32, the plan's compute is the step model's seconds for
    the micro-batch it chose, and its efficiency the share of the peak that reaches; a gin
    efficiency or a step measured on the device still ranks above the model."""
    monkeypatch.setenv("PARAGAN_TF_LAYOUT_CACHE", str(tmp_path / "layouts.json"))
    given = dict(compute=0.5, bandwidth=0.8, op_seconds=2e-5)
    catalogue = devices_lib.catalogue(step_model={"gpu/float32": given})
    h100 = catalogue.device("h100")
    row = plan_lib.plan_target(tiny_model, h100, 1, catalogue, plan_lib.Assumptions())
    assert row["efficiency_source"] == "step model given in gin (catalogue.step_model)"
    point = step_model.Point("h100x1", tiny_model.roofline["float32"], row["micro_batch"],
                             row["accumulation"], tiny_model.d_steps, 494.5e12, 3350e9, 0.0)
    assert row["seconds"]["compute"] == pytest.approx(
        step_model.seconds(step_model.Constants(**given, overlap=True), point))
    assert row["efficiency"] == pytest.approx(
        row["train_step_tflop_per_device"] / 494.5 / row["seconds"]["compute"])
    assert "(step model given in gin)" in plan_lib.describe(row)
    # Without them, the constants fitted to TF32 tensor cores (an H100's float32 is TF32),
    # and the caveat with the model's band; a V100's float32 keeps the family's fit.
    fitted = plan_lib.plan_target(tiny_model, h100, 1, devices_lib.catalogue(),
                                  plan_lib.Assumptions())
    assert fitted["efficiency_source"] == ("step model fitted to 1 NVIDIA H200 "
                                           "(step_model_gpu_tf32_* in scale/calibration.py)")
    compute, op_seconds = calibration.STEP_MODEL_GPU_TF32
    assert fitted["seconds"]["compute"] == pytest.approx(step_model.seconds(
        step_model.Constants(compute, 0.8, op_seconds, overlap=True), point))
    assert fitted["model_band"] == list(calibration.STEP_MODEL_GPU_BAND)
    assert fitted["regime"] in step_model.REGIMES
    assert f"caveat: {devices_lib.STEP_MODEL_CAVEAT}" in fitted["advice"]
    v100 = plan_lib.plan_target(tiny_model, devices_lib.CATALOGUE["v100"], 1,
                                devices_lib.catalogue(), plan_lib.Assumptions())
    assert v100["efficiency_source"].startswith("fitted to 8 NVIDIA V100")
    both = devices_lib.catalogue(step_model={"gpu/float32": given},
                                 efficiency={"gpu/float32": 0.3})
    assert plan_lib.plan_target(tiny_model, h100, 1, both, plan_lib.Assumptions())[
        "efficiency"] == 0.3


def test_step_model_constants_and_a_device_without_bandwidth_are_refused_by_name(tiny_model):
    with pytest.raises(ConfigError, match=r"catalogue.step_model\['gpu/float32'\].*give "
                                          r"exactly \['compute', 'bandwidth', 'op_seconds'\]"):
        devices_lib.catalogue(step_model={"gpu/float32": dict(compute=0.5)})
    catalogue = devices_lib.catalogue(
        extra={"mygpu": dict(peak_fp32_tflops=20.0, memory_gib=24.0)},
        step_model={"gpu/float32": dict(compute=0.5, bandwidth=0.5, op_seconds=0.0)})
    with pytest.raises(ConfigError, match="mygpu: the step model at float32 needs the "
                                          "device's memory bandwidth"):
        plan_lib.plan_target(tiny_model, catalogue.device("mygpu"), 1, catalogue,
                             plan_lib.Assumptions())
    # The fitted constants are not refused there: the family's fit, and what to give.
    fitted = devices_lib.catalogue(extra={"mygpu": dict(peak_fp32_tflops=20.0,
                                                        peak_tf32_tflops=150.0, memory_gib=24.0)})
    row = plan_lib.plan_target(tiny_model, fitted.device("mygpu"), 1, fitted,
                               plan_lib.Assumptions())
    assert row["efficiency_source"].startswith("fitted to 8 NVIDIA V100")
    assert any("give the device's memory bandwidth (memory_gbps)" in a for a in row["advice"])
