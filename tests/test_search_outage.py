"""No silent shrinkage: an endpoint outage leaves the step open, a resume redraws exactly the calls it lost.

A FAKE model server goes down in the middle of the execute step (``FakeOpenAIServer.outage``: it
stops listening, then comes back on the same port). The model's retry window here is shorter
than the outage, so two executor calls fail for transport reasons; an unusable answer before the
outage is the experiment's own failure and is never redrawn."""
from __future__ import annotations

import pytest
from fakes.fake_nki_llm import FakeNKIModel, double_tile, role_of, write_axpb_problem
from fakes.fake_openai_server import FakeOpenAIServer

from accelopt_nb.errors import StepFailedError
from accelopt_nb.llm import Ledger, LLMClient, ModelConfig, RetryPolicy
from accelopt_nb.search import SearchConfig, SearchProblem, Session
from accelopt_nb.store import RunStore

MODEL = "fake-nki-model"
SHORT_RETRY = RetryPolicy(max_attempts=2, base_delay_s=0.05, max_delay_s=0.1, retry_for_s=0.3)


@pytest.fixture
def problem(tmp_path):
    task, kern = write_axpb_problem(tmp_path / "problem")
    return SearchProblem.from_files(task, kern, name="axpb")


def down_at_second_executor_call(srv, model, seconds):
    calls = {"executor": 0}

    def responder(body):
        if role_of(body) == "executor":
            calls["executor"] += 1
            if calls["executor"] == 2:
                calls["restart"] = srv.outage(seconds)   # this answer still goes out; the next calls fail
        return model.responder(body)
    return responder, calls


@pytest.fixture(scope="module", autouse=True)
def _shared_pool(eval_pool):
    """The warm evaluation workers every search test shares (conftest's ``eval_pool``)."""
    global POOL
    POOL = eval_pool


def session(problem, tmp_path, srv, **runtime):
    store = RunStore.open(tmp_path / "run")
    client = LLMClient(ModelConfig(model=MODEL, base_url=srv.url, retry=SHORT_RETRY, max_unusable_retries=0),
                       Ledger.for_store(store, "r1"), concurrency=1)
    config = SearchConfig.from_preset("smoke", iterations=1, beam_width=2, plans_per_kernel=4, samples_per_plan=1,
                                      **{"evaluation.shape_preset": "task", "sampling.unusable_retries": 0,
                                         **{f"runtime.{k}": v for k, v in runtime.items()}})
    s = Session.create(problem, run_dir=tmp_path / "run", config=config, llm=client, run_id="r1",
                       eval_cache=tmp_path / "cache", store=store, eval_executor=POOL)
    return s, client


def test_an_outage_leaves_the_step_open_and_a_resume_redraws_exactly_the_lost_calls(problem, tmp_path):
    model = FakeNKIModel(plans=["DOUBLE the tile width.", "GIVEUP on this one."],
                         rewrites=[("DOUBLE", double_tile), ("GIVEUP", lambda src: None)])
    with FakeOpenAIServer(models=[MODEL]) as srv:
        srv.responder, calls = down_at_second_executor_call(srv, model, seconds=1.5)
        s, client = session(problem, tmp_path, srv)
        with pytest.raises(StepFailedError, match="2 of 4 LLM calls got no answer from the endpoint"):
            s.step()
        st = s.last_step
        assert (st.phase, st.calls, st.failed, st.transport, st.unusable, st.done) == ("execute", 4, 3, 2, 1, False)
        assert s.next_phase == "execute" and len(s.iteration_kernels()) == 1
        row = next(r for r in s.store.rows("steps", "r1") if r["step"] == "execute")
        assert row["status"] == "failed"
        assert sorted(f["cause"] for f in row["info"]["failed"]) == ["transport", "transport", "unusable"]
        calls["restart"].join()
        before = model.calls["executor"]
        report = s.run()                 # the resume: the two lost calls (a DOUBLE, a GIVEUP), not the unusable one
        assert model.calls["executor"] - before == 2
        assert s.iteration == 1 and len(s.iteration_kernels(0)) == 2
        c = report.history[0]["candidates"]
        assert c["nominal"] == 4 and c["generated"] == 2
        assert c["failed_calls"] == {"execute": {"unusable": 2}}   # one from each attempt; no transport loss
        assert "0: 2/4 (executor 2 unusable)" in report.to_text() and report.transport_losses == {}
        client.close()
        s.close()


def test_transport_failures_within_the_allowance_close_the_step_and_the_report_counts_them(problem, tmp_path):
    model = FakeNKIModel(plans=["DOUBLE the tile width."], rewrites=[("DOUBLE", double_tile)])
    with FakeOpenAIServer(models=[MODEL]) as srv:
        srv.responder, calls = down_at_second_executor_call(srv, model, seconds=1.5)
        s, client = session(problem, tmp_path, srv, transport_failures_allowed=0.5)   # 2 of 4 may fail
        report = s.run()
        assert s.iteration == 1
        c = report.history[0]["candidates"]
        assert (c["nominal"], c["generated"], c["failed_calls"]) == (4, 2, {"execute": {"transport": 2}})
        assert report.transport_losses == {0: 2} and "0: 2/4 (executor 2 transport)" in report.to_text()
        calls["restart"].join()
        client.close()
        s.close()
