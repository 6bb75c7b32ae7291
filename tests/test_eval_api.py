"""The evaluation API: results round-trip through JSON, the cache, problem resolution, errors."""
import json
from pathlib import Path

import numpy as np
import pytest

from accelopt_nb.errors import ConfigError, ProblemError
from accelopt_nb.evaluation import (EvalCache, EvalOptions, EvalResult, Status, evaluate,
                                    evaluate_task_file, make_job)
from accelopt_nb.evaluation.correctness import (compare_outputs, float_bits, lowered_dtypes,
                                                unwritten_outputs)
from accelopt_nb.evaluation.engine import latency_ms_from_profile
from accelopt_nb.sim.trace import Instruction, Region, TensorInfo, Trace
from accelopt_nb.taskfile import load_task

HOSTILE = Path(__file__).parent / "fixtures" / "hostile"
SCALE_TASK = HOSTILE / "scale_task.py"
GOOD = (HOSTILE / "good_scale.py").read_text()


def test_result_round_trips_through_json_including_infinite_errors():
    r = evaluate(SOFTMAX := HOSTILE / "softmax_task.py",
                 (HOSTILE / "softmax_first_tile_max.py").read_text(), cache=False)
    assert r.status is Status.CHEAT
    text = json.dumps(r.to_dict(), allow_nan=False)   # strict JSON: no NaN/Infinity tokens
    back = EvalResult.from_dict(json.loads(text))
    assert back.status is Status.CHEAT and back.to_dict() == r.to_dict()
    assert back.adversarial_checks()[0].rel_errors == [float("inf")]
    assert SOFTMAX.is_file()


def test_cache_serves_the_second_evaluation(tmp_path):
    cache = EvalCache(tmp_path / "cache")
    first = evaluate(SCALE_TASK, GOOD, cache=cache)
    assert first.status is Status.CORRECT and not first.cached
    second = evaluate(SCALE_TASK, GOOD, cache=cache)
    assert second.cached and second.status is Status.CORRECT
    assert second.kernel_sha256 == first.kernel_sha256
    assert len(list((tmp_path / "cache").glob("*/*.json"))) == 1


def test_cache_key_separates_kernel_problem_preset_backend_hw_and_options():
    base = make_job(SCALE_TASK, GOOD)
    keys = {
        base.cache_key(),
        make_job(SCALE_TASK, GOOD + "\n# changed\n").cache_key(),
        make_job(HOSTILE / "softmax_task.py", GOOD).cache_key(),
        make_job(SCALE_TASK, GOOD, hw="trn2").cache_key(),
        make_job(SCALE_TASK, GOOD, backend="neuron").cache_key(),
        make_job(SCALE_TASK, GOOD, preset="paper").cache_key(),
        make_job(SCALE_TASK, GOOD, options=EvalOptions(tolerance=1e-3)).cache_key(),
    }
    assert len(keys) == 7
    # limits do not change a verdict, so they do not change the key
    assert make_job(SCALE_TASK, GOOD, options=EvalOptions(timeout_s=5)).cache_key() == base.cache_key()


def test_cache_key_follows_the_simulator_and_perf_model_files(tmp_path, monkeypatch):
    """A refit or a new model rule must not be answered with profiles the old model computed."""
    import accelopt_nb
    from accelopt_nb.evaluation import job as job_module

    fake_root = tmp_path / "accelopt_nb"
    for package in job_module.MODEL_PACKAGES:
        (fake_root / package).mkdir(parents=True)
        (fake_root / package / "model.py").write_text("X = 1\n")
    monkeypatch.setattr(accelopt_nb, "__file__", str(fake_root / "__init__.py"))
    job_module.model_fingerprint.cache_clear()
    try:
        before = make_job(SCALE_TASK, GOOD).cache_key()
        (fake_root / "perf" / "hw.yaml").write_text("tensor_tensor_cycles: 2.38\n")
        job_module.model_fingerprint.cache_clear()
        assert make_job(SCALE_TASK, GOOD).cache_key() != before
    finally:
        job_module.model_fingerprint.cache_clear()


def test_transient_statuses_are_not_cached(tmp_path):
    cache = EvalCache(tmp_path)
    job = make_job(SCALE_TASK, (HOSTILE / "infinite_loop.py").read_text(),
                   options=EvalOptions(timeout_s=2))
    r = evaluate(SCALE_TASK, job.kernel_source, options=job.options, cache=cache)
    assert r.status is Status.TIMEOUT
    assert cache.get(job) is None


def test_task_module_object_and_task_file_give_the_same_problem():
    by_path = make_job(SCALE_TASK, GOOD)
    by_module = make_job(load_task(SCALE_TASK), GOOD)
    assert by_path.problem.identity() == by_module.problem.identity()


def test_evaluate_task_file_names_the_kernel_file_in_errors(tmp_path):
    kernel = tmp_path / "my_kernel.py"
    kernel.write_text((HOSTILE / "uninitialized_read.py").read_text())
    r = evaluate_task_file(kernel, SCALE_TASK, cache=False)
    assert r.status is Status.INCORRECT
    assert r.error["file"] == "my_kernel.py" and r.error["line"] == 12
    assert r.label == str(kernel)


def test_task_tolerance_is_used(tmp_path):
    task = tmp_path / "loose_task.py"
    task.write_text(SCALE_TASK.read_text() + "\nREL_TOL = 0.5\n")
    almost = GOOD.replace("t * 2.0 + 1.0", "t * 2.01 + 1.0")
    assert evaluate(task, almost, cache=False).status is Status.CORRECT
    r = evaluate(SCALE_TASK, almost, cache=False)
    assert r.status is Status.INCORRECT and r.tolerance == 2e-5
    assert "is not below the tolerance" in r.checks[0].reason


