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


@pytest.fixture(scope="module", autouse=True)
def _shared_pool(eval_pool):
    """The warm evaluation workers every search test shares (conftest's ``eval_pool``)."""
    global POOL
    POOL = eval_pool


def spec(tmp_path, files, url, **kw) -> LaunchSpec:
    task, kernel = files
    base = dict(run_dir=tmp_path / "run", task=task, kernel=kernel, preset="smoke",
                overrides={"iterations": 2, "evaluation.shape_preset": "task"}, eval_cache=tmp_path / "cache",
                eval_executor=POOL,
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


def test_cli_model_options_seed_extra_body_and_a_preset_file_of_ones_own(tmp_path):
    import argparse

    from accelopt_nb.commands import optimize
    from accelopt_nb.search.launch import model_config

    preset = tmp_path / "my-vllm.yaml"
    preset.write_text("model: my-model\nbase_url: http://127.0.0.1:8000/v1\nmax_tokens: 4096\n")
    parser = argparse.ArgumentParser()
    optimize.add_arguments(parser)
    args = parser.parse_args(["silu", "--model-preset", str(preset), "--seed", "3", "--retry-for", "30",
                              "--extra-body", '{"top_k": 20, "chat_template_kwargs": {"enable_thinking": false}}',
                              "--allow-transport-failures", "0.1"])
    spec = optimize.launch_spec(args)
    model = model_config(None, **spec.model)
    assert (model.model, model.max_tokens, model.seed) == ("my-model", 4096, 3)
    assert model.extra_body == {"top_k": 20, "chat_template_kwargs": {"enable_thinking": False}}
    assert model.retry.retry_for_s == 30.0 and model.retry.max_attempts == 6
    assert spec.overrides["seed"] == 3 and spec.runtime_overrides()["transport_failures_allowed"] == 0.1
    with pytest.raises(ConfigError, match="--extra-body takes a JSON object"):
        model_config(None, model_preset=str(preset), extra_body="top_k=20")


def test_per_call_seeds_never_repeat_within_a_run_and_change_with_the_runs_seed(tmp_path, files):
    """Repeated sampling asks the same prompt every iteration: with per-sample seeds (seed + k) a seeded
    server would answer iteration 1 exactly as iteration 0; per-call seeds differ per iteration and slot."""
    model = FakeNKIModel(plans=["DOUBLE the tile width."], rewrites=[("DOUBLE", double_tile)])
    seeds = {}
    for run_seed, mode in ((0, "per_call"), (1, "per_call"), (0, "per_sample")):
        with FakeOpenAIServer(models=[MODEL], responder=model.responder) as srv:
            overrides = {"iterations": 2, "evaluation.shape_preset": "task", "strategy": "repeated",
                         "plans_per_kernel": 2, "samples_per_plan": 1, "beam_width": 2, "seed": run_seed,
                         "sampling.seed_mode": mode}
            s = open_session(spec(tmp_path / f"{run_seed}{mode}", files, srv.url, overrides=overrides,
                                  model={"base_url": srv.url, "model": MODEL, "seed": 7}))
            with s:
                s.run()
            seeds[run_seed, mode] = [b["seed"] for b in srv.requests
                                     if "propose the next" in b["messages"][0]["content"]]
    calls = seeds[0, "per_call"]
    assert len(calls) == 2 + 4 and len(set(calls)) == len(calls)      # 2 plans, then B*N = 4 plans
    assert not set(calls) & set(seeds[1, "per_call"])                   # another run seed, other seeds
    assert sorted(seeds[0, "per_sample"]) == [7, 7, 8, 8, 9, 10]         # the old mode repeats across iterations
