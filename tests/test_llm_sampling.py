"""Sampling as in the paper, streaming fan-out, the reserving cap and exact cassettes, over real HTTP."""
from __future__ import annotations

import threading

import pytest
from fakes.fake_openai_server import FakeOpenAIServer, Reply, Slow, fake_openai_fixture

from accelopt_nb.errors import BudgetExceededError
from accelopt_nb.llm import Cassette, Ledger, LLMClient, ModelConfig, RetryPolicy
from accelopt_nb.llm.client import CallRequest

MODEL = "openai/gpt-oss-120b"
server = fake_openai_fixture([MODEL])


def config_for(srv: FakeOpenAIServer, **kw) -> ModelConfig:
    settings = dict(base_url=srv.url, retry=RetryPolicy(max_attempts=2, base_delay_s=0.01), timeout_s=5.0)
    settings.update(kw)
    return ModelConfig.from_preset("gpt-oss-120b", **settings)


def test_each_sample_gets_its_own_seed_or_none(server):
    with LLMClient(config_for(server, seed=7)) as client:
        client.complete_sync("x", role="planner")
        client.complete_sync("x", role="planner", sample=3)
        client.complete_sync("x", role="planner", sample=3, params={"seed": None})
    assert [r.get("seed") for r in server.requests] == [7, 10, None]


def test_a_truncated_answer_is_never_accepted_and_retries_are_a_setting(server):
    server.responder = lambda body: Reply("```python\nkernel = 1\n```", finish_reason="length")
    with LLMClient(config_for(server, max_unusable_retries=2)) as client:
        c = client.complete_sync("x", role="executor", unusable_retries=0)
        assert c.status == "unusable" and "finish_reason=length" in c.error and c.attempts == 1
        assert c.finish_reason == "length" and server.chat_requests == 1
        c = client.complete_sync("x", role="executor")  # the model config's 2 re-asks
        assert c.status == "unusable" and len(c.rejections) == 3 and server.chat_requests == 4


def test_complete_each_streams_answers_adds_follow_ups_and_honours_stop(server):
    server.responder = lambda body: Reply("answer to " + body["messages"][-1]["content"])
    seen: list[str] = []
    threads = set()

    def on_done(req, c):
        threads.add(threading.current_thread().name)
        seen.append(c.text)
        if req.key.startswith("plan"):  # each plan starts its executor call at once
            return [CallRequest(f"exec {req.key}", role="executor", key=f"exec-{req.key}")]
        return None

    with LLMClient(config_for(server), concurrency=2) as client:
        missing = client.complete_each([CallRequest(f"plan{i}", role="planner", key=f"plan{i}") for i in range(3)],
                                       on_done)
        assert missing == [] and len(seen) == 6
        assert sorted(seen) == sorted([f"answer to plan{i}" for i in range(3)] +
                                      [f"answer to exec plan{i}" for i in range(3)])
        stop = threading.Event()
        seen.clear()

        def stop_after_first(req, c):
            seen.append(c.text)
            stop.set()

        missing = client.complete_each([CallRequest(f"q{i}", role="planner", key=i) for i in range(6)],
                                       stop_after_first, stop=stop.is_set)
        # at most the two calls in flight when the stop came finished; the rest never started
        assert 1 <= len(seen) <= 2 and len(missing) == 6 - len(seen)
        assert [r.key for r in missing] == list(range(len(seen), 6))


def test_the_cap_reserves_budget_so_concurrent_calls_do_not_overshoot(server):
    prompt = "word " * 600                  # 3000 characters: estimated at 1000 prompt tokens
    server.responder = lambda body: Slow(0.2, Reply("ok", prompt_tokens=1000, completion_tokens=0))
    cost = 1000 * 0.15 / 1e6                # gpt-oss-120b@self-hosted input price per token
    ledger = Ledger(cap_usd=4.5 * cost)
    # No output held in reserve here (the answers are empty), so each call reserves its prompt's cost.
    with LLMClient(config_for(server, reserve_output_tokens=0), ledger, concurrency=16) as client:
        got = client.complete_many_sync([{"messages": prompt, "role": "executor"}] * 16)
    ok = [c for c in got if c.ok]
    refused = [c for c in got if c.status == "budget_exceeded"]
    assert len(ok) == 5 and len(refused) == 11  # 5 reservations reach the cap; the 16 did not all start
    assert ledger.spent_usd <= ledger.cap_usd + cost  # overshoot: at most what was in flight
    assert ledger.reserved_usd == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(BudgetExceededError, match="spending cap"):
        client.complete_sync(prompt, role="executor")


def test_a_cassette_replays_identical_requests_by_slot_not_by_scheduling(tmp_path):
    tape = tmp_path / "tape.jsonl"
    answers = iter(["first", "second"])
    with FakeOpenAIServer(models=[MODEL], responder=lambda body: Reply(next(answers))) as srv:
        with LLMClient(config_for(srv), cassette=Cassette(tape, "record")) as client:
            a = client.complete_sync("same prompt", role="executor", sample=0, slot="i0b0p0s0")
            b = client.complete_sync("same prompt", role="executor", sample=0, slot="i0b0p1s0")
        offline = config_for(srv).replace(base_url="http://127.0.0.1:9/v1")  # nothing listens: replay only
    assert (a.text, b.text) == ("first", "second")
    with LLMClient(offline, cassette=Cassette(tape, "replay")) as client:
        # asked in the other order, each slot still gets its own recorded answer
        b2 = client.complete_sync("same prompt", role="executor", sample=0, slot="i0b0p1s0")
        a2 = client.complete_sync("same prompt", role="executor", sample=0, slot="i0b0p0s0")
    assert (a2.text, b2.text) == ("first", "second") and a2.replayed and b2.replayed


def test_a_cassette_recorded_without_slots_still_replays(tmp_path):
    tape = tmp_path / "old.jsonl"
    with FakeOpenAIServer(models=[MODEL], responder=lambda body: Reply("recorded")) as srv:
        with LLMClient(config_for(srv), cassette=Cassette(tape, "record")) as client:
            client.complete_sync("prompt", role="executor", sample=1)  # no slot, as before slots existed
        offline = config_for(srv).replace(base_url="http://127.0.0.1:9/v1")
    with LLMClient(offline, cassette=Cassette(tape, "replay")) as client:
        assert client.complete_sync("prompt", role="executor", sample=1, slot="silu/i0b0p0s1").text == "recorded"