def test_fail_fast_off_runs_every_seed():
    almost = GOOD.replace("t * 2.0 + 1.0", "t * 2.01 + 1.0")
    r = evaluate(SCALE_TASK, almost, options=EvalOptions(fail_fast=False), cache=False)
    assert r.status is Status.INCORRECT and len(r.checks) == 5


def test_kernel_python_error_is_build_failed_with_line():
    broken = GOOD.replace("t = nl.load(x[i * 128:(i + 1) * 128, :])",
                          "t = nl.load(x[i * 128:(i + 1) * 128, :])\n        q = undefined_name")
    r = evaluate(SCALE_TASK, broken, cache=False)
    assert r.status is Status.BUILD_FAILED
    assert r.error["line"] == 15 and "undefined_name" in r.error["message"]


def test_broken_task_is_an_error_for_the_caller_not_a_kernel_status(tmp_path):
    task = tmp_path / "bad_task.py"
    task.write_text(SCALE_TASK.read_text().replace("return x * np.float32(2.0)", "return 1 / 0 + x"))
    with pytest.raises(ProblemError, match="computing the reference"):
        evaluate(task, GOOD, cache=False)


def test_argument_errors_are_clear():
    with pytest.raises(ConfigError, match="unknown backend"):
        make_job(SCALE_TASK, GOOD, backend="gpu")
    with pytest.raises(ConfigError, match="unknown hardware"):
        make_job(SCALE_TASK, GOOD, hw="trn3")
    with pytest.raises(ProblemError, match="task file not found"):
        make_job("missing_task.py", GOOD)


# -- the checks as pure functions ---------------------------------------------------------------
def test_compare_outputs_reasons():
    ref = np.ones((4, 4), np.float32)
    assert compare_outputs((ref.copy(),), ref, 2e-5)[0]
    ok, errs, why = compare_outputs((ref * 1.1,), ref, 2e-5)
    assert not ok and errs[0] == pytest.approx(0.1, rel=1e-5) and "tolerance" in why
    ok, _, why = compare_outputs((ref, ref), ref, 2e-5)
    assert not ok and "2 output(s)" in why
    bad = ref.copy()
    bad[0, 0] = np.nan
    ok, _, why = compare_outputs((bad,), ref, 2e-5)
    assert not ok and "1 of 16 elements NaN" in why
    ok, _, why = compare_outputs((np.array([1, 2]),), np.array([1, 3]), 2e-5)
    assert not ok and "exact" in why


def test_precision_ranks():
    assert float_bits("bfloat16") < float_bits("float32") and float_bits("float8_e4m3fn") == 8
    assert float_bits("int32") is None
    assert lowered_dtypes({"float32", "int32", "uint8"}, ["float32"]) == []
    assert lowered_dtypes({"float32", "float8_e5m2", "tfloat32"}, ["float32"]) == [
        "float8_e5m2", "tfloat32"]
    assert lowered_dtypes({"bfloat16"}, ["bfloat16"]) == []


def test_unwritten_outputs_from_write_regions():
    out = TensorInfo(id=1, name="out", buffer="hbm", kind="output", shape=(4, 8), dtype="float32",
                     itemsize=4, par_axis=0, alloc_index=0)
    trace = Trace(kernel_name="k", tensors={1: out})
    write = Region(tensor=1, buffer="hbm", lo=(0, 0), hi=(2, 8), elements=16, itemsize=4)
    trace.instructions.append(Instruction(index=0, engine="dma", op="dma_store", api="nl.store",
                                          reads=(), writes=(write,), partitions=2, free_elems=8,
                                          in_dtypes=("float32",), out_dtype="float32"))
    assert unwritten_outputs(trace) == [("out", 16, 32)]


def test_latency_comes_from_the_one_key_in_ms():
    assert latency_ms_from_profile({"latency_ms": 2.5}) == 2.5
    # no guessing among other keys and units: only `latency_ms` is a latency
    assert latency_ms_from_profile({"latency_us": 2500.0}) is None
    assert latency_ms_from_profile({"total_time": 0.0025}) is None
    assert latency_ms_from_profile({"latency_ms": -1.0}) is None and latency_ms_from_profile({"other": 1}) is None


def test_nkibench_problem_by_name_with_its_baseline_kernel(tmp_path):
    nkibench = pytest.importorskip("nkibench")
    problem = nkibench.get_problem("matmul")
    r = evaluate("matmul", problem.baseline_source(), preset="small", cache=EvalCache(tmp_path))
    assert r.status is Status.CORRECT, r.summary()
    assert (r.problem, r.preset, r.tolerance) == ("matmul", "small", problem.tolerance)
    # the perf model's error bar survives the profile contract under its own name
    from accelopt_nb.evaluation.profile import ProfileRecord
    rec = ProfileRecord.from_dict(r.profile)
    assert rec.model_error == pytest.approx(max(rec.uncertainty["high"], 1 / rec.uncertainty["low"]) - 1)
    assert rec.uncertainty["kernel_class"] and rec.latency_interval_ms[0] < rec.latency_interval_ms[1]
    # the cache key follows the problem's materialised task, so both presets are distinct
    assert make_job("matmul", "k", preset="small").cache_key() != make_job(
        "matmul", "k", preset="paper").cache_key()


def test_sandbox_limits_default_by_shape_preset():
    from accelopt_nb.evaluation.job import default_limits
    small_t, small_m = default_limits("small")
    paper_t, paper_m = default_limits("paper")
    assert (small_t, small_m) == (180.0, 4096)          # the paper's 180 s for small shapes
    assert paper_t > small_t and paper_m >= 4 * small_m  # paper shapes hold GB-sized float64 references
    assert default_limits("task") == default_limits("small")
