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


def _parameters_cell(path: Path) -> str:
    """The source of a notebook's cell tagged ``parameters`` (read as JSON: nbformat's schema validation of every
    notebook, twice, was most of this test's time)."""
    cells = json.loads(path.read_text())["cells"]
    cell = next(c for c in cells if "parameters" in c.get("metadata", {}).get("tags", []))
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def test_every_notebook_has_a_smoke_and_a_paper_config_whose_keys_are_its_parameters():
    checkout = find_checkout()
    for mode in ("smoke", "paper"):
        jobs = plan(mode, checkout=checkout)
        assert [j.spec.file for j in jobs] == [s.file for s in NOTEBOOKS if mode in s.modes]
        for job in jobs:
            source = _parameters_cell(checkout / "notebooks" / job.spec.file)
            names = {line.split("=")[0].strip() for line in source.splitlines() if "=" in line and not line.startswith(" ")}
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


def test_figures_state_their_provenance_on_the_figure_in_the_manifest_and_in_the_index(tmp_path):
    from accelopt_nb.reproduce.figures import Provenance
    from accelopt_nb.reproduce.runner import Job, Outcome, spec_of, write_index

    prov = Provenance(model="none", endpoint="none", shapes="small", fidelity="trn1 performance model")
    sink = FigureSink(tmp_path / "23_nkibench_table", "23_nkibench_table", "no agent", prov)
    fig, ax = new_figure()
    ax.bar([0], [1])
    sink.save(fig, "table", pd.DataFrame({"x": [0]}))
    assert any(t.get_text() == prov.text() for t in fig.texts)          # on the figure itself
    [entry] = read_manifest(tmp_path)
    assert entry["provenance"] == prov.to_dict()
    job = Job(spec_of("nkibench_table"), tmp_path / "23_nkibench_table_paper.yaml",
              {"model": "openai/gpt-oss-120b"})                          # the config names a model ...
    outcome = Outcome(job, True, 1.0, tmp_path / "23_nkibench_table" / "x.ipynb", figures=read_manifest(tmp_path))
    index = write_index([outcome], tmp_path, mode="paper", seconds=1.0, checkout=tmp_path).read_text()
    assert "- model: none" in index and "gpt-oss-120b" not in index.split("settings")[0]   # ... the figure used none
    assert "model: none · endpoint: none · shapes: small · fidelity: trn1 performance model" in index


def test_arms_get_distinct_styles_and_identical_curves_say_so():
    from accelopt_nb.reproduce.figures import arm_styles, same_as
    from accelopt_nb.reproduce.search_figures import plot_arm_lines

    styles = arm_styles(["a", "b", "c", "d"])
    for key in ("color", "marker", "linestyle"):
        assert len({s[key] for s in styles.values()}) == 4
    assert same_as({"a": [(0, 1.0), (1, 1.5)], "b": [(0, 1.0), (1, 1.5)], "c": [(0, 1.0)]}) == {"b": "a"}
    g = pd.DataFrame({"arm": ["beam", "beam", "sampling", "sampling"], "iteration": [0, 1, 0, 1],
                      "geomean_speedup": [1.0, 1.4, 1.0, 1.4]})
    fig, ax = new_figure()
    plot_arm_lines(ax, g, "iteration")
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["beam", "sampling (same as beam)"]
    assert ax.get_lines()[0].get_linestyle() != ax.get_lines()[1].get_linestyle()


