"""The session panel (ipywidgets) driven by its buttons, against the fake model server."""
from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("ipywidgets")
from fakes.fake_nki_llm import FakeNKIModel, matmul_column_outer  # noqa: E402
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
    model = FakeNKIModel(plans=["Column blocks outside row blocks, each block of B loaded once: COLUMN BLOCKS OUTER."], rewrites=[("COLUMN BLOCKS OUTER", matmul_column_outer)])
    with FakeOpenAIServer(models=["fake-nki"], responder=model.responder) as srv:
        panel = SessionPanel(make_session(srv.url))
        session = panel.session
        assert not panel.phase_buttons["plan"].disabled and panel.phase_buttons["execute"].disabled
        assert panel.stop_button.disabled
        panel.plans_text.value = "Column blocks outer (COLUMN BLOCKS OUTER)."
        panel.plans_button.click()                                   # the person plays the planner
        panel.wait(60)
        assert session.next_phase == "execute" and model.calls["planner"] == 0
        assert list(panel.plan_choice.options) == [p.plan_id for p in session.iteration_plans()]
        assert "COLUMN BLOCKS OUTER" in panel.plans_view.value
        panel.kernel_button.click()                                  # no kernel written yet: refused, shown
        panel.wait(60)
        assert session.next_phase == "execute" and "choose a plan" in panel.message.value
        panel.plan_choice.value = panel.plan_choice.options[0]
        panel.kernel_text.value = matmul_column_outer("")
        panel.kernel_button.click()                                  # ... and the executor
        panel.wait(60)
        for phase in ("evaluate", "select", "summarize"):
            panel.phase_buttons[phase].click()
            panel.wait(60)
        assert session.iteration == 1 and session.best.kernel_id != "baseline"
        assert "x</b>" in panel.status.value and "speedup" in panel.leaderboard.value
        assert "diff_" in panel.diff_view.value and panel.diff_b.value == session.best.kernel_id
        assert panel.progress.state.phase == "summarize" and panel.progress.bar.bar_style == "success"
        static = panel._bundle()                     # what a viewer without widgets shows
        assert "VBox" not in static["text/plain"] and "1.0" in static["text/plain"] and "x</b>" in static["text/html"]


def test_a_stop_that_arrives_after_the_action_ended_does_nothing(make_session):
    """The browser can deliver a Stop click after the step ended (before it greyed the button): it must
    neither say "stopping..." forever nor leave a stop request that kills the next step at once."""
    panel = SessionPanel(make_session("http://127.0.0.1:9/v1"), background=False)   # no LLM call is made
    panel.plans_text.value = "Column blocks outer (COLUMN BLOCKS OUTER)."
    panel.plans_button.click()                                       # the person plays the planner
    assert panel.session.next_phase == "execute" and "plan: 1 item" in panel.message.value
    before = panel.message.value
    panel.stop()                                                     # the late click
    assert not panel.session.stop_requested and panel.message.value == before
    panel.plan_choice.value = panel.plan_choice.options[0]
    panel.kernel_text.value = matmul_column_outer("")
    panel.kernel_only.value = True
    panel.kernel_button.click()                                      # the next action is not stopped
    assert panel.session.next_phase == "evaluate" and "stopped" not in panel.message.value


def test_a_stop_between_the_step_end_and_the_panel_end_is_not_left_on_the_session(make_session):
    """The narrow window: the session's step has ended (and cleared its stop flag) but the panel's action has
    not; a Stop click there is shown as a stop, and the session must not keep the request for its next step."""
    panel = SessionPanel(make_session("http://127.0.0.1:9/v1"), background=False)   # no LLM call is made
    panel.plans_text.value = "Column blocks outer (COLUMN BLOCKS OUTER)."

    def plans_then_click():
        result = panel._submit_plans()
        panel.stop()                                                 # the click, after session.plan() returned
        return result

    panel._act("plan", plans_then_click)
    assert panel.session.next_phase == "execute" and "stopped" in panel.message.value
    assert not panel.session.stop_requested
    panel.plan_choice.value = panel.plan_choice.options[0]
    panel.kernel_text.value = matmul_column_outer("")
    panel.kernel_only.value = True
    panel.kernel_button.click()                                      # the next action runs to its end
    assert panel.session.next_phase == "evaluate" and "stopped" not in panel.message.value


