"""Record then replay offline: identical results without any server."""
from __future__ import annotations

import dataclasses

import pytest
from fakes.fake_openai_server import Fail, FakeOpenAIServer, Reply

from accelopt_nb.errors import ConfigError, ReplayMissError, UnusableOutputError
from accelopt_nb.llm import Cassette, Ledger, LLMClient, ModelConfig, RetryPolicy, request_key

MODEL = "openai/gpt-oss-120b"


def needs_code(text: str) -> str:
    if "```" not in text:
        raise UnusableOutputError("no code block")
    return text.split("```")[1]


def config(url: str) -> ModelConfig:
    return ModelConfig.from_preset("gpt-oss-120b", base_url=url,
                                   retry=RetryPolicy(max_attempts=3, base_delay_s=0.01))


def workload(client: LLMClient) -> list:
    """A small 'experiment': a planner batch (repeated identical prompt), then an executor
    call whose first answer is unusable."""
    plans = client.complete_many_sync([{"messages": "propose a plan", "role": "planner", "iteration": 0,
                                        "sample": i} for i in range(3)])
    code = client.complete_sync("write the kernel", role="executor", iteration=0, validate=needs_code)
    return [*plans, code]


def comparable(c) -> dict:
    d = dataclasses.asdict(c)
    for volatile in ("call_id", "started_at", "replayed"):
        d.pop(volatile)
    return d


def test_record_then_replay_offline_is_identical(tmp_path):
    path = tmp_path / "run.cassette.jsonl"
    counter = iter(range(100))
    kernel_answers = iter(["hmm, let me think", "```python\nk = 1\n```"])

    def responder(body):
        text = body["messages"][-1]["content"]
        n = next(counter)
        if text == "write the kernel":
            return Reply(next(kernel_answers), reasoning=f"r{n}")
        return Reply(f"plan #{n}", reasoning="because", cached_tokens=1)

    with FakeOpenAIServer(models=[MODEL], responder=responder) as srv:
        srv.enqueue(Fail(500))  # a transient failure is part of the recording too
        recorded_ledger = Ledger()
        with LLMClient(config(srv.url), recorded_ledger, Cassette(path, mode="record")) as client:
            recorded = workload(client)
        url = srv.url
    assert len(Cassette(path, mode="replay")) == 5  # 3 plans + unusable + usable

    # The server is gone: replay must not need it.
    replay_ledger = Ledger()
    with LLMClient(config(url), replay_ledger, Cassette(path, mode="replay")) as client:
        replayed = workload(client)
    assert [comparable(c) for c in replayed] == [comparable(c) for c in recorded]
    assert all(c.replayed for c in replayed) and not any(c.replayed for c in recorded)
    assert replayed[3].parsed == recorded[3].parsed and replayed[3].unusable_outputs == 1
    assert replay_ledger.spent_usd == pytest.approx(recorded_ledger.spent_usd)
    assert sum(c.attempts for c in replayed) == sum(c.attempts for c in recorded)


def test_replay_miss_names_the_request(tmp_path):
    path = tmp_path / "c.jsonl"
    with FakeOpenAIServer(models=[MODEL]) as srv:
        with LLMClient(config(srv.url), cassette=Cassette(path, mode="record")) as client:
            client.complete_sync("known prompt", role="planner")
        url = srv.url
    with LLMClient(config(url), cassette=Cassette(path, mode="replay")) as client:
        assert client.complete_sync("known prompt", role="planner").ok
        with pytest.raises(ReplayMissError, match="known prompt.*all used|all used"):
            client.complete_sync("known prompt", role="planner")
        with pytest.raises(ReplayMissError, match="a different prompt"):
            client.complete_sync("a different prompt", role="planner")


def test_replay_of_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        Cassette(tmp_path / "nope.jsonl", mode="replay")


def test_auto_mode_replays_hits_and_records_misses(tmp_path):
    path = tmp_path / "c.jsonl"
    with FakeOpenAIServer(models=[MODEL]) as srv:
        srv.enqueue(Reply("one"), Reply("two"))
        with LLMClient(config(srv.url), cassette=Cassette(path, mode="record")) as client:
            client.complete_sync("a", role="planner")
        with LLMClient(config(srv.url), cassette=Cassette(path, mode="auto")) as client:
            a = client.complete_sync("a", role="planner")
            b = client.complete_sync("b", role="planner")
        assert srv.chat_requests == 2
    assert (a.text, a.replayed) == ("one", True)
    assert (b.text, b.replayed) == ("two", False)
    assert len(Cassette(path, mode="replay")) == 2


def test_request_key_is_canonical():
    base = {"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 1.0}
    reordered = {"temperature": 1.0, "messages": [{"content": "x", "role": "user"}], "model": "m"}
    assert request_key(base) == request_key(reordered)
    assert request_key(base) != request_key({**base, "temperature": 0.5})
    assert request_key(base) != request_key(base, sample=1)
    assert request_key(base) != request_key(base, retry=1)


def test_incomplete_last_line_is_ignored(tmp_path):
    path = tmp_path / "c.jsonl"
    with FakeOpenAIServer(models=[MODEL]) as srv:
        with LLMClient(config(srv.url), cassette=Cassette(path, mode="record")) as client:
            client.complete_sync("a", role="planner")
    with path.open("a") as fh:
        fh.write('{"key": "abc", "requ')  # the process died while recording
    with pytest.warns(UserWarning, match="incomplete last line"):
        assert len(Cassette(path, mode="replay")) == 1
