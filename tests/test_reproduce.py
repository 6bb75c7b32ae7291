"""`accelopt reproduce`: configs, the runner's index and failures, the figure library, and the full offline smoke run."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from accelopt_nb.cli import main as cli_main
from accelopt_nb.errors import ConfigError
from accelopt_nb.fake_model import FAKE_MODEL_LABEL
from accelopt_nb.reproduce.figures import FigureSink, new_figure, read_manifest
from accelopt_nb.reproduce.published import geomean, nkibench_trn1, paper_facts
from accelopt_nb.reproduce.runner import NOTEBOOKS, find_checkout, load_job, plan
from accelopt_nb.reproduce.search_figures import reach_table

ROOT = Path(__file__).resolve().parent.parent


def test_published_numbers_are_the_papers():
    d = nkibench_trn1()
    assert len(d) == 14
    assert geomean(d["baseline_pct_peak"]) == pytest.approx(49.24, abs=0.01)
    facts = paper_facts()
    assert facts["nkibench_pct_peak"]["trn2"] == {"baseline": 45, "accelopt": 59, "source": facts["nkibench_pct_peak"]["trn2"]["source"]}
    assert facts["cost"]["times_cheaper"] == 26 and facts["mamba_human_experts"]["accelopt"] == 54.6


def test_every_notebook_has_a_smoke_and_a_paper_config_whose_keys_are_its_parameters():
    import nbformat
    checkout = find_checkout()
    for mode in ("smoke", "paper"):
        jobs = plan(mode, checkout=checkout)
        assert [j.spec.file for j in jobs] == [s.file for s in NOTEBOOKS if mode in s.modes]
        for job in jobs:
            nb = nbformat.read(checkout / "notebooks" / job.spec.file, as_version=4)
            cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
            names = {line.split("=")[0].strip() for line in cell.source.splitlines() if "=" in line and not line.startswith(" ")}
            assert set(job.params) <= names, (job.config.name, set(job.params) - names)
            assert {"out_dir", "runs_dir"} <= names


def test_only_and_config_errors_are_named(tmp_path):
    checkout = find_checkout()
    jobs = plan("smoke", only=["cost", "01_nki_basics.ipynb"], checkout=checkout)
    assert [j.spec.file for j in jobs] == ["01_nki_basics.ipynb", "22_cost.ipynb"]
    with pytest.raises(ConfigError, match="unknown notebook 'nope'"):
        plan("smoke", only=["nope"], checkout=checkout)
    bad = tmp_path / "bad.yaml"
    bad.write_text("problems: [matmul]\n")
    with pytest.raises(ConfigError, match="'notebook' key"):
        load_job(bad)
    bad.write_text("notebook: 22_cost.ipynb\nendpoint: openai\n")
    with pytest.raises(ConfigError, match="endpoint must be 'fake'"):
        load_job(bad)
    with pytest.raises(ConfigError, match="not an accelopt_nb source checkout"):
        find_checkout(tmp_path)


def test_figure_sink_writes_png_svg_csv_and_names_the_model(tmp_path):
    sink = FigureSink(tmp_path, "nb", FAKE_MODEL_LABEL)
    assert sink.title("Speedup").endswith(f"[{FAKE_MODEL_LABEL}]")
    fig, ax = new_figure()
    ax.plot([0, 1], [1, 2])
    paths = sink.save(fig, "curve", pd.DataFrame({"x": [0, 1]}), caption="c")
    assert all(Path(p).stat().st_size > 0 for p in paths.values())
    [entry] = read_manifest(tmp_path)
    assert entry["name"] == "curve" and entry["model"] == FAKE_MODEL_LABEL


def test_reach_table_counts_iterations_and_cost_to_the_matched_improvement():
    rows = []
    for arm, speeds in {"memory": [1.0, 1.5, 2.0], "none": [1.0, 1.2, 1.5]}.items():
        for it, s in enumerate(speeds):
            rows.append({"arm": arm, "problem": "p", "run_id": arm, "iteration": it, "best_speedup": s,
                         "best_pct_peak": None, "cum_tokens": 0, "cum_cost_usd": float(it + 1)})
    reach = reach_table(pd.DataFrame(rows)).set_index("arm")
    assert reach.loc["memory", "target_speedup"] == 1.5            # what every arm reached
    assert reach.loc["memory", "iterations_to_target"] == 2 and reach.loc["none", "iterations_to_target"] == 3
    assert reach.loc["memory", "cost_to_target_usd"] == 2.0


def test_a_failing_notebook_fails_the_run_naming_notebook_and_cell(tmp_path, capsys):
    pytest.importorskip("papermill")
    cfg = tmp_path / "broken.yaml"
    cfg.write_text(yaml.safe_dump({"notebook": "25_saturation.ipynb", "shape_preset": "no-such-preset", "hw": "trn1"}))
    assert cli_main(["reproduce", str(cfg), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "25_saturation.ipynb: cell" in err and "raised" in err
    index = (tmp_path / "out" / "index.md").read_text()
    assert "FAILED: cell" in index


def test_search_notebooks_read_a_run_store_without_an_endpoint(tmp_path):
    from accelopt_nb.reproduce.notebook import run_or_load_arms
    with pytest.raises(ConfigError, match="no endpoint to run them"):
        run_or_load_arms([{"name": "beam"}], ["matmul"], tmp_path, iterations=1, shape_preset="small")


def test_best_kernels_of_a_fake_run_raise_the_nkibench_table(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELOPT_CACHE_DIR", str(tmp_path / "cache"))
    from accelopt_nb.reproduce.nkibench_table import nkibench_table
    from accelopt_nb.reproduce.notebook import run_or_load_arms
    from accelopt_nb.reproduce.offline import fake_endpoint
    from accelopt_nb.reproduce.stores import best_kernels
    with fake_endpoint() as ep:
        curves = run_or_load_arms([{"name": "beam", "preset": "smoke"}], ["matmul"], tmp_path / "runs", iterations=1,
                                  shape_preset="small", base_url=ep["base_url"], model="fake-nki", price="free")
    assert curves["best_speedup"].iloc[-1] > 1.0
    best = best_kernels(tmp_path / "runs")
    assert list(best["problem"]) == ["matmul"] and best["speedup"].iloc[0] > 1.0
    table = nkibench_table("small", ["trn1"], best, problems=["matmul"]).iloc[0]
    assert table["best_pct_peak"] > table["baseline_pct_peak"] and table["paper_baseline_pct_peak"] == 61.65


@pytest.mark.slow
def test_reproduce_smoke_runs_every_notebook_offline_and_writes_every_figure(tmp_path, monkeypatch):
    pytest.importorskip("papermill")
    monkeypatch.setenv("ACCELOPT_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    assert cli_main(["reproduce", "--smoke", "--out", str(out)]) == 0
    index = (out / "index.md").read_text()
    assert f"{len(NOTEBOOKS)} of {len(NOTEBOOKS)} ran to the end" in index
    figures = read_manifest(out)
    made = {f["notebook"] for f in figures}
    assert {s.stem for s in NOTEBOOKS if s.kind == "reproduction"} <= made
    for f in figures:
        for ext in ("png", "svg", "csv"):
            assert (Path(f["dir"]) / f[ext]).stat().st_size > 0, f
        if f["notebook"].startswith("2"):
            # every reproduction figure with agent data says it is the fake model; the Mamba figure has no agent
            # kernel at smoke size (the fake model only rewrites matmul) and says that instead
            from accelopt_nb.reproduce.notebook import NO_AGENT
            expected = NO_AGENT if f["notebook"] == "24_human_experts" else FAKE_MODEL_LABEL
            assert f["model"] == expected, f
    for spec in NOTEBOOKS:
        nb = json.loads((out / spec.stem / spec.file).read_text())
        text = json.dumps([c.get("outputs", []) for c in nb["cells"]])
        if spec.kind == "teaching":
            assert "RIGHT (exercise" in text and "WRONG (exercise" not in text


def test_list_names_every_notebook(capsys):
    assert cli_main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(spec.name in out for spec in NOTEBOOKS) and "teaching" in out and "reproduction" in out
    assert "search_experiments" in out and "magics_and_panel" in out            # the tools are listed too


def _cost_config(tmp_path):
    """A cost experiment on the offline fake model with one arm whose model has no price."""
    cfg = tmp_path / "cost.yaml"
    cfg.write_text(yaml.safe_dump({
        "notebook": "22_cost.ipynb", "endpoint": "fake", "problems": ["matmul"], "shape_preset": "small",
        "iterations": 1, "unpriced_ok": False, "price": None,
        "arms": [{"name": "no-price", "preset": "smoke", "model": {"model": "fake-gpt-oss-120b"}}]}))
    return cfg


def test_a_cost_experiment_refuses_an_unpriced_model_before_anything_runs(tmp_path, capsys):
    pytest.importorskip("papermill")
    out = tmp_path / "out"
    assert cli_main(["reproduce", str(_cost_config(tmp_path)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "22_cost.ipynb: cell" in err and "arm 'no-price'" in err and "has no price" in err
    assert "--unpriced-ok" in err
    assert not list((out / "runs").glob("**/accelopt.sqlite"))   # no run started


@pytest.mark.slow
def test_unpriced_ok_runs_the_cost_experiment_and_its_figure_says_unpriced(tmp_path, monkeypatch):
    pytest.importorskip("papermill")
    monkeypatch.setenv("ACCELOPT_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    assert cli_main(["reproduce", str(_cost_config(tmp_path)), "--out", str(out), "--unpriced-ok"]) == 0
    [figure] = [f for f in read_manifest(out) if f["name"] == "cost"]
    table = pd.read_csv(Path(figure["dir"]) / figure["csv"])
    assert list(table["arm"]) == ["no-price"] and not table["priced"].any()
    assert table["total_cost_usd"].isna().all()               # unknown, never $0


def test_unpriced_ok_applies_to_cost_experiments_only():
    from accelopt_nb.reproduce.runner import allow_unpriced

    checkout = find_checkout()
    jobs = plan("paper", only=["cost", "beam_vs_sampling"], checkout=checkout)
    assert [j.params.get("unpriced_ok") for j in jobs] == [None, False]
    allow_unpriced(jobs)
    assert [j.params.get("unpriced_ok") for j in jobs] == [None, True]