@pytest.mark.slow
def test_busy_panel_disables_buttons_and_stop_loses_nothing(make_session):
    gate = threading.Event()
    model = FakeNKIModel(plans=["Column blocks outside row blocks, each block of B loaded once: COLUMN BLOCKS OUTER."], rewrites=[("COLUMN BLOCKS OUTER", matmul_column_outer)])

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
        assert "1 model error" in msg and "context length exceeded" in msg     # HTTP 400: the server refused
        assert panel.progress.bar.bar_style == "danger" and panel.progress.state.failed >= 1


# ---- one writer at a time, and Stop at any point leaves a resumable store ----------------------------------
@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """One evaluation cache for the module: the same kernels evaluated again are cache hits."""
    return tmp_path_factory.mktemp("eval_cache")


def _fake_session(run_dir, url, *, iterations=1, pipeline=True, progress=None):
    client = LLMClient(ModelConfig.from_dict({"base_url": url, "model": "fake-nki"}))
    config = SearchConfig.from_preset("smoke").with_overrides(**{"iterations": iterations, "runtime.pipeline": pipeline})
    session = Session.create("matmul", run_dir=run_dir, config=config, llm=client, progress=progress)
    session.on_close.append(client.close)
    return session


def _store_is_consistent(session) -> None:
    """Every step row decodes, no step is marked done twice, every kernel's plan exists."""
    steps = session.store.rows("steps", session.run_id)
    assert all(isinstance(s.get("info") or {}, dict) for s in steps)
    kernels = session.store.rows("kernels", session.run_id)
    plans = {p["plan_id"] for p in session.store.rows("plans", session.run_id)}
    assert all(k["plan_id"] in plans for k in kernels if k["plan_id"])


@pytest.mark.slow
def test_two_threads_one_session_the_second_writer_is_refused(tmp_path, monkeypatch, shared_cache):
    from accelopt_nb.errors import SessionBusyError
    from accelopt_nb.reproduce.offline import fake_responder

    monkeypatch.setenv("ACCELOPT_CACHE_DIR", str(shared_cache))
    gate, answer = threading.Event(), fake_responder()

    def held(body):
        gate.wait(60)
        return answer(body)

    with FakeOpenAIServer(models=["fake-nki"], responder=held) as srv:
        session = _fake_session(tmp_path / "run", srv.url)
        errors: list[BaseException] = []
        first = threading.Thread(target=lambda: session.run(), name="writer-1")
        first.start()
        for _ in range(600):
            if session.busy:
                break
            time.sleep(0.05)
        assert session.busy and "run()" in session.busy

        def second():
            try:
                session.step()
            except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
                errors.append(exc)
        t2 = threading.Thread(target=second, name="writer-2")
        t2.start()
        t2.join(30)
        gate.set()
        first.join(180)
        assert len(errors) == 1 and isinstance(errors[0], SessionBusyError) and "busy" in str(errors[0])
        assert session.iteration == 1 and session.busy is None            # the first writer finished, alone
        _store_is_consistent(session)
        session.close()


