"""`accelopt calibrate` and accelopt_nb.perf.calibrate: recover perturbed hardware numbers from profiles."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from accelopt_nb.cli import main
from accelopt_nb.commands.calibrate import _traces
from accelopt_nb.errors import ConfigError
from accelopt_nb.perf import estimate, load_hw
from accelopt_nb.perf.calibrate import FREE_PARAMETERS, read_profile_latency

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
        path.write_text(json.dumps({kernel.stem: {"total_time": prof.total_time, "hbm_read_bytes": 1}}))
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
               "--out", str(out)])
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
    assert "RMS log error" in text and "leave-one-out" in text
    # the calibrated file reproduces the "measured" latencies
    for kernel, trace, path in zip(KERNELS, _traces(KERNELS, [TASK], "kernel"), profiles):
        assert estimate(trace, hw).total_time == pytest.approx(read_profile_latency(path), rel=0.05), kernel.name


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
