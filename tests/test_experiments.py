"""Batch experiments: arms over problems, resumable, curves and figures from the run stores."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from fakes.fake_nki_llm import FakeNKIModel, matmul_resident_rhs
from fakes.fake_openai_server import FakeOpenAIServer

from accelopt_nb.experiments import Arm, collect_curves, geomean_by_iteration, summary_table
from accelopt_nb.reproduce.figures import read_manifest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def _model():
    return FakeNKIModel(plans=["Keep B resident in SBUF: RESIDENT."], rewrites=[("RESIDENT", matmul_resident_rhs)])


def test_geomean_keeps_the_last_value_of_a_finished_problem():
    curves = pd.DataFrame([
        {"arm": "a", "problem": "p", "run_id": "r1", "iteration": 0, "best_speedup": 2.0, "best_pct_peak": 10,
         "cum_tokens": 10, "cum_cost_usd": 1.0},
        {"arm": "a", "problem": "q", "run_id": "r2", "iteration": 0, "best_speedup": 1.0, "best_pct_peak": 10,
         "cum_tokens": 10, "cum_cost_usd": 1.0},
        {"arm": "a", "problem": "q", "run_id": "r2", "iteration": 1, "best_speedup": 8.0, "best_pct_peak": 10,
         "cum_tokens": 30, "cum_cost_usd": 3.0},
    ])
    g = geomean_by_iteration(curves)
    assert g["geomean_speedup"].tolist() == pytest.approx([2 ** 0.5, 4.0])   # sqrt(2*1), sqrt(2*8)
    assert g["cum_cost_usd"].tolist() == [2.0, 4.0]
    s = summary_table(curves).iloc[0]
    assert s["geomean_speedup"] == pytest.approx(4.0) and s["total_cost_usd"] == 4.0


def test_arm_spec_errors_are_named():
    from accelopt_nb.errors import ConfigError
    with pytest.raises(ConfigError, match="needs 'name'"):
        Arm.from_dict({"preset": "smoke"})


@pytest.mark.slow
def test_experiment_notebook_runs_arms_and_draws_the_figures(tmp_path, monkeypatch):
    papermill = pytest.importorskip("papermill")
    monkeypatch.setenv("ACCELOPT_CACHE_DIR", str(tmp_path / "cache"))
    model = _model()
    params = {"problems": ["matmul"], "shape_preset": "small", "iterations": 2, "model": "fake-nki",
              "price": "gpt-oss-120b@groq", "root": str(tmp_path / "runs"), "out_dir": str(tmp_path / "fig"),
              "arms": [{"name": "beam + memory", "preset": "smoke", "overrides": {}},
                       {"name": "repeated sampling", "preset": "smoke", "overrides": {"strategy": "repeated"}}]}
    with FakeOpenAIServer(models=["fake-nki"], responder=model.responder) as srv:
        params["base_url"] = srv.url
        papermill.execute_notebook(str(NOTEBOOKS / "10_search_experiments.ipynb"), str(tmp_path / "out.ipynb"),
                                   parameters=params, cwd=str(NOTEBOOKS), kernel_name="python3", progress_bar=False)
        calls_first = dict(model.calls)
        # a second batch run finds both runs complete: no new LLM calls, same curves
        papermill.execute_notebook(str(NOTEBOOKS / "10_search_experiments.ipynb"), str(tmp_path / "out2.ipynb"),
                                   parameters=params, cwd=str(NOTEBOOKS), kernel_name="python3", progress_bar=False)
        assert dict(model.calls) == calls_first
    fig = tmp_path / "fig"
    assert (fig / "speedup_per_iteration.png").stat().st_size > 0 and (fig / "speedup_vs_cost.png").stat().st_size > 0
    curves = collect_curves(tmp_path / "runs")
    assert set(curves["arm"]) == {"beam + memory", "repeated sampling"}
    # run directories a shell can type: no spaces, '+' or ','; the arm's name is kept beside its runs
    assert {p.name for p in (tmp_path / "runs").iterdir()} == {"beam_memory", "repeated_sampling"}
    assert sorted(curves["iteration"].unique()) == [0, 1]
    assert (curves["best_speedup"] >= 1.0).all() and (curves["cum_cost_usd"] > 0).all()
    assert pd.read_csv(fig / "speedup_vs_cost.csv")["geomean_speedup"].max() > 1.0
    assert [f["name"] for f in read_manifest(fig)] == ["speedup_per_iteration", "speedup_vs_cost"]


def test_arms_run_concurrently_and_a_failing_arm_is_reported_not_complete(tmp_path, monkeypatch):
    from accelopt_nb.experiments import run_arms
    from accelopt_nb.fake_model.server import FakeOpenAIServer, Fail
    from accelopt_nb.reproduce.offline import fake_nki_model

    monkeypatch.setenv("ACCELOPT_CACHE_DIR", str(tmp_path / "cache"))
    model = fake_nki_model()

    def responder(body):  # the "broken" arm's model answers nothing usable: every call fails
        return Fail(400, "this model is broken") if body["model"] == "broken" else model.responder(body)

    arms = [{"name": "good", "preset": "smoke", "overrides": {"iterations": 1}},
            {"name": "bad", "preset": "smoke", "overrides": {"iterations": 1}, "model": {"model": "broken"}}]
    with FakeOpenAIServer(models=["fake-nki", "broken"], responder=responder) as srv:
        default = {"base_url": srv.url, "model": "fake-nki", "price": "gpt-oss-120b@self-hosted"}
        outcomes = run_arms(arms, ["matmul"], tmp_path / "exp", default_model=default, progress=False,
                            parallel=2, eval_workers=2)
    by_arm = {o.arm: o for o in outcomes}
    assert by_arm["good"].complete and by_arm["good"].iterations_done == 1
    assert not by_arm["bad"].complete and "StepFailedError" in by_arm["bad"].error
    curves = collect_curves(tmp_path / "exp")
    assert set(curves["arm"]) == {"good"}  # the failed arm has no finished iteration to plot