def test_mamba_figure_puts_measured_trn1_beside_the_model_and_says_how_far_apart():
    from accelopt_nb.reproduce.humans import COLUMNS, model_vs_measured, plot_humans

    rows = [  # the model's numbers as the performance model gave them at the paper's shape (rounded)
        {"kernel": "v1 = baseline", "kind": "baseline", "correct": True, "pct_peak": 37.3, "pct_peak_low": 14.7,
         "pct_peak_high": 70.6, "measured_pct_peak": 28.4, "kernel_class": "elementwise"},
        {"kernel": "human v2", "kind": "human", "correct": True, "pct_peak": 47.6, "pct_peak_low": 33.1,
         "pct_peak_high": 63.7, "kernel_class": "fused"},
        {"kernel": "human v3 (best)", "kind": "human", "correct": True, "pct_peak": 67.2, "pct_peak_low": 60.0,
         "pct_peak_high": 75.0, "measured_pct_peak": 52.7, "kernel_class": "fused"},
        {"kernel": "AccelOpt best (paper)", "kind": "paper_agent", "measured_pct_peak": 54.6}]
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["speedup"] = df["pct_peak"] / df["pct_peak"].iloc[0]
    df["measured_speedup"] = df["measured_pct_peak"] / df["measured_pct_peak"].iloc[0]
    both = model_vs_measured(df).set_index("kernel")
    assert both.loc["v1 = baseline", "inside_interval"] and not both.loc["human v3 (best)", "inside_interval"]
    fig = plot_humans(df, _sink_for_tests(), hw="trn1", shape_label="(M=7168, C=256, S=16)")
    ax = fig.axes[0]
    note = next(t.get_text() for t in ax.texts if t.get_text().startswith("model vs measured"))
    assert "v1 +31%" in note and "v3 +28%" in note and "v3 outside the model's error bar" in note
    assert "optimistic" in note and "1.80x (model) vs 1.86x (measured)" in note
    labels = ax.get_legend_handles_labels()[1]
    assert any("measured on trn1" in x for x in labels) and any("error bar" in x for x in labels)
    assert [t.get_text() for t in ax.get_xticklabels()][0] == "v1 = baseline"


def _sink_for_tests():
    import tempfile
    return FigureSink(Path(tempfile.mkdtemp(prefix="accelopt_fig_")), "test", None)


def test_saturation_rows_never_overlap_and_say_when_traffic_is_not_the_limit():
    from accelopt_nb.reproduce.saturation import COLUMNS, plot_saturation

    names = [f"p{i}" for i in range(14)]
    df = pd.DataFrame([{"problem": p, "hw": "trn1", "roofline_bound": "memory", "searched": p == "p3",
                        "headroom_before": 2 + i / 10, "headroom_before_low": 1.5, "headroom_before_high": 3.0 + i,
                        "headroom_after": 1.8, "headroom_after_low": 1.4, "headroom_after_high": 2.2,
                        "pct_peak_before": 50 - i, "pct_peak_after": 55, "traffic_eff_before": 1.0,
                        "traffic_eff_after": 1.0, "paper_headroom_before": float("nan")} for i, p in enumerate(names)],
                      columns=COLUMNS)
    fig = plot_saturation(df, _sink_for_tests(), preset="small")
    left, right = fig.axes[0], fig.axes[1]
    ticks = [t.get_text() for t in left.get_yticklabels()]
    assert len(ticks) == 14 and len(set(left.get_yticks())) == 14 and "p3 ★ [memory]" in ticks
    assert list(right.get_yticks()) == list(left.get_yticks())           # one row per problem on both sides
    assert any("minimum HBM bytes" in t.get_text() for t in right.texts)


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


@pytest.mark.slow     # runs the notebook in a fresh kernel (papermill)
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
    table = nkibench_table("small", ["trn1"], best, problems=["matmul", "silu"]).set_index("problem")
    mm, silu = table.loc["matmul"], table.loc["silu"]
    assert mm["searched"] and mm["best_pct_peak"] > mm["baseline_pct_peak"]
    assert mm["baseline_pct_low"] < mm["baseline_pct_peak"] < mm["baseline_pct_high"]      # the model's error bar
    assert not silu["searched"] and pd.isna(silu["best_pct_peak"])    # never searched: no "best" that is its baseline
    # the paper measured its kernels at its shapes: nothing is set beside small shapes
    assert not mm["paper_comparable"] and pd.isna(mm["paper_baseline_pct_peak"])
    from accelopt_nb.reproduce.nkibench_table import paper_shapes_match
    assert paper_shapes_match("matmul", "paper") and not paper_shapes_match("matmul", "small")
    from accelopt_nb.reproduce.notebook import kernels_provenance
    prov = kernels_provenance(tmp_path / "runs", best, shapes="small", fidelity="trn1 performance model")
    assert prov.model == "fake-nki" and prov.endpoint.startswith("http://127.0.0.1:")
    none = kernels_provenance(tmp_path / "runs", best.iloc[0:0], shapes="small", fidelity="f")
    assert (none.model, none.endpoint) == ("none", "none")


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
        if spec.kind == "reproduction":    # the figure shows in the notebook too, not only in its files
            assert '"image/png"' in text, spec.file
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


