"""`accelopt_nb.bench` (the Python API) and `accelopt bench` (the command)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import nkibench
from cheats import write_cheat
from accelopt_nb.bench import COLUMNS, format_table, make_cases, run_bench, summarize, write_outputs
from accelopt_nb.cli import main
from accelopt_nb.errors import ConfigError, ProblemError
from accelopt_nb.taskfile import l2_relative_error

CHEATS = Path(__file__).parent / "fixtures" / "cheats"   # the whole-file cheats; edited ones via write_cheat


def test_run_bench_small_two_problems(tmp_path):
    df = run_bench(["silu", "rope_single_freq_apply"], preset="small", hw="trn1", progress=False)
    assert list(df.columns) == COLUMNS
    assert list(df["problem"]) == ["silu", "rope_single_freq_apply"]
    assert (df["status"] == "correct").all()
    for r in df.to_dict("records"):
        assert r["pct_peak"] == pytest.approx(100 * r["peak_ms"] / r["latency_ms"])
        assert r["hbm_bytes"] == r["hbm_read_bytes"] + r["hbm_write_bytes"]
        assert 0 < r["dma_active"] <= 1 and r["bound"] == "memory"
        assert set(r["checks"]) == {f"seed {s}" for s in (0, 21, 42, 63, 84)} | {"adversarial 0"}
    s = df.attrs["summary"]
    assert s["correct"] == 2 and s["geomean_pct_peak"] == pytest.approx(
        (df["pct_peak"].iloc[0] * df["pct_peak"].iloc[1]) ** 0.5)
    paths = write_outputs(df, tmp_path)
    assert {p.name for p in paths.values()} == {f"nkibench_small_trn1_simulator.{e}" for e in ("csv", "json", "png")}
    doc = json.loads(paths["json"].read_text())
    assert doc["summary"]["correct"] == 2 and len(doc["rows"]) == 2
    assert pd.read_csv(paths["csv"])["problem"].tolist() == ["silu", "rope_single_freq_apply"]
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"
    assert "geometric mean" in format_table(df)


def test_trn2_uses_its_own_peak():
    d1 = run_bench(["silu"], hw="trn1", progress=False, adversarial=False, seeds=[0])
    d2 = run_bench(["silu"], hw="trn2", progress=False, adversarial=False, seeds=[0])
    assert d2.iloc[0]["peak_ms"] > d1.iloc[0]["peak_ms"]          # 362.5 GB/s < 410 GiB/s
    assert d2.iloc[0]["hw"] == "trn2"


def test_trace_only_skips_correctness():
    df = run_bench(["bmm"], preset="small", trace_only=True, progress=False)
    row = df.iloc[0]
    assert row["status"] == "profiled" and row["correct"] is None and row["checks"] == {}
    assert row["latency_ms"] > 0
    assert df.attrs["summary"]["profiled"] == 1


def test_kernel_override_reports_a_cheat(tmp_path):
    df = run_bench(["bmm_softmax"], kernels={"bmm_softmax": write_cheat("bmm_softmax_first_tile_max", tmp_path)},
                   progress=False)
    row = df.iloc[0]
    assert row["status"] == "cheat" and row["correct"] == False  # noqa: E712
    assert row["message"].startswith("adversarial 0:")
    assert df.attrs["summary"]["profiled"] == 0                  # incorrect kernels get no % of peak in the mean


class FakeExecutor:
    """FAKE evaluation executor (the service's boundary): records jobs, answers with a made-up profile."""

    workers = 1

    def __init__(self, fail_on: str | None = None) -> None:
        self.jobs = []
        self.fail_on = fail_on

    def submit(self, job):
        from concurrent.futures import Future

        from accelopt_nb.evaluation import EvalResult, Status

        self.jobs.append(job)
        fut = Future()
        if job.label == self.fail_on:
            fut.set_exception(ProblemError("fake failure"))
            return fut
        peak = nkibench.get_problem(job.label).peak(job.preset, job.hw).ms
        prof = {"latency_ms": 2 * peak, "hbm_read_bytes": 10, "hbm_write_bytes": 5, "instruction_count": 7,
                "bound": "dma"}
        fut.set_result(EvalResult(status=Status.CORRECT, message="", problem=job.label, preset=job.preset,
                                  backend=job.backend, hw=job.hw, kernel_sha256=job.kernel_sha256,
                                  evaluator_version="fake", profile=prof, latency_ms=2 * peak))
        return fut

    def shutdown(self, wait=True):
        pass


def fake_service(fake):
    from accelopt_nb.evaluation.service import EvalService
    return EvalService(fake, cache=False)


def test_the_evaluation_service_is_a_parameter():
    fake = FakeExecutor()
    df = run_bench(["matmul", "adamw"], preset="paper", service=fake_service(fake), progress=False)
    assert [j.label for j in fake.jobs] == ["matmul", "adamw"]
    assert all(j.options.seeds == (42,) and not j.options.adversarial and j.preset == "paper" for j in fake.jobs)
    assert df["pct_peak"].tolist() == pytest.approx([50.0, 50.0])
    assert df["instructions"].tolist() == [7, 7]


def test_evaluation_errors_are_recorded_or_raised():
    df = run_bench(["matmul", "adamw"], service=fake_service(FakeExecutor(fail_on="matmul")), progress=False)
    assert df.iloc[0]["status"] == "error" and "fake failure" in df.iloc[0]["message"]
    assert df.iloc[1]["status"] == "correct"
    with pytest.raises(ProblemError):
        run_bench(["matmul"], service=fake_service(FakeExecutor(fail_on="matmul")), progress=False,
                  on_error="raise")


def test_make_cases_validates():
    with pytest.raises(ConfigError, match="unknown hardware"):
        make_cases(["silu"], hw="trn9")
    with pytest.raises(ConfigError, match="unknown backend"):
        make_cases(["silu"], backend="gpu")
    with pytest.raises(ConfigError, match="trace-only"):
        make_cases(["silu"], backend="neuron", trace_only=True)
    with pytest.raises(ConfigError, match="not in the run"):
        make_cases(["silu"], kernels={"matmul": CHEATS / "matmul_bf16x3.py"})
    cases = make_cases(["silu"], preset="paper")
    assert cases[0].job.options.seeds == (42,) and not cases[0].job.options.adversarial


def test_summarize_geomean():
    df = pd.DataFrame({"correct": [True, True, False, None], "pct_peak": [20.0, 80.0, 50.0, 10.0]})
    s = summarize(df)
    assert s["geomean_pct_peak"] == pytest.approx((20 * 80 * 10) ** (1 / 3))
    assert s["correct"] == 2 and s["profiled"] == 3


def test_cli_bench(tmp_path, capsys):
    rc = main(["bench", "--problems", "silu", "adamw", "--shapes", "small", "--out", str(tmp_path),
               "--no-progress", "--seeds", "0", "42"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "silu" in out and "adamw" in out and "% of peak" in out
    assert (tmp_path / "nkibench_small_trn1_simulator.png").is_file()


def test_cli_bench_kernel_override_fails_with_status(tmp_path, capsys):
    rc = main(["bench", "--kernel", f"silu={write_cheat('silu_unstable_sigmoid', tmp_path)}", "--out", str(tmp_path),
               "--no-progress", "--json"])
    captured = capsys.readouterr()
    assert rc == 1
    assert "silu: cheat: adversarial 0" in captured.err      # with --json, stdout is the JSON alone
    assert json.loads(captured.out)["correct"] == 0


def test_cli_bench_rejects_bad_kernel_option(tmp_path, capsys):
    assert main(["bench", "--kernel", "silu", "--out", str(tmp_path), "--no-progress"]) == 2
    assert "PROBLEM=FILE" in capsys.readouterr().err


def test_cli_bench_with_user_problem_dir(tmp_path, capsys):
    from nkibench_helpers import make_problem
    root = tmp_path / "user"
    make_problem(root, "double")
    try:
        rc = main(["bench", "--problem-dir", str(root), "--problems", "double", "--out", str(tmp_path / "o"),
                   "--no-progress"])
    finally:
        nkibench.unregister_problem_dir(root)
    assert rc == 0 and "double" in capsys.readouterr().out


def test_chunked_error_is_the_paper_metric():
    rng = np.random.default_rng(0)
    e = rng.standard_normal((300, 77))
    a = (e + 1e-6 * rng.standard_normal(e.shape)).astype(np.float32)
    whole = np.linalg.norm(a.astype(np.float64) - e) / np.linalg.norm(e)
    assert l2_relative_error(a, e, chunk=1000) == pytest.approx(whole, rel=1e-9)
    a[5, 5] = np.nan
    assert l2_relative_error(a, e, chunk=1000) == np.inf
    assert l2_relative_error(np.zeros(5000), np.zeros(5000), chunk=1000) == 0.0


def test_parallel_workers_give_the_same_rows_in_problem_order():
    names = ["silu", "matmul", "adamw"]
    serial = run_bench(names, preset="small", progress=False, adversarial=False, seeds=[0])
    parallel = run_bench(names, preset="small", progress=False, adversarial=False, seeds=[0], workers=2)
    assert list(parallel["problem"]) == names
    cols = ["problem", "status", "latency_ms", "pct_peak", "max_rel_error"]
    pd.testing.assert_frame_equal(serial[cols], parallel[cols])
