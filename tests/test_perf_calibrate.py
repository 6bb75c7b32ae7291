"""`accelopt calibrate` and accelopt_nb.perf.calibrate: recover perturbed hardware numbers from profiles."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from accelopt_nb.cli import main
from accelopt_nb.commands.calibrate import _traces
from accelopt_nb.errors import ConfigError
from accelopt_nb.perf import estimate, load_hw
from accelopt_nb.perf.calibrate import (FREE_PARAMETERS, HeldOut, LatencyCache, depends_on, fit, grid, leave_one_out,
                                        read_profile_latency)

FIXTURES = Path(__file__).parent / "fixtures" / "perf_calibration"
KERNELS = [FIXTURES / f"{n}.py" for n in ("stream_mul", "stream_recip", "stream_copy", "dep_chain", "matmul_fp32")]
TASK = FIXTURES / "task.py"
# a machine that differs from the shipped trn1 in every free parameter
PERTURBED = {"tensor_tensor_cycles_per_elem": 1.3, "reciprocal_cycles_per_elem": 4.5, "matmul_fp32_factor": 5.0,
             "dependent_overhead_cycles": 170.0}


def _write_profiles(tmp_path: Path, hw) -> list[Path]:
    """neuron-profile summary-json files of the fixture kernels as the perturbed machine would time them."""
    paths = []
    for kernel, trace in zip(KERNELS, _traces(KERNELS, [TASK], "kernel")):
        prof = estimate(trace, hw)
        path = tmp_path / f"{kernel.stem}.json"
        # neuron-profile's total_time spans the kernel's start and stop: the model's end_to_end_ms
        path.write_text(json.dumps({kernel.stem: {"total_time": prof.end_to_end_ms / 1e3, "hbm_read_bytes": 1}}))
        paths.append(path)
    return paths


def test_free_parameters_are_hardware_keys_inside_their_ranges():
    hw = load_hw("trn1")
    for p in FREE_PARAMETERS:
        assert p.lo <= getattr(hw, p.key) <= p.hi, p.key
        assert p.lo <= PERTURBED[p.key] <= p.hi


def test_calibrate_round_trip_recovers_perturbed_parameters(tmp_path, capsys):
    profiles = _write_profiles(tmp_path, load_hw("trn1", PERTURBED))
    out = tmp_path / "my_trn1.yaml"
    rc = main(["calibrate", *map(str, KERNELS), "--task", str(TASK), "--profiles", *map(str, profiles),
               "--out", str(out), "--source", "streams", "streams", "streams", "other", "other"])
    assert rc == 0
    data = yaml.safe_load(out.read_text())
    assert data["base"] == "trn1"
    hw = load_hw(out)                                   # what --hw FILE loads
    for key, want in PERTURBED.items():
        assert getattr(hw, key) == pytest.approx(want, rel=0.08), key
    # each fixture pins one parameter, so leaving it out leaves that parameter free: a large
    # held-out error, written as the file's model_error
    assert data["model_error"] == hw.model_error > 0
    text = capsys.readouterr().out
    assert "RMS log error" in text and "leave-one-out over 5" in text and "Spearman rho" in text
    # each source held out in turn: fitted on the other one, it cannot pin the parameters it alone pins
    held = text.split("per source held out")[1].splitlines()[1:3]
    assert [line.split()[0] for line in held] == ["other", "streams"] and all("median x" in line for line in held)
    # the calibrated file reproduces the "measured" latencies
    for kernel, trace, path in zip(KERNELS, _traces(KERNELS, [TASK], "kernel"), profiles):
        assert estimate(trace, hw).end_to_end_ms / 1e3 == pytest.approx(read_profile_latency(path), rel=0.05), kernel.name


def test_leave_one_source_out_fits_without_the_source_it_tests():
    from accelopt_nb.perf.calibrate import leave_one_source_out
    traces = _traces(KERNELS[:4], [TASK], "kernel")
    hw = load_hw("trn1", PERTURBED)
    measured = [estimate(t, hw).end_to_end_ms / 1e3 for t in traces]
    out = leave_one_source_out(traces, measured, ["a", "a", "b", "b"], base="trn1", passes=1, steps=3)
    assert sorted(out) == ["a", "b"] and all(len(h.ratios) == 2 for h in out.values())
    with pytest.raises(ConfigError, match="two sources"):
        leave_one_source_out(traces, measured, ["a"] * 4)
    with pytest.raises(ConfigError, match="labels"):
        leave_one_source_out(traces, measured, ["a", "b"])


def test_read_profile_latency_formats_and_errors(tmp_path):
    nested = tmp_path / "a.json"
    nested.write_text(json.dumps({"kernel_x": {"total_time": 0.002}}))
    flat = tmp_path / "b.json"
    flat.write_text(json.dumps({"latency": 1.5}))
    assert read_profile_latency(nested) == pytest.approx(0.002)
    assert read_profile_latency(flat) == pytest.approx(1.5e-3)
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({"hbm_read_bytes": 10}))
    with pytest.raises(ConfigError, match="total_time"):
        read_profile_latency(bad)
    broken = tmp_path / "d.json"
    broken.write_text("{not json")
    with pytest.raises(ConfigError, match="d.json"):
        read_profile_latency(broken)


def test_calibrate_needs_one_profile_per_kernel(tmp_path, capsys):
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"total_time": 1e-3}))
    rc = main(["calibrate", *map(str, KERNELS[:2]), "--task", str(TASK), "--profiles", str(p),
               "--out", str(tmp_path / "x.yaml")])
    assert rc == 2
    assert "one --profiles JSON per kernel" in capsys.readouterr().err


def test_fit_grids_are_fixed_so_fits_share_latencies():
    p = FREE_PARAMETERS[0]
    first = grid(p, 7)
    assert len(first) == 7 and first[0] == pytest.approx(p.lo) and first[-1] == pytest.approx(p.hi)
    later = grid(p, 7, first[3])
    # one first-pass step either side, three times finer, hitting the first-pass points exactly
    assert len(later) == 7 and later[0] == first[2] and later[3] == first[3] and later[-1] == first[4]
    assert grid(p, 7, float(later[1])).tolist()[:4] == grid(p, 7, float(first[2])).tolist()[1:5]
    assert grid(p, 7, p.lo)[0] == first[0] and len(grid(p, 7, p.lo)) == 4     # clipped at the range


def test_latency_cache_times_each_trace_once_per_parameter_it_depends_on():
    stream_copy, stream_recip = _traces([FIXTURES / "stream_copy.py", FIXTURES / "stream_recip.py"], [TASK], "kernel")
    hw = load_hw("trn1")
    assert not depends_on(stream_copy, hw, "reciprocal_cycles_per_elem")
    assert depends_on(stream_recip, hw, "reciprocal_cycles_per_elem")
    assert not depends_on(stream_recip, hw, "matmul_fp32_factor")
    cache = LatencyCache(launch_included=False)
    for x in (2.0, 5.0):
        other = hw.replace(reciprocal_cycles_per_elem=x)
        for trace in (stream_copy, stream_recip):
            assert cache.latency(trace, other) == pytest.approx(estimate(trace, other).total_time, rel=1e-12)
    assert len(cache._seen) == 3            # the copy kernel was timed once for both values


def test_fits_compare_measured_total_time_with_the_model_start_and_stop_included():
    """neuron-profile total_time spans the kernel's start and stop (docs/perf_model.md §2b): a fit compares it
    with the model's end_to_end_ms, not with the kernel time alone."""
    (stream_copy,) = _traces([FIXTURES / "stream_copy.py"], [TASK], "kernel")
    hw = load_hw("trn1")
    assert hw.launch_overhead_s > 0
    prof = estimate(stream_copy, hw)
    assert LatencyCache().latency(stream_copy, hw) == pytest.approx(prof.end_to_end_ms / 1e3, rel=1e-12)
    cal = fit([stream_copy], [prof.end_to_end_ms / 1e3], base=hw, passes=1, steps=3)
    assert cal.ratios_before == pytest.approx([1.0], rel=1e-9)


def test_held_out_summary():
    held = HeldOut(("a", "b", "c", "d"), (1.1, 0.8, 1.3, 1.0), (1e-3, 2e-3, 3e-3, 4e-3))
    assert held.median_error == pytest.approx(np.median([1.1, 1.25, 1.3, 1.0]))
    assert held.worst_error == pytest.approx(1.3)
    assert held.spearman == pytest.approx(1.0)          # 1.1, 1.6, 3.9, 4.0 ms: the measured order
    text = held.format()
    assert "worst x1.300" in text and "Spearman rho 1.000" in text and text.count("\n") == 5
    with pytest.raises(ConfigError, match="2 names for 1 kernels"):
        leave_one_out([object()], [1e-3], names=["a", "b"])
