"""The session panel (ipywidgets) driven by its buttons, against the fake model server."""
from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("ipywidgets")
from fakes.fake_nki_llm import FakeNKIModel, matmul_resident_rhs  # noqa: E402
from fakes.fake_openai_server import Fail, FakeOpenAIServer, Reply  # noqa: E402

from accelopt_nb.llm import LLMClient, ModelConfig  # noqa: E402
from accelopt_nb.notebook.panel import SessionPanel  # noqa: E402
from accelopt_nb.search import SearchConfig, Session  # noqa: E402


@pytest.fixture
def make_session(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELOPT_CACHE_DIR", str(tmp_path / "cache"))
    opened = []

    def make(url: str) -> Session:
        client = LLMClient(ModelConfig.from_dict({"base_url": url, "model": "fake-nki"}))
        s = Session.create("matmul", run_dir=tmp_path / "run", config=SearchConfig.from_preset("smoke"), llm=client)
        opened.append((s, client))
        return s

    yield make
    for s, client in opened:
        s.close()
        client.close()


@pytest.mark.slow
def test_panel_buttons_drive_the_session(make_session):
    model = FakeNKIModel(plans=["Keep B resident in SBUF: RESIDENT."], rewrites=[("RESIDENT", matmul_resident_rhs)])
    with FakeOpenAIServer(models=["fake-nki"], responder=model.responder) as srv:
        panel = SessionPanel(make_session(srv.url))
        session = panel.session
        assert not panel.phase_buttons["plan"].disabled and panel.phase_buttons["execute"].disabled
        assert panel.stop_button.disabled
        panel.plans_text.value = "Keep B resident (RESIDENT)."
        panel.plans_button.click()                                   # the person plays the planner
        panel.wait(60)
        assert session.next_phase == "execute" and model.calls["planner"] == 0
        assert list(panel.plan_choice.options) == [p.plan_id for p in session.iteration_plans()]
        assert "RESIDENT" in panel.plans_view.value
        panel.kernel_button.click()                                  # no kernel written yet: refused, shown
        panel.wait(60)
        assert session.next_phase == "execute" and "choose a plan" in panel.message.value
        panel.plan_choice.value = panel.plan_choice.options[0]
        panel.kernel_text.value = matmul_resident_rhs("")
        panel.kernel_button.click()                                  # ... and the executor
        panel.wait(60)
        for phase in ("evaluate", "select", "summarize"):
            panel.phase_buttons[phase].click()
            panel.wait(60)
        assert session.iteration == 1 and session.best.kernel_id != "baseline"
        assert "x</b>" in panel.status.value and "speedup" in panel.leaderboard.value
        assert "diff_" in panel.diff_view.value and panel.diff_b.value == session.best.kernel_id
        assert panel.progress.state.phase == "summarize" and panel.progress.bar.bar_style == "success"


@pytest.mark.slow
def test_busy_panel_disables_buttons_and_stop_loses_nothing(make_session):
    gate = threading.Event()
    model = FakeNKIModel(plans=["Keep B resident in SBUF: RESIDENT."], rewrites=[("RESIDENT", matmul_resident_rhs)])

    def responder(body):
        gate.wait(30)                                                # hold the planner calls until released
        return model.responder(body)

    with FakeOpenAIServer(models=["fake-nki"], responder=responder) as srv:
        panel = SessionPanel(make_session(srv.url))
        panel.run_button.click()
        assert panel.busy and panel.run_button.disabled and panel.phase_buttons["plan"].disabled
        assert not panel.stop_button.disabled and "running run" in panel.message.value
        for _ in range(600):                                         # wait until the plan calls are in flight
            if ("plan", 0) in panel.progress.phases:
                break
            time.sleep(0.05)
        panel.stop_button.click()
        gate.set()
        panel.wait(60)
        assert not panel.busy and not panel.run_button.disabled
        assert "stopped:" in panel.message.value and "not made" in panel.message.value
        s = panel.session
        stopped = [st for st in s.step_stats if st.stopped]
        assert stopped and stopped[-1].missing >= 1 and not stopped[-1].done   # the step is not done ...
        assert (s.iteration, s.next_phase) == (0, stopped[-1].phase)
        panel.step_button.click()                                          # ... and running on finishes it
        panel.wait(120)
        assert s.iteration == 1 and "step: done" in panel.message.value


@pytest.mark.slow
def test_failed_calls_show_in_red_never_done(make_session):
    calls = {"n": 0}

    def responder(body):
        calls["n"] += 1
        return Fail(400, "context length exceeded") if calls["n"] % 2 else Reply("**Plan:** tile wider, please.")

    with FakeOpenAIServer(models=["fake-nki"], responder=responder) as srv:
        panel = SessionPanel(make_session(srv.url))
        panel.phase_buttons["plan"].click()
        panel.wait(60)
        msg = panel.message.value
        assert "accelopt-failure" in msg and "#b00020" in msg and "done" not in msg
        assert "LLM call(s) failed" in msg and "context length exceeded" in msg
        assert panel.progress.bar.bar_style == "danger" and panel.progress.state.failed >= 1
