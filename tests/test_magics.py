"""`%accelopt` magics in a real IPython shell (no notebook server), against the fake model server."""
from __future__ import annotations

import json
import time

import pytest

IPython = pytest.importorskip("IPython")
from fakes.fake_nki_llm import FakeNKIModel, matmul_column_outer  # noqa: E402
from fakes.fake_openai_server import Fail, FakeOpenAIServer, Reply  # noqa: E402
from IPython.core.error import UsageError  # noqa: E402
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from traitlets.config import Config  # noqa: E402

import nkibench  # noqa: E402
from accelopt_nb.notebook.magics import MagicUsageError  # noqa: E402
from accelopt_nb.notebook.stepcell import StepSettings  # noqa: E402
from accelopt_nb.errors import ConfigError  # noqa: E402
from accelopt_nb.pyutil import free_port  # noqa: E402
from pg_fixtures import pg_server, pg_url  # noqa: E402,F401


@pytest.fixture
def ip(tmp_path, monkeypatch):
    """An IPython shell with history off and the extension loaded (jupysql's recipe)."""
    monkeypatch.setenv("ACCELOPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    cfg = Config()
    cfg.HistoryManager.enabled = False
    shell = InteractiveShell(config=cfg)
    shell.run_line_magic("load_ext", "accelopt_nb")
    yield shell
    InteractiveShell.clear_instance()


def _magics(ip):
    return ip.magics_manager.registry["AccelOptMagics"]


def _open(ip, url, run_dir, extra=""):
    return ip.run_line_magic("accelopt", f"open matmul --preset smoke --shapes small --base-url {url} "
                                         f"--model fake-nki --price gpt-oss-120b@groq --run-dir {run_dir} {extra}")


# ---- without a session ------------------------------------------------------------------------------
def test_profile_shows_percent_of_peak_and_percent_fields(ip):
    source = nkibench.get_problem("silu").baseline_source()
    view = ip.run_cell_magic("accelopt", "profile --problem silu --shapes small", source)
    assert view.result.correct and view.pct_peak is not None and 0 < view.pct_peak <= 100
    text, html = repr(view), view._repr_html_()
    assert "% of peak" in text and "-bound" in text
    dma = view.result.profile["dma_active_time_percent"]
    assert f"{100 * dma:.1f}%" in html          # a fraction shown as a percentage, rounded
    assert repr(dma) not in html                 # not the raw float
    from accelopt_nb.notebook.display import profile_rows
    assert ("latency", f"{view.result.latency_ms:.4g} ms") in profile_rows(view.result.profile)


def test_library_objects_display_as_html_once_loaded(ip):
    from accelopt_nb.evaluation import evaluate
    from accelopt_nb.perf import Profile

    result = evaluate("silu", nkibench.get_problem("silu").baseline_source(), preset="small", cache=False)
    fmt = ip.display_formatter.formatters["text/html"]
    assert "accelopt-result" in fmt(result) and "DMA active" in fmt(result)
    assert ("accelopt_nb.perf.profile", "Profile") in fmt.deferred_printers or Profile in fmt.type_printers


def test_load_ext_imports_no_simulator_model_or_search():
    """`%load_ext accelopt_nb` stays fast: the heavy layers load when a magic first needs them."""
    import subprocess
    import sys
    code = ("import sys\nfrom IPython.core.interactiveshell import InteractiveShell\n"
            "from traitlets.config import Config\nc = Config(); c.HistoryManager.enabled = False\n"
            "InteractiveShell(config=c).run_line_magic('load_ext', 'accelopt_nb')\n"
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('accelopt_nb', 'numpy', 'pandas', 'matplotlib', 'openai', 'nkibench'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "accelopt_nb.notebook.magics" in loaded
    heavy = [m for m in loaded if m.startswith(("accelopt_nb.sim", "accelopt_nb.perf", "accelopt_nb.search",
                                                "accelopt_nb.evaluation", "numpy", "pandas", "matplotlib",
                                                "openai", "nkibench"))]
    assert heavy == []


def test_profile_reports_a_broken_cell_with_its_line_counted_from_the_cell(ip):
    source = nkibench.get_problem("silu").baseline_source().replace("nl.add(e, 1.0)", "nl.add(e, 1.0")
    view = ip.run_cell_magic("accelopt", "profile --problem silu", source)
    assert view.result.status.value == "build_failed" and view.result.line is not None
    broken = next(i for i, line in enumerate(source.splitlines(), 1) if "nl.add(e, 1.0" in line)
    assert view.result.line == broken                   # the kernel's own line number ...
    cell_line = broken + 1                              # ... is one more in the cell, under the %%accelopt line
    assert "#b00020" in view._repr_html_() and f"cell line {cell_line}" in view._repr_html_()
    assert f"cell line {cell_line}" in repr(view)


def test_help_docstring_and_usage_errors_are_one_line(ip, capsys):
    assert "%accelopt help" in ip.find_line_magic("accelopt").__doc__
    assert "--timeline" in ip.run_line_magic("accelopt", "help profile").text
    assert "YAML" in ip.run_line_magic("accelopt", "step --help").text
    assert "subcommands" in ip.run_line_magic("accelopt", "").text
    with pytest.raises(UsageError, match="unknown %accelopt subcommand 'frobnicate'"):
        ip.run_line_magic("accelopt", "frobnicate")
    with pytest.raises(UsageError, match="--problem"):
        ip.run_cell_magic("accelopt", "profile", "def kernel(): pass")
    with pytest.raises(UsageError, match="no open session"):
        ip.run_line_magic("accelopt", "step")
    ip.run_cell("%accelopt step")                 # what a person sees: one line, no traceback
    seen = capsys.readouterr()
    lines = (seen.out + seen.err).strip().splitlines()
    assert len(lines) == 1 and "no open session: start one with %accelopt open PROBLEM" in lines[0]
    with pytest.raises(MagicUsageError):          # --debug keeps the real exception
        ip.run_line_magic("accelopt", "step --debug")


def test_tab_completion(ip):
    m = _magics(ip)
    assert "leaderboard" in m.complete("%accelopt ") and "profile" in m.complete("%%accelopt ")
    assert "matmul" in m.complete("%accelopt open ")
    assert "silu" in m.complete("%%accelopt profile --problem ")
    assert "--timeline" in m.complete("%%accelopt profile --ti")
    assert m.complete("%accelopt step ") == ["plan", "execute", "evaluate", "select", "summarize"]
    from IPython.core.completer import provisionalcompleter
    with provisionalcompleter():
        completions = [c.text for c in ip.Completer.completions("%accelopt lea", len("%accelopt lea"))]
    assert "leaderboard" in completions


def test_step_cell_settings_are_validated():
    s = StepSettings.from_yaml("phase: plan\nN: 3\nplan: Keep B resident.\n")
    assert s.phase == "plan" and s.N == 3 and s.plans == ["Keep B resident."]
    with pytest.raises(ConfigError, match="unknown setting"):
        StepSettings.from_yaml("phase: plan\nbeam: 3\n")
    with pytest.raises(ConfigError, match="N must be a positive integer"):
        StepSettings.from_yaml("N: 0\n")
    with pytest.raises(ConfigError, match="plans belong to the plan phase"):
        StepSettings.from_yaml("phase: execute\nplans: [x]\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        StepSettings.from_yaml("phase: [plan\n")


def test_endpoint_default_comes_from_the_line_then_config_then_environment():
    from accelopt_nb.notebook.endpoint import resolve

    env = {"ACCELOPT_BASE_URL": "http://env/v1", "ACCELOPT_MODEL": "env-model", "ACCELOPT_PRICE": "free"}
    conf = {"base_url": "http://conf/v1", "model": "conf-model", "model_preset": None}
    line = resolve({"model_preset": "gpt-oss-120b"}, conf, env)
    assert line.settings == {"model_preset": "gpt-oss-120b"} and line.source == "the command line"
    config = resolve({"price": "gpt-oss-120b@groq"}, conf, env)  # a price alone refines the default model
    assert config.settings == {"base_url": "http://conf/v1", "model": "conf-model", "price": "gpt-oss-120b@groq"}
    environment = resolve({}, {}, env)
    assert environment.settings == {"base_url": "http://env/v1", "model": "env-model", "price": "free"}
    assert "environment" in environment.source
    half = resolve({}, {"base_url": "http://conf/v1"}, env)     # a half-set %config names no model: not mixed
    assert half.settings["model"] == "env-model" and half.settings["base_url"] == "http://env/v1"
    assert not resolve({}, {}, {}).names_a_model


def test_live_progress_leaves_readable_text_for_static_viewers():
    from accelopt_nb.notebook.progress import LiveProgress
    from accelopt_nb.search.events import ProgressEvent

    progress = LiveProgress(widgets=True)
    progress(ProgressEvent("iteration", 0, "start", problem="matmul"))
    progress(ProgressEvent("plan", 0, "start", total=2))
    progress(ProgressEvent("plan", 0, "call_done", done=1, total=2, failed=1))
    progress(ProgressEvent("plan", 0, "end", done=2, total=2, failed=1, message="1 plans, 1 failed"))
    bundle = progress._bundle()
    assert "application/vnd.jupyter.widget-view+json" in bundle            # live in JupyterLab ...
    assert "HBox" not in bundle["text/plain"] and "IntProgress" not in bundle["text/plain"]
    assert "[matmul] iteration 0" in bundle["text/plain"] and "1 plans, 1 failed" in bundle["text/plain"]
    assert "1 plans, 1 failed" in bundle["text/html"] and "accelopt-progress" in bundle["text/html"]


def test_fake_model_in_one_line_then_open_show_best_close(ip, tmp_path):
    shown = ip.run_line_magic("accelopt", "fake-model")
    assert "not a real LLM" in shown.text and shown.value.startswith("http://127.0.0.1:")
    try:
        check = ip.run_line_magic("accelopt", "llm check")                  # the default endpoint is the fake one
        assert check.value.ok and "fake-nki" in check.text
        opened = ip.run_line_magic("accelopt", f"open matmul --preset smoke --shapes small --run-dir {tmp_path / 'a'}")
        session = ip.user_ns["accelopt_session"]
        assert "from %config AccelOptMagics" in opened.text and session.clients["planner"].config.model == "fake-nki"
        # a failed open (a typo in the URL) keeps the session you were working in
        with pytest.raises(UsageError, match="cannot reach the LLM endpoint"):
            _open(ip, f"http://127.0.0.1:{free_port()}/v1", tmp_path / "b")
        assert ip.user_ns["accelopt_session"] is session and _magics(ip).session is session
        assert ip.run_line_magic("accelopt", "status").value is session
        base = ip.run_line_magic("accelopt", "show baseline")
        assert "status: correct" in base.text and "def kernel" in base.text and "<table>" in base.html
        with pytest.raises(UsageError, match="no kernel 'nope'"):
            ip.run_line_magic("accelopt", "show nope")
        saved = ip.run_line_magic("accelopt", f"best --save {tmp_path}")
        assert saved.value == tmp_path / f"best_kernel-{session.run_id}.py"
        assert saved.value.read_text() == session.best.source
        closed = ip.run_line_magic("accelopt", "close")
        assert "--resume" in closed.text and "accelopt_session" not in ip.user_ns
        with pytest.raises(UsageError, match="no open session"):
            ip.run_line_magic("accelopt", "status")
        reopened = ip.run_line_magic("accelopt", f"open matmul --resume --run-dir {tmp_path / 'a'}")
        assert reopened.value.run_id == session.run_id
        # resuming with another model is refused unless asked for, and then recorded in the run
        other = f"--base-url {shown.value} --model fake-gpt-oss-120b"
        with pytest.raises(UsageError, match="was made with model 'fake-nki'.*--allow-model-change"):
            ip.run_line_magic("accelopt", f"open matmul --resume --run-dir {tmp_path / 'a'} {other}")
        assert _magics(ip).session is reopened.value                   # ... and the open session stays
        changed = ip.run_line_magic("accelopt", f"open matmul --resume --run-dir {tmp_path / 'a'} {other} "
                                                "--allow-model-change")
        assert changed.value.clients["planner"].config.model == "fake-gpt-oss-120b"
        report = ip.run_line_magic("accelopt", "report --no-files")
        assert "model changed from 'fake-nki'" in report.text and "to 'fake-gpt-oss-120b'" in report.text
    finally:
        ip.run_line_magic("accelopt", "fake-model --stop")
    with pytest.raises(UsageError, match="needs a model"):
        ip.run_line_magic("accelopt", f"open matmul --run-dir {tmp_path / 'c'}")


def _store_round_trip(ip, tmp_path, store: str, location: str) -> None:
    """Open a run whose store is not in its run directory, close it, reopen it from the hint's line."""
    shown = ip.run_line_magic("accelopt", "fake-model")
    try:
        run_dir = tmp_path / "run"
        opened = ip.run_line_magic("accelopt", f"open matmul --preset smoke --shapes small --run-dir {run_dir} "
                                               f"--store {store}")
        session = opened.value
        assert session.store.location == location and not (run_dir / "accelopt.sqlite").exists()
        ip.run_line_magic("accelopt", "report")               # files go to the run directory, not the store's
        assert (run_dir / f"report-{session.run_id}.json").is_file()
        assert (run_dir / f"best_kernel-{session.run_id}.py").read_text() == session.best.source
        closed = ip.run_line_magic("accelopt", "close").text
        assert "--store " in closed and f"--run-id {session.run_id}" in closed and location in closed
        reopened = ip.run_line_magic("accelopt", f"open matmul --resume --run-dir {run_dir} --store {store} "
                                                 f"--run-id {session.run_id}")
        assert reopened.value.run_id == session.run_id and reopened.value.state.has_baseline
        assert "not a real LLM" in shown.text
    finally:
        ip.run_line_magic("accelopt", "fake-model --stop")


def test_open_with_a_store_elsewhere_keeps_files_in_the_run_dir(ip, tmp_path):
    store = tmp_path / "shared" / "runs.sqlite"
    store.parent.mkdir()
    _store_round_trip(ip, tmp_path, str(store), str(store))


@pytest.mark.slow
def test_open_with_a_postgres_store_names_the_run_to_resume(ip, tmp_path, pg_url):
    from accelopt_nb.store import RunStore

    location = RunStore(pg_url).location
    _store_round_trip(ip, tmp_path, pg_url, location)
    ip.run_line_magic("accelopt", "fake-model")
    try:   # a database holds everyone's runs: "the latest" is not yours to resume
        with pytest.raises(UsageError, match="name the run to resume"):
            ip.run_line_magic("accelopt", f"open matmul --resume --run-dir {tmp_path / 'run'} --store {pg_url}")
    finally:
        ip.run_line_magic("accelopt", "fake-model --stop")


@pytest.mark.slow
def test_a_wrong_model_name_is_named_the_404_kept(ip, tmp_path):
    from accelopt_nb.reproduce.offline import fake_responder

    with FakeOpenAIServer(models=["fake-nki"], responder=fake_responder()) as srv:
        opened = ip.run_line_magic("accelopt", f"open matmul --preset smoke --shapes small --base-url {srv.url} "
                                               f"--model fake-nkii --price free --run-dir {tmp_path / 'run'}")
        assert "model 'fake-nkii' is not listed" in opened.text          # the preflight's warning, shown
        with pytest.raises(UsageError, match="HTTP 404"):                 # the server's answer, kept
            ip.run_line_magic("accelopt", "step plan")


def test_llm_presets_and_prices(ip):
    presets = ip.run_line_magic("accelopt", "llm presets")
    assert "gpt-oss-120b" in presets.text and "claude-sonnet-4" in presets.text
    prices = ip.run_line_magic("accelopt", "llm prices")
    assert "USD per 1M tokens" in prices.text and "gpt-oss-120b@groq" in prices.text
    assert "check" in _magics(ip).complete("%accelopt llm ")


def test_endpoint_default_from_config_magic_and_environment(ip, monkeypatch):
    ip.run_line_magic("config", 'AccelOptMagics.base_url = "http://127.0.0.1:9/v1"')
    ip.run_line_magic("config", 'AccelOptMagics.model = "from-config"')
    assert _magics(ip).endpoint_defaults()["model"] == "from-config"
    with pytest.raises(UsageError, match="cannot reach the LLM endpoint http://127.0.0.1:9/v1"):
        ip.run_line_magic("accelopt", "open matmul")
    ip.run_line_magic("config", "AccelOptMagics.base_url = None")
    ip.run_line_magic("config", "AccelOptMagics.model = None")
    monkeypatch.setenv("ACCELOPT_BASE_URL", "http://127.0.0.1:7/v1")
    monkeypatch.setenv("ACCELOPT_MODEL", "from-env")
    with pytest.raises(UsageError, match="cannot reach the LLM endpoint http://127.0.0.1:7/v1"):
        ip.run_line_magic("accelopt", "open matmul")


# ---- failures are loud -----------------------------------------------------------------------------------
def test_open_against_a_dead_endpoint_fails_in_seconds(ip, tmp_path):
    start = time.monotonic()
    with pytest.raises(UsageError, match="EndpointUnreachableError: cannot reach the LLM endpoint"):
        _open(ip, f"http://127.0.0.1:{free_port()}/v1", tmp_path / "run")
    assert time.monotonic() - start < 15
    assert not (tmp_path / "run").exists()       # nothing was started


@pytest.mark.slow
def test_a_step_whose_calls_fail_says_so_in_red(ip, tmp_path):
    calls = {"n": 0}

    def responder(body):
        calls["n"] += 1
        return Fail(400, "model overloaded") if calls["n"] % 2 else Reply("**Plan:** widen the tiles to 1024.")

    with FakeOpenAIServer(models=["fake-nki"], responder=responder) as srv:
        _open(ip, srv.url, tmp_path / "run")
        shown = ip.run_line_magic("accelopt", "step plan")
        # named by its cause: the server refused the call (HTTP 400), a model error, not "the LLM failed"
        assert "FAILED: LLM calls: 1 model error" in shown.text and "model overloaded" in shown.text
        assert "accelopt-failure" in shown.html and "#b00020" in shown.html
        # a step whose calls all fail is an error, in one line, and is not marked done
        srv.responder = lambda body: Fail(400, "model overloaded")
        with pytest.raises(UsageError, match="StepFailedError: execute step of iteration 0: all 1 LLM calls failed"):
            ip.run_line_magic("accelopt", "step execute")
        assert ip.user_ns["accelopt_session"].next_phase == "execute"


def test_kernel_failures_are_named_as_kernel_failures_not_llm_ones(ip, tmp_path):
    """A hand-written kernel that does not build, another the static check rejects: no LLM was involved."""
    ip.run_line_magic("accelopt", "fake-model")
    try:
        ip.run_line_magic("accelopt", f"open matmul --preset smoke --shapes small --run-dir {tmp_path / 'r'}")
        ip.run_cell_magic("accelopt", "plan", "Write it wrong.\n---\nWrite it worse.")
        plans = [p.plan_id for p in ip.user_ns["accelopt_session"].iteration_plans()]
        good = nkibench.get_problem("matmul").baseline_source()
        import yaml
        kernels = {plans[0]: good.replace("def kernel(lhs, rhs):", "def kernel(lhs, rhs)"),   # a syntax error
                   plans[1]: "import os\n" + good}                                             # a forbidden import
        ip.run_cell_magic("accelopt", "step", yaml.safe_dump({"phase": "execute", "llm": False, "kernels": kernels}))
        shown = ip.run_line_magic("accelopt", "step evaluate")
        first_line = shown.text.split("\n")[0]
        assert "LLM" not in first_line and "FAILED" not in first_line and first_line.startswith("kernels: ")
        assert "1 kernel build failed" in shown.text and "1 kernel rejected" in shown.text
        assert "accelopt-failure" in shown.html and "kernel build failed" in shown.html
    finally:
        ip.run_line_magic("accelopt", "fake-model --stop")


# ---- a whole session by hand ---------------------------------------------------------------------------
@pytest.mark.slow
def test_drive_a_session_step_by_step_with_human_input(ip, tmp_path):
    model = FakeNKIModel(plans=["Column blocks outside row blocks, each block of B loaded once: COLUMN BLOCKS OUTER."], rewrites=[("COLUMN BLOCKS OUTER", matmul_column_outer)])
    with FakeOpenAIServer(models=["fake-nki"], responder=model.responder) as srv:
        shown = _open(ip, srv.url, tmp_path / "run")
        session = ip.user_ns["accelopt_session"]
        assert shown.value is session and "baseline" in shown.text
        # the person plays the planner for iteration 0, in a step cell that records N ...
        plans = ip.run_cell_magic("accelopt", "step", "phase: plan\nN: 1\nplans:\n  - Hoist B (HOISTED).\n"
                                                      "  - 'Column blocks outside row blocks, each block of B loaded once: COLUMN BLOCKS OUTER.'\n")
        assert len(plans.value) == 2 and model.calls["planner"] == 0 and "FAILED" not in plans.text
        assert session.config.plans_per_kernel == 2          # the step's settings held for that step only
        assert "Hoist B" in ip.run_line_magic("accelopt", "plans").text
        first = plans.value["plan_id"].iloc[0]
        # ... writes the kernel for the first plan; the executor LLM writes the second plan's
        kernels = ip.run_cell_magic("accelopt", f"kernel {first}", matmul_column_outer("")).value
        assert len(kernels) == 2 and model.calls["executor"] == 1
        evaluated = ip.run_line_magic("accelopt", "step evaluate").value
        assert (evaluated["status"] == "correct").any()
        ip.run_line_magic("accelopt", "step select")
        ip.run_cell_magic("accelopt", "step", "phase: summarize\nlessons:\n  - title: Resident B\n"
                                              "    summary: Load **B** once.\n")
        assert "<strong>B</strong>" in ip.run_line_magic("accelopt", "memory").html   # Markdown rendered
        board = ip.run_line_magic("accelopt", "leaderboard")
        assert board.value["speedup"].iloc[0] > 1.0 and "x" in board.text and "%" in board.text
        diff = ip.run_line_magic("accelopt", "diff")
        page = diff._repr_html_()
        assert "baseline" in repr(diff) and ("diff_add" in page or "diff_chg" in page)
        with pytest.raises(UsageError, match="no kernel 'nope'"):
            ip.run_line_magic("accelopt", "diff baseline nope")
        with pytest.raises(UsageError, match="the next step is plan"):
            ip.run_line_magic("accelopt", "step select")
        saved = ip.run_line_magic("accelopt", f"memory save {tmp_path / 'mem.json'}")
        assert json.loads((tmp_path / "mem.json").read_text()) and "saved 1" in saved.text
        ip.run_line_magic("accelopt", f"memory load {tmp_path / 'mem.json'}")
        assert len(session.memory) == 1
        report = ip.run_line_magic("accelopt", "run")          # finish the smoke preset
        assert report.value.speedup > 1.0 and report.value.iterations_done == 2
        assert (tmp_path / "run" / f"best_kernel-{session.run_id}.py").read_text() == report.value.best_source
        assert json.loads((tmp_path / "run" / f"report-{session.run_id}.json").read_text())["speedup"] > 1.0
        import matplotlib
        matplotlib.use("Agg")
        ip.run_line_magic("accelopt", "plot")


def test_experiment_arms_check_their_endpoint_before_any_run(tmp_path):
    from accelopt_nb.experiments import run_arms

    dead = {"base_url": f"http://127.0.0.1:{free_port()}/v1", "model": "m", "price": "gpt-oss-120b@groq"}
    start = time.monotonic()
    with pytest.raises(Exception, match="cannot reach the LLM endpoint"):
        run_arms([{"name": "beam"}], ["matmul"], tmp_path / "exp", default_model=dead, progress=False)
    assert time.monotonic() - start < 15 and not (tmp_path / "exp").exists()


@pytest.mark.slow
def test_papermill_run_without_a_model_fails_with_the_reason(tmp_path):
    papermill = pytest.importorskip("papermill")
    from pathlib import Path
    notebooks = Path(__file__).resolve().parent.parent / "notebooks"
    with pytest.raises(papermill.PapermillExecutionError, match="cannot reach the LLM endpoint"):
        papermill.execute_notebook(str(notebooks / "10_search_experiments.ipynb"), str(tmp_path / "out.ipynb"),
                                   cwd=str(tmp_path), kernel_name="python3", progress_bar=False,
                                   parameters={"base_url": f"http://127.0.0.1:{free_port()}/v1",
                                               "root": str(tmp_path / "runs"), "out_dir": str(tmp_path / "fig")})
