"""Batch experiments: arms over problems, resumable, curves and figures from the run stores."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from fakes.fake_nki_llm import FakeNKIModel, matmul_column_outer
from fakes.fake_openai_server import FakeOpenAIServer

from accelopt_nb.experiments import Arm, collect_curves, geomean_by_iteration, summary_table
from accelopt_nb.reproduce.figures import read_manifest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def _model():
    return FakeNKIModel(plans=["Column blocks outside row blocks, each block of B loaded once: COLUMN BLOCKS OUTER."], rewrites=[("COLUMN BLOCKS OUTER", matmul_column_outer)])


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


def _replicate_rows(arm: str, seed, speedups: list[float], cost: float = 1.0) -> list[dict]:
    return [{"arm": arm, "seed": seed, "problem": "p", "run_id": f"{arm}{seed}", "iteration": it, "best_speedup": v,
             "best_pct_peak": 10, "cum_tokens": 10 * (it + 1), "cum_cost_usd": cost * (it + 1)}
            for it, v in enumerate(speedups)]


def test_replicates_give_the_mean_over_seeds_and_the_spread():
    curves = pd.DataFrame(_replicate_rows("beam", 0, [1.0, 2.0]) + _replicate_rows("beam", 1, [1.0, 8.0], cost=3.0)
                          + _replicate_rows("sampling", None, [1.5, 1.5]))
    g = geomean_by_iteration(curves).set_index(["arm", "iteration"])
    beam = g.loc[("beam", 1)]
    assert beam["geomean_speedup"] == pytest.approx(4.0)             # sqrt(2 * 8): geometric mean over the seeds
    assert (beam["low"], beam["high"], beam["seeds"]) == (pytest.approx(2.0), pytest.approx(8.0), 2)
    assert beam["cum_cost_usd"] == pytest.approx(4.0)                # one replicate's cost: mean of 2 and 6
    one = g.loc[("sampling", 1)]                                     # an arm run without seeds: one replicate
    assert (one["low"], one["high"], one["seeds"]) == (1.5, 1.5, 1)
    s = summary_table(curves).set_index("arm")
    assert s.loc["beam", "geomean_speedup"] == pytest.approx(4.0) and s.loc["beam", "seeds"] == 2
    assert (s.loc["beam", "low"], s.loc["beam", "high"]) == (pytest.approx(2.0), pytest.approx(8.0))
    assert s.loc["beam", "total_cost_usd"] == pytest.approx(4.0) and s.loc["sampling", "seeds"] == 1


def test_the_figure_draws_the_spread_of_replicates_and_says_how_many(tmp_path):
    from matplotlib.collections import PolyCollection

    from accelopt_nb.reproduce.figures import FigureSink
    from accelopt_nb.reproduce.search_figures import plot_beam_vs_sampling

    sink = FigureSink(tmp_path, "t")
    replicated = pd.DataFrame(_replicate_rows("beam", 0, [1.0, 2.0]) + _replicate_rows("beam", 1, [1.0, 8.0]))
    fig, _ = plot_beam_vs_sampling(replicated, sink)
    ax = fig.axes[0]
    assert any(isinstance(c, PolyCollection) for c in ax.collections)          # the min-max band
    assert "mean of 2 seeds" in ax.get_legend().get_texts()[0].get_text()
    assert "replicates per arm: beam 2" in ax.get_title()
    fig, _ = plot_beam_vs_sampling(pd.DataFrame(_replicate_rows("beam", None, [1.0, 2.0])), sink)
    assert not any(isinstance(c, PolyCollection) for c in fig.axes[0].collections)
    assert "one run per arm" in fig.axes[0].get_title()                          # the caveat, on the figure


def test_arms_run_once_per_seed_each_replicate_resumable(tmp_path, monkeypatch):
    from accelopt_nb.errors import ConfigError
    from accelopt_nb.experiments import run_arms
    from accelopt_nb.fake_model.server import FakeOpenAIServer
    from accelopt_nb.reproduce.notebook import run_or_load_arms
    from accelopt_nb.reproduce.offline import fake_nki_model
    from accelopt_nb.store import RunStore

    monkeypatch.setenv("ACCELOPT_CACHE_DIR", str(tmp_path / "cache"))
    model = fake_nki_model()
    arms = [{"name": "beam + memory", "preset": "smoke", "overrides": {}}]
    with FakeOpenAIServer(models=["fake-nki"], responder=model.responder) as srv:
        kwargs = dict(iterations=1, shape_preset="small", base_url=srv.url, model="fake-nki", price="free")
        curves = run_or_load_arms(arms, ["matmul"], tmp_path / "exp", seeds=[3, 5], **kwargs)
        calls = dict(model.calls)
        again = run_or_load_arms(arms, ["matmul"], tmp_path / "exp", seeds=[3, 5], **kwargs)
        assert dict(model.calls) == calls                                      # both replicates were complete
        with pytest.raises(ConfigError, match="distinct integers"):
            run_arms(arms, ["matmul"], tmp_path / "exp", seeds=[1, 1], default_model={"base_url": srv.url})
    assert sorted(p.name for p in (tmp_path / "exp").iterdir()) == ["beam_memory--seed3", "beam_memory--seed5"]
    assert sorted(curves["seed"].unique()) == [3, 5] and len(again) == len(curves)
    assert [o["seed"] for o in curves.attrs["outcomes"]] == [3, 5] and all(o["complete"] for o in curves.attrs["outcomes"])
    for seed in (3, 5):                                  # the replicate's seed is its search's seed
        store = RunStore.open(tmp_path / "exp" / f"beam_memory--seed{seed}" / "matmul")
        assert store.get_run(store.latest_run_id())["config"]["search"]["seed"] == seed
        store.close()
    # runs of the same arm without seeds are not mixed into the replicates' curves, nor the reverse
    with pytest.raises(ConfigError, match="no finished iteration"):
        run_or_load_arms(arms, ["matmul"], tmp_path / "exp", iterations=1, shape_preset="small")