@pytest.mark.slow     # runs the notebook in a fresh kernel (papermill)
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


# ---- failures named by their cause, in the index and the exit status ------------------------------------
def _search_config(tmp_path, url: str, model: str, arms: list, model_preset: str | None = None) -> Path:
    cfg = tmp_path / "search.yaml"
    endpoint = {"model_preset": model_preset} if model_preset else {"base_url": url, "model": model, "price": "free"}
    cfg.write_text(yaml.safe_dump({"notebook": "20_beam_vs_sampling.ipynb", **endpoint, "problems": ["matmul"],
                                   "shape_preset": "small", "iterations": 1, "arms": arms}))
    return cfg


@pytest.mark.slow
def test_a_wrong_model_name_is_reported_as_a_model_error_with_its_404(tmp_path, monkeypatch, capsys):
    pytest.importorskip("papermill")
    from accelopt_nb.fake_model.server import FakeOpenAIServer
    from accelopt_nb.reproduce.offline import fake_responder
    from accelopt_nb.reproduce.runner import EXIT_MODEL

    monkeypatch.setenv("ACCELOPT_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    with FakeOpenAIServer(models=["fake-nki"], responder=fake_responder()) as srv:
        cfg = _search_config(tmp_path, srv.url, "fake-nkii", [{"name": "beam", "preset": "smoke"}])
        assert cli_main(["reproduce", str(cfg), "--out", str(out)]) == EXIT_MODEL
    seen = capsys.readouterr()
    assert "model 'fake-nkii' is not listed" in seen.out           # the preflight's warning, shown
    assert "HTTP 404" in seen.err and "no endpoint to run them" not in seen.err
    index = (out / "index.md").read_text()
    assert "model 'fake-nkii' is not listed" in index and "**NOT COMPLETE**" in index and "model error" in index
    assert "exit status 4" in index


@pytest.mark.slow
def test_an_arm_that_lost_planner_calls_is_not_complete_and_the_run_says_why(tmp_path, monkeypatch, capsys):
    pytest.importorskip("papermill")
    import threading

    from accelopt_nb.fake_model.nki_model import role_of
    from accelopt_nb.fake_model.server import Fail, FakeOpenAIServer
    from accelopt_nb.reproduce.offline import fake_responder
    from accelopt_nb.reproduce.runner import EXIT_TRANSPORT

    monkeypatch.setenv("ACCELOPT_CACHE_DIR", str(tmp_path / "cache"))
    answer, lock, planner_requests = fake_responder(), threading.Lock(), [0]

    def flaky(body):  # one call at a time: the first two planner calls get no answer through all 6 attempts
        if role_of(body) == "planner":
            with lock:
                planner_requests[0] += 1
                if planner_requests[0] <= 12:
                    return Fail(503, "upstream overloaded", retry_after=0)
        return answer(body)

    out = tmp_path / "out"
    arm = {"name": "beam + memory", "preset": "smoke",
           # Half the step's calls may be lost and the step still ends (the default, 0, leaves it open for a resume):
           # the iteration finishes with 2 of 4 plans, and the figure drawn from it must say it is incomplete.
           "overrides": {"plans_per_kernel": 4, "runtime.llm_concurrency": 1,
                         "runtime.transport_failures_allowed": 0.5}}
    with FakeOpenAIServer(models=["fake-nki"], responder=flaky) as srv:
        # Six attempts and no retry window (the default rides out a 300 s outage): the two calls fail for good.
        preset = tmp_path / "flaky.yaml"
        preset.write_text(yaml.safe_dump({"model": "fake-nki", "base_url": srv.url, "price": "free",
                                          "retry": {"max_attempts": 6, "retry_for_s": 0}}))
        cfg = _search_config(tmp_path, srv.url, "fake-nki", [arm], model_preset=str(preset))
        assert cli_main(["reproduce", str(cfg), "--out", str(out)]) == EXIT_TRANSPORT
    index = (out / "index.md").read_text()
    assert "search runs: 0 of 1 complete" in index and "**NOT COMPLETE**" in index
    assert "2 LLM transport" in index and "upstream overloaded" in index and "exit status 3" in index
    [figure] = read_manifest(out)
    assert figure["incomplete"].startswith("INCOMPLETE: beam + memory/matmul")   # the figure says so too
    assert "run the same command again" in capsys.readouterr().err
