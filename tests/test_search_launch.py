"""The composition root (LaunchSpec/open_session), stopping, and the last iteration's summarizer."""
from __future__ import annotations

import socket

import pytest
from fakes.fake_nki_llm import FakeNKIModel, double_tile, set_tile, write_axpb_problem
from fakes.fake_openai_server import FakeOpenAIServer

from accelopt_nb.errors import AccelOptError, ConfigError, EndpointUnreachableError
from accelopt_nb.search.launch import LaunchSpec, open_session

MODEL = "fake-nki"


@pytest.fixture
def files(tmp_path):
    return write_axpb_problem(tmp_path / "problem")


def spec(tmp_path, files, url, **kw) -> LaunchSpec:
    task, kernel = files
    base = dict(run_dir=tmp_path / "run", task=task, kernel=kernel, preset="smoke",
                overrides={"iterations": 2, "evaluation.shape_preset": "task"}, eval_cache=tmp_path / "cache",
                model={"base_url": url, "model": MODEL, "price": "gpt-oss-120b@groq"})
    base.update(kw)
    return LaunchSpec("axpb", **base)


def test_an_unreachable_endpoint_fails_in_seconds_naming_url_and_reason(tmp_path, files):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(EndpointUnreachableError, match=f"cannot reach the LLM endpoint {url}") as err:
        open_session(spec(tmp_path, files, url))
    assert isinstance(err.value, AccelOptError)
    assert not (tmp_path / "run").exists()


def test_stop_keeps_finished_work_and_resume_auto_finishes_without_the_last_summarizer(tmp_path, files):
    model = FakeNKIModel(plans=["DOUBLE the tile width.", "Use 512-column tiles: WIDE512."],
                         rewrites=[("DOUBLE", double_tile), ("WIDE512", set_tile(512))])
    with FakeOpenAIServer(models=[MODEL], responder=model.responder) as srv:
        events = []
        holder = {}

        def progress(event):
            events.append(event)
            if event.phase == "execute" and event.kind == "call_done" and event.iteration == 1:
                holder["session"].request_stop()  # from the LLM worker thread, like a notebook button

        with pytest.raises(ConfigError, match="nothing to resume"):
            open_session(spec(tmp_path, files, srv.url, resume="resume"))
        s = open_session(spec(tmp_path, files, srv.url, progress=progress, llm_concurrency=1))
        holder["session"] = s
        with s:
            s.run()
            assert s.iteration == 1 and s.last_step is not None and not s.last_step.done
            stats = {st.phase: st for st in s.step_stats if st.iteration == 1}
            assert stats["plan"].done and stats["execute"].stopped and stats["execute"].missing >= 1
            kept = {k.kernel_id for k in s.iteration_kernels(1)}
            assert kept  # the call in flight finished and was stored
            run_id = s.run_id
        calls_before = model.calls["executor"]
        s2 = open_session(spec(tmp_path, files, srv.url, resume="auto"))
        with s2:
            assert s2.run_id == run_id and (s2.iteration, s2.next_phase) == (1, "execute")
            report = s2.run()
            assert s2.iteration == 2 and kept <= {k.kernel_id for k in s2.iteration_kernels(1)}
        assert model.calls["executor"] == 4 + 2  # nothing asked twice
        assert calls_before + len(s2.iteration_kernels(1)) - len(kept) == model.calls["executor"]
        # The summarizer ran after iteration 0, not after the last iteration (1 of T=2).
        summarize = [r for r in s2.store.rows("steps", run_id) if r["step"] == "summarize"]
        assert [r["info"]["skipped"] for r in sorted(summarize, key=lambda r: r["iteration"])] == [False, True]
        text = report.to_text()
        assert report.iterations_done == 2 and "time per phase" in text
        assert "retries" in text and "unusable" in text and "evaluation (full fidelity): " in text
        assert sum(report.statuses.values()) == report.kernels and report.phase_seconds["plan"] >= 0
        assert {e.kind for e in events} >= {"start", "call_done", "eval_done", "end"}


def test_a_cost_run_refuses_an_unpriced_model(tmp_path, files):
    with FakeOpenAIServer(models=[MODEL]) as srv:
        with pytest.raises(ConfigError, match="has no price"):
            open_session(spec(tmp_path, files, srv.url, unpriced_ok=False,
                              model={"base_url": srv.url, "model": MODEL}))


def test_run_arms_checks_every_endpoint_before_any_run(tmp_path):
    from accelopt_nb.experiments import run_arms

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    arms = [{"name": "down", "preset": "smoke", "model": {"base_url": f"http://127.0.0.1:{port}/v1"}}]
    with pytest.raises(EndpointUnreachableError, match="arm 'down'.*cannot reach"):
        run_arms(arms, ["matmul"], tmp_path / "exp", default_model={"model": "m"}, progress=False)
    assert not (tmp_path / "exp").exists()
