"""`%accelopt` magics in a real IPython shell (no notebook server), against the fake model server."""
from __future__ import annotations

import pytest

IPython = pytest.importorskip("IPython")
from fakes.fake_nki_llm import FakeNKIModel, matmul_resident_rhs  # noqa: E402
from fakes.fake_openai_server import FakeOpenAIServer  # noqa: E402
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from traitlets.config import Config  # noqa: E402

import nkibench  # noqa: E402
from accelopt_nb.magics import MagicUsageError  # noqa: E402


@pytest.fixture
def ip(tmp_path, monkeypatch):
    """An IPython shell with history off, the extension loaded, and errors raised (jupysql's recipe)."""
    monkeypatch.setenv("ACCELOPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    cfg = Config()
    cfg.HistoryManager.enabled = False
    shell = InteractiveShell(config=cfg)
    shell.run_line_magic("load_ext", "accelopt_nb")
    yield shell
    InteractiveShell.clear_instance()


def test_profile_a_kernel_written_in_a_cell(ip):
    source = nkibench.get_problem("silu").baseline_source()
    shown = ip.run_cell_magic("accelopt", "profile --problem silu --preset small", source)
    result = shown.value
    assert result.status.value == "correct" and result.latency_ms > 0
    assert "status: correct" in shown.text and "hbm_read_bytes" in shown.text
    assert "text/html" in shown._repr_mimebundle_()


def test_profile_reports_a_broken_cell_with_its_line(ip):
    source = nkibench.get_problem("silu").baseline_source().replace("nl.add(e, 1.0)", "nl.add(e, 1.0")
    shown = ip.run_cell_magic("accelopt", "profile --problem silu", source)
    assert shown.value.status.value == "build_failed" and shown.value.line is not None


def test_usage_errors_are_clear(ip):
    with pytest.raises(MagicUsageError, match="unknown %accelopt subcommand"):
        ip.run_line_magic("accelopt", "frobnicate")
    with pytest.raises(MagicUsageError, match="--problem"):
        ip.run_cell_magic("accelopt", "profile", "def kernel(): pass")
    with pytest.raises(MagicUsageError, match="no open session"):
        ip.run_line_magic("accelopt", "step")


@pytest.mark.slow
def test_drive_a_session_step_by_step_with_human_input(ip, tmp_path):
    model = FakeNKIModel(plans=["Keep B resident in SBUF: RESIDENT."], rewrites=[("RESIDENT", matmul_resident_rhs)])
    with FakeOpenAIServer(models=["fake-nki"], responder=model.responder) as srv:
        shown = ip.run_line_magic("accelopt", f"open matmul --preset smoke --shape-preset small "
                                              f"--base-url {srv.url} --model fake-nki --price gpt-oss-120b@groq "
                                              f"--run-dir {tmp_path / 'run'}")
        session = ip.user_ns["accelopt_session"]
        assert shown.value is session and "baseline" in shown.text
        # the person plays the planner for iteration 0 ...
        plans = ip.run_cell_magic("accelopt", "plan", "Hoist B (RESIDENT).\n---\nKeep B resident in SBUF: RESIDENT.")
        assert len(plans.value) == 2 and model.calls["planner"] == 0
        first = plans.value["plan_id"].iloc[0]
        # ... writes the kernel for the first plan; the executor LLM writes the second plan's
        kernels = ip.run_cell_magic("accelopt", f"kernel {first}", matmul_resident_rhs("")).value
        assert len(kernels) >= 2 and model.calls["executor"] >= 1
        evaluated = ip.run_line_magic("accelopt", "step evaluate").value
        assert (evaluated["status"] == "correct").any()
        ip.run_line_magic("accelopt", "step select")
        ip.run_line_magic("accelopt", "step summarize")
        status = ip.run_line_magic("accelopt", "status").text
        assert "x)" in status and session.best.kernel_id != "baseline"
        report = ip.run_line_magic("accelopt", "run").value                   # finish the smoke preset
        assert report.speedup > 1.0 and report.iterations_done >= 1
        assert ip.run_line_magic("accelopt", "memory").value is not None


@pytest.mark.slow
def test_panel_buttons_drive_the_session(ip, tmp_path):
    pytest.importorskip("ipywidgets")
    model = FakeNKIModel(plans=["Keep B resident in SBUF: RESIDENT."], rewrites=[("RESIDENT", matmul_resident_rhs)])
    with FakeOpenAIServer(models=["fake-nki"], responder=model.responder) as srv:
        ip.run_line_magic("accelopt", f"open matmul --preset smoke --shape-preset small --base-url {srv.url} "
                                      f"--model fake-nki --price gpt-oss-120b@groq --run-dir {tmp_path / 'run'}")
        panel = ip.run_line_magic("accelopt", "panel")
        session = panel.session
        assert not panel.phase_buttons["plan"].disabled and panel.phase_buttons["execute"].disabled
        panel.plans_text.value = "Keep B resident (RESIDENT)."
        panel.plans_button.click()                                   # the person plays the planner
        assert session.next_phase == "execute" and model.calls["planner"] == 0
        assert list(panel.plan_choice.options) == [p.plan_id for p in session.iteration_plans()]
        panel.kernel_button.click()                                  # no kernel written yet: refused, shown
        assert session.next_phase == "execute" and "choose a plan" in panel.message.value
        panel.plan_choice.value = panel.plan_choice.options[0]
        panel.kernel_text.value = matmul_resident_rhs("")
        panel.kernel_button.click()                                  # ... and the executor
        for phase in ("evaluate", "select", "summarize"):
            panel.phase_buttons[phase].click()
        assert session.iteration == 1 and session.best.kernel_id != "baseline"
        assert "x over the baseline" in panel.status.value