@pytest.mark.slow
def test_a_step_cell_while_the_panel_runs_is_refused_in_one_line(tmp_path, monkeypatch, shared_cache):
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    from accelopt_nb.reproduce.offline import fake_responder

    monkeypatch.setenv("ACCELOPT_CACHE_DIR", str(shared_cache))
    monkeypatch.chdir(tmp_path)
    gate, answer = threading.Event(), fake_responder()

    def held(body):
        gate.wait(60)
        return answer(body)

    cfg = Config()
    cfg.HistoryManager.enabled = False
    ip = InteractiveShell(config=cfg)
    try:
        ip.run_line_magic("load_ext", "accelopt_nb")
        with FakeOpenAIServer(models=["fake-nki"], responder=held) as srv:
            ip.run_line_magic("accelopt", f"open matmul --preset smoke --shapes small --base-url {srv.url} "
                                          f"--model fake-nki --price free --run-dir {tmp_path / 'run'}")
            panel = ip.run_line_magic("accelopt", "panel")
            panel.run_button.click()                                     # the panel runs in its thread ...
            for _ in range(600):
                if panel.session.busy:
                    break
                time.sleep(0.05)
            for cell in ("step", "step plan", "run", "close", f"open matmul --run-dir {tmp_path / 'other'}"):
                with pytest.raises(UsageError, match="the session is busy: run\\(\\) from iteration 0"):
                    ip.run_line_magic("accelopt", cell)                  # ... a cell is refused, in one line
            assert "leaderboard of matmul" in ip.run_line_magic("accelopt", "leaderboard").text   # reading is fine
            gate.set()
            panel.wait(240)
            s = panel.session
            assert s.iteration == s.config.iterations and "run: done" in panel.message.value
            _store_is_consistent(s)
            ip.run_line_magic("accelopt", "close")
    finally:
        InteractiveShell.clear_instance()


# (phase, event kind, pipeline, iterations): a stop request at the first such event
STOP_POINTS = [("plan", "start", True, 1), ("plan", "call_done", True, 1), ("execute", "call_done", True, 1),
               ("evaluate", "eval_done", True, 1), ("execute", "start", False, 1), ("evaluate", "start", False, 1),
               ("evaluate", "eval_done", False, 1), ("select", "end", True, 2), ("summarize", "start", True, 2),
               ("summarize", "call_done", True, 2)]


@pytest.mark.slow
@pytest.mark.parametrize("phase,kind,pipeline,iterations", STOP_POINTS,
                         ids=[f"{p}-{k}-{'stream' if pl else 'steps'}" for p, k, pl, _ in STOP_POINTS])
def test_stop_at_any_point_leaves_a_store_that_resumes(tmp_path, monkeypatch, shared_cache, phase, kind, pipeline,
                                                       iterations):
    from accelopt_nb.reproduce.offline import fake_responder

    monkeypatch.setenv("ACCELOPT_CACHE_DIR", str(shared_cache))
    seen = []
    with FakeOpenAIServer(models=["fake-nki"], responder=fake_responder()) as srv:
        holder = {}

        def stop_at(event):
            if (event.phase, event.kind) == (phase, kind) and not seen:
                seen.append(event)
                holder["session"].request_stop()

        session = _fake_session(tmp_path / "run", srv.url, iterations=iterations, pipeline=pipeline, progress=stop_at)
        holder["session"] = session
        session.run()                                                     # Stop: no StoreError, whatever the point
        assert seen, f"no {phase}/{kind} event"
        assert session.iteration < iterations or session.last_step is None or not session.last_step.done
        _store_is_consistent(session)
        stopped_at = (session.iteration, session.next_phase)
        session.close()
        resumed = Session.resume(tmp_path / "run", llm=LLMClient(ModelConfig.from_dict(
            {"base_url": srv.url, "model": "fake-nki"})))
        assert (resumed.iteration, resumed.next_phase) == stopped_at       # where it stopped
        report = resumed.run()                                             # ... and on to the end
        assert resumed.iteration == iterations and report.iterations_done == iterations
        _store_is_consistent(resumed)
        planned = {p.plan_id for p in resumed.plans.values()}
        assert {"i0b0p0", "i0b0p1"} <= planned                           # the stopped calls were made on resume
        assert all(f"{pid}s0" in resumed.kernels for pid in planned)      # a kernel for every plan (K = 1)
        assert all(k.evaluated for k in resumed.kernels.values())
        resumed.close()
