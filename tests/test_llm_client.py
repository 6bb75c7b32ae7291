"""The LLM client over real HTTP against the fake OpenAI-compatible server."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest
from fakes.fake_openai_server import (Disconnect, Fail, FakeOpenAIServer, Malformed, Reply, Slow,
                                      fake_openai_fixture)

from accelopt_nb.errors import BudgetExceededError, ConfigError, LLMEndpointError, UnusableOutputError
from accelopt_nb.llm import (JsonlLedgerSink, Ledger, LLMClient, ModelConfig, PriceTable, RetryPolicy,
                             Usage)
from accelopt_nb.llm.client import CallRequest
from accelopt_nb.store import RunStore

MODEL = "openai/gpt-oss-120b"
server = fake_openai_fixture([MODEL])

FAST_RETRY = RetryPolicy(max_attempts=4, base_delay_s=0.01, max_delay_s=0.05)


def config_for(srv: FakeOpenAIServer, **kw) -> ModelConfig:
    settings = dict(base_url=srv.url, retry=FAST_RETRY, timeout_s=5.0)
    settings.update(kw)
    return ModelConfig.from_preset("gpt-oss-120b", **settings)


def needs_code(text: str) -> str:
    if "```" not in text:
        raise UnusableOutputError("no code block")
    return text.split("```")[1].removeprefix("python\n")


def test_usage_and_cost_recorded_per_call(server):
    server.enqueue(Reply("first", reasoning="r1", prompt_tokens=1200, completion_tokens=800,
                         reasoning_tokens=500, cached_tokens=200),
                   Reply("second", prompt_tokens=100, completion_tokens=40))
    ledger = Ledger()
    with LLMClient(config_for(server), ledger) as client:
        a = client.complete_sync("plan something", role="planner", run_id="run", iteration=3)
        b = client.complete_sync("write code", role="executor", run_id="run", iteration=3)
    price = PriceTable.default().get("gpt-oss-120b@self-hosted")
    assert a.ok and a.text == "first" and a.reasoning == "r1"
    assert a.usage == Usage(1200, 800, 500, 200)
    assert a.cost_usd == pytest.approx(price.cost(a.usage))
    assert a.cost_usd == pytest.approx((1000 * 0.15 + 200 * 0.15 + 800 * 0.60) / 1e6)
    rows = ledger.to_dataframe()
    assert list(rows["role"]) == ["planner", "executor"]
    assert list(rows["prompt_tokens"]) == [1200, 100]
    assert list(rows["reasoning_tokens"]) == [500, 0]
    assert list(rows["cached_tokens"]) == [200, 0]
    assert set(rows["iteration"]) == {3} and set(rows["run_id"]) == {"run"}
    assert ledger.spent_usd == pytest.approx(a.cost_usd + b.cost_usd)
    summary = ledger.summary().set_index("role")
    assert summary.loc["planner", "calls"] == 1
    assert summary.loc["executor", "completion_tokens"] == 40
    # The paper's settings reached the server: gpt-oss at medium reasoning effort.
    assert server.requests[0]["reasoning_effort"] == "medium"
    assert server.requests[0]["messages"] == [{"role": "user", "content": "plan something"}]


def test_claude_settings_and_api_key_sent(monkeypatch):
    monkeypatch.setenv("FAKE_ANTHROPIC_KEY", "sk-secret")
    srv = FakeOpenAIServer(models=["claude-sonnet-4-20250514"], api_key="sk-secret").start()
    try:
        cfg = ModelConfig.from_preset("claude-sonnet-4", base_url=srv.url, api_key_env="FAKE_ANTHROPIC_KEY",
                                      retry=FAST_RETRY)
        with LLMClient(cfg) as client:
            c = client.complete_sync([{"role": "system", "content": "be brief"},
                                      {"role": "user", "content": "hi"}], role="planner")
        assert c.ok
        body = srv.requests[0]
        assert body["max_tokens"] == 20000 and body["temperature"] == 1.0
        assert body["thinking"] == {"type": "enabled", "budget_tokens": 10000}
        assert srv.request_headers[0]["authorization"] == "Bearer sk-secret"
    finally:
        srv.stop()


def test_transient_failures_are_retried_and_counted(server):
    server.enqueue(Fail(500), Fail(503), Malformed(), Disconnect(), Reply("done"))
    ledger = Ledger()
    cfg = config_for(server, retry=RetryPolicy(max_attempts=5, base_delay_s=0.01, max_delay_s=0.02))
    with LLMClient(cfg, ledger) as client:
        c = client.complete_sync("x", role="executor")
    assert c.ok and c.text == "done"
    assert c.attempts == 5
    assert c.transport_failures == ["http_500", "http_503", "malformed_response", "connection"]
    row = ledger.records[0]
    assert (row.attempts, row.transport_failures, row.status) == (5, 4, "ok")
    assert server.chat_requests == 5


def test_429_retry_after_is_honoured(server):
    server.enqueue(Fail(429, retry_after=0.3), Reply("ok"))
    cfg = config_for(server, retry=RetryPolicy(max_attempts=3, base_delay_s=0.0, max_delay_s=0.0))
    with LLMClient(cfg) as client:
        started = time.monotonic()
        c = client.complete_sync("x", role="planner")
        elapsed = time.monotonic() - started
    assert c.ok and c.transport_failures == ["rate_limited"]
    assert elapsed >= 0.3  # backoff alone would have been 0 s


def test_timeout_is_retried(server):
    server.enqueue(Slow(2.0), Reply("in time"))
    with LLMClient(config_for(server, timeout_s=0.3)) as client:
        c = client.complete_sync("x", role="planner")
    assert c.ok and c.text == "in time" and c.transport_failures == ["timeout"]


def test_exhausted_retries_return_a_failed_completion(server):
    server.enqueue(*[Fail(500)] * 4)
    ledger = Ledger()
    with LLMClient(config_for(server), ledger) as client:
        c = client.complete_sync("x", role="summarizer", iteration=1)
    assert not c.ok and c.status == "error"
    assert "HTTP 500" in c.error and c.attempts == 4
    assert ledger.records[0].status == "error" and ledger.records[0].cost_usd == 0.0
    with pytest.raises(Exception, match="summarizer"):
        c.raise_for_status()


def test_non_retryable_request_error_fails_once(server):
    server.enqueue(Fail(400, "prompt is too long"))
    with LLMClient(config_for(server)) as client:
        c = client.complete_sync("x", role="executor")
    assert c.status == "error" and "prompt is too long" in c.error
    assert server.chat_requests == 1


def test_bad_key_or_model_raises_endpoint_error(server):
    with LLMClient(config_for(server, model="no-such-model")) as client:
        with pytest.raises(LLMEndpointError, match="no-such-model"):
            client.complete_sync("x", role="planner")
    assert server.chat_requests == 1  # not retried


def test_unusable_output_is_retried_and_counted(server):
    server.enqueue(Reply("I think the answer is...", prompt_tokens=10, completion_tokens=5),
                   Reply("```python\nx = 1\n```", prompt_tokens=10, completion_tokens=7))
    ledger = Ledger()
    with LLMClient(config_for(server), ledger) as client:
        c = client.complete_sync("write code", role="executor", validate=needs_code)
    assert c.ok and c.parsed == "x = 1\n"
    assert c.unusable_outputs == 1 and c.rejections[0].reason == "no code block"
    assert c.rejections[0].text.startswith("I think")
    # Both responses were billed.
    assert c.usage == Usage(20, 12, 0, 0)
    assert ledger.records[0].unusable_outputs == 1
    assert "unusable_output: no code block" in ledger.records[0].failures_json


def test_unusable_output_retries_are_bounded(server):
    server.enqueue(*[Reply("no code here")] * 5)
    with LLMClient(config_for(server, max_unusable_retries=2)) as client:
        c = client.complete_sync("write code", role="executor", validate=needs_code)
    assert c.status == "unusable" and c.unusable_outputs == 3
    assert server.chat_requests == 3
    assert "3 unusable response(s)" in c.error


def test_spending_cap_stops_new_calls(server):
    server.responder = lambda body: Reply("x", prompt_tokens=1_000_000, completion_tokens=0)
    ledger = Ledger(cap_usd=0.40)  # each call costs 0.15 USD at the self-hosted proxy price
    with LLMClient(config_for(server), ledger) as client:
        for _ in range(3):
            assert client.complete_sync("x", role="planner").ok
        with pytest.raises(BudgetExceededError, match="0.4000 USD"):
            client.complete_sync("x", role="planner")
        assert server.chat_requests == 3  # the refused call never reached the server
        many = client.complete_many_sync([{"messages": "y", "role": "executor"}] * 2)
    assert [c.status for c in many] == ["budget_exceeded"] * 2
    assert ledger.spent_usd == pytest.approx(0.45)
    assert ledger.exhausted and len(ledger.records) == 3


def test_cap_requires_a_price():
    with pytest.raises(ConfigError, match="no price key"):
        LLMClient(ModelConfig(model="m", base_url="http://127.0.0.1:1/v1"), Ledger(cap_usd=1.0))


def test_concurrency_limit(server):
    active = 0
    peak = 0
    lock = threading.Lock()

    def responder(body):
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.1)
        with lock:
            active -= 1
        return Reply("ok")

    server.responder = responder
    with LLMClient(config_for(server), concurrency=3) as client:
        results = client.complete_many_sync([{"messages": f"q{i}", "role": "executor", "sample": i}
                                             for i in range(9)])
    assert all(c.ok for c in results)
    assert peak == 3


def test_one_failed_call_does_not_abort_a_batch(server):
    def responder(body):
        text = body["messages"][-1]["content"]
        return Fail(400, "bad request") if text == "q1" else Reply(f"answer to {text}")

    server.responder = responder
    with LLMClient(config_for(server)) as client:
        results = client.complete_many_sync([{"messages": f"q{i}", "role": "planner"} for i in range(3)])
    assert [c.status for c in results] == ["ok", "error", "ok"]
    assert results[2].text == "answer to q2"


def test_sync_wrapper_inside_a_running_event_loop(server):
    """Jupyter runs an event loop in the main thread; the sync API must still work there."""
    server.enqueue(Reply("from the worker loop"))

    async def notebook_cell():
        with LLMClient(config_for(server)) as client:
            return client.complete_sync("x", role="planner")

    c = asyncio.run(notebook_cell())
    assert c.ok and c.text == "from the worker loop"


def test_async_api_on_the_callers_loop(server):
    server.responder = lambda body: Reply(body["messages"][-1]["content"].upper())

    async def main():
        async with LLMClient(config_for(server), concurrency=4) as client:
            return await asyncio.gather(*(client.complete(f"q{i}", role="planner") for i in range(4)))

    results = asyncio.run(main())
    assert [c.text for c in results] == ["Q0", "Q1", "Q2", "Q3"]


def test_ledger_persists_to_store_and_jsonl(server, tmp_path):
    store = RunStore.open(tmp_path / "exp")
    store.create_run("r1", {"model": MODEL})
    sink = JsonlLedgerSink(tmp_path / "calls.jsonl")
    server.responder = lambda body: Reply("x", prompt_tokens=100_000, completion_tokens=50_000)
    ledger = Ledger.for_store(store, "r1")
    ledger.sinks.append(sink)
    with LLMClient(config_for(server), ledger) as client:
        for it in range(2):
            client.complete_sync("x", role="executor", run_id="r1", iteration=it)
    df = store.llm_calls_df("r1")
    assert list(df["iteration"]) == [0, 1]
    assert df["cost_usd"].sum() == pytest.approx(2 * (0.1 * 0.15 + 0.05 * 0.60))
    assert [r["call_id"] for r in sink.read()] == list(df["call_id"])
    # A resumed run's ledger starts from what the store already recorded.
    resumed = Ledger.for_store(store, "r1", cap_usd=0.09)
    assert resumed.spent_usd == pytest.approx(0.09)
    assert resumed.exhausted
    store.close()


def test_endpoint_error_is_recorded_config_error_is_not(server, monkeypatch):
    ledger = Ledger()
    with LLMClient(config_for(server, model="no-such-model"), ledger) as client:
        with pytest.raises(LLMEndpointError):
            client.complete_sync("x", role="planner")
    assert [(r.status, r.attempts, r.transport_failures) for r in ledger.records] == [("error", 1, 1)]
    monkeypatch.delenv("NEEDED_KEY", raising=False)
    with LLMClient(config_for(server, api_key_env="NEEDED_KEY", api_key_required=True), ledger) as client:
        with pytest.raises(ConfigError, match="NEEDED_KEY"):
            client.complete_sync("x", role="planner")
    assert len(ledger.records) == 1 and server.chat_requests == 1


def test_a_validator_exception_makes_that_answer_unusable_not_the_call_an_error(server):
    calls = []

    def broken(text):
        calls.append(text)
        raise KeyError("oops")

    server.enqueue(Reply("first"), Reply("second"))
    ledger = Ledger()
    with LLMClient(config_for(server, max_unusable_retries=1), ledger) as client:
        c = client.complete_sync("x", role="executor", validate=broken)
    assert c.status == "unusable" and c.unusable_outputs == 2
    assert c.rejections[0].reason == "the answer check failed: KeyError: 'oops'"
    assert calls == ["first", "first", "second", "second"]  # each answer checked twice, then rejected
    assert ledger.records[0].status == "unusable" and ledger.records[0].prompt_tokens > 0


def test_a_validator_that_fails_once_is_run_again_on_the_same_answer(server):
    seen = []

    def flaky(text):  # e.g. a parser race: the second check of the same text passes
        seen.append(text)
        if len(seen) == 1:
            raise SystemError("AST constructor recursion depth mismatch")
        return text.upper()

    server.enqueue(Reply("answer"))
    with LLMClient(config_for(server)) as client:
        c = client.complete_sync("x", role="planner", validate=flaky)
    assert c.ok and c.parsed == "ANSWER" and server.chat_requests == 1


def test_one_validator_exception_does_not_abort_the_other_calls_of_a_step(server):
    def validate(text):
        if text == "answer to q3":
            raise ValueError("a bug on this one answer")
        return text

    server.responder = lambda body: Reply(f"answer to {body['messages'][-1]['content']}")
    done = {}
    with LLMClient(config_for(server, max_unusable_retries=0), concurrency=4) as client:
        missing = client.complete_each([CallRequest(f"q{i}", role="planner", key=i, validate=validate)
                                        for i in range(10)], lambda req, c: done.__setitem__(req.key, c))
        batch = client.complete_many_sync([{"messages": f"q{i}", "role": "planner", "validate": validate}
                                           for i in range(4)])
    assert missing == [] and len(done) == 10
    assert [done[i].status for i in range(10)] == ["ok"] * 3 + ["unusable"] + ["ok"] * 6
    assert "ValueError: a bug on this one answer" in done[3].error
    assert [c.status for c in batch] == ["ok", "ok", "ok", "unusable"]


def test_content_as_a_list_of_parts_is_an_answer(server):
    server.enqueue(Reply([{"type": "reasoning", "text": "think first"},
                          {"type": "text", "text": "Plan: hoist "}, {"type": "text", "text": "the load."}]),
                   Reply([{"type": "output_text", "text": "second"}, {"type": "image_url", "image_url": {}}]))
    with LLMClient(config_for(server)) as client:
        a = client.complete_sync("x", role="planner")
        b = client.complete_sync("y", role="planner")
    assert a.ok and a.text == "Plan: hoist the load." and a.reasoning == "think first"
    assert b.ok and b.text == "second"


def test_a_cap_without_max_tokens_reserves_a_default_output(server):
    from accelopt_nb.llm.config import DEFAULT_RESERVE_OUTPUT_TOKENS

    price = PriceTable.default().get("gpt-oss-120b@self-hosted")
    with LLMClient(config_for(server)) as client:  # the preset sends no max_tokens
        request = client.build_request("a" * 300)
        assert "max_tokens" not in request
        reserve = client._estimate(request)
        assert reserve == pytest.approx(price.cost(Usage(100, DEFAULT_RESERVE_OUTPUT_TOKENS)))
        assert reserve > price.cost(Usage(100, 0)) * 5  # not the prompt's cost alone
        assert client._estimate(client.build_request("a" * 300, {"max_tokens": 10})) == \
            pytest.approx(price.cost(Usage(100, 10)))
    with LLMClient(config_for(server, reserve_output_tokens=100)) as client:
        assert client._estimate(client.build_request("a" * 300)) == pytest.approx(price.cost(Usage(100, 100)))
    # Under a cap worth 2.5 reserved answers, at most 3 calls are in flight at once (holding only
    # their prompts' cost, all 8 would start together); cheap answers free the cap again.
    active = peak = 0
    lock = threading.Lock()

    def responder(body):
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.5)
        with lock:
            active -= 1
        return Reply("ok", prompt_tokens=100, completion_tokens=10)

    server.responder = responder
    ledger = Ledger(cap_usd=2.5 * price.cost(Usage(100, DEFAULT_RESERVE_OUTPUT_TOKENS)))
    with LLMClient(config_for(server), ledger, concurrency=8) as client:
        results = client.complete_many_sync([{"messages": "a" * 300, "role": "planner", "sample": i}
                                             for i in range(8)])
    assert peak <= 3 and sum(c.ok for c in results) >= 3
    assert any(c.status == "budget_exceeded" for c in results)


def test_per_call_params_and_server_specific_settings(server):
    with LLMClient(config_for(server)) as client:
        client.complete_sync("x", role="check", params={"max_tokens": 16, "reasoning_effort": None, "top_k": 20})
        with pytest.raises(ConfigError, match="'n'"):
            client.complete_sync("x", role="check", params={"n": 4})
    body = server.requests[0]
    assert body["max_tokens"] == 16 and body["top_k"] == 20
    assert "reasoning_effort" not in body


def test_every_ledger_row_carries_the_finish_reason(server, tmp_path):
    store = RunStore.open(tmp_path / "exp")
    store.create_run("r1", {"model": MODEL})
    sink = JsonlLedgerSink(tmp_path / "calls.jsonl")
    server.enqueue(Reply("```python\nx = 1\n```"), Reply("```python\nx = ", finish_reason="length"))
    ledger = Ledger.for_store(store, "r1")
    ledger.sinks.append(sink)
    with LLMClient(config_for(server, max_unusable_retries=0), ledger) as client:
        done = client.complete_sync("write code", role="executor", run_id="r1", validate=needs_code)
        cut = client.complete_sync("write code", role="executor", run_id="r1", validate=needs_code)
    assert done.ok and cut.status == "unusable"
    df = store.llm_calls_df("r1")
    assert list(df["finish_reason"]) == ["stop", "length"]
    assert [r["finish_reason"] for r in sink.read()] == ["stop", "length"]
    assert [r.finish_reason for r in ledger.records] == ["stop", "length"]
    store.close()
