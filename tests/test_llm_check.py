"""`accelopt llm check` against the fake server."""
from __future__ import annotations

from fakes.fake_openai_server import Fail, Reply, fake_openai_fixture

from accelopt_nb.cli import main
from accelopt_nb.llm import ModelConfig
from accelopt_nb.llm.check import check_endpoint_sync
from accelopt_nb.pyutil import free_port

MODEL = "openai/gpt-oss-120b"
server = fake_openai_fixture([MODEL, "other-model"])


def test_check_passes_and_reports_tokens_per_second(server):
    server.enqueue(Reply("ready", reasoning="the user wants one word", completion_tokens=40))
    report = check_endpoint_sync(ModelConfig(model=MODEL, base_url=server.url), max_tokens=64)
    assert report.ok, report.lines()
    assert report.models == [MODEL, "other-model"]
    assert report.completion_tokens == 40 and report.reasoning_tokens == 5
    assert report.tokens_per_s is not None and report.tokens_per_s > 0
    assert server.requests[0]["max_tokens"] == 64
    text = "\n".join(report.lines())
    assert "tokens/s" in text and "'ready'" in text


def test_check_reports_unlisted_model(server):
    report = check_endpoint_sync(ModelConfig(model="gpt-oss-999b", base_url=server.url))
    assert report.reachable and not report.model_listed and not report.ok
    assert any("not served here" in e for e in report.errors)


def test_check_reports_failing_completion(server):
    server.enqueue(Fail(500), Fail(500))
    report = check_endpoint_sync(ModelConfig(model=MODEL, base_url=server.url))
    assert report.model_listed and not report.completion_ok
    assert any("HTTP 500" in e for e in report.errors)


def test_cli_check_exit_codes(server, capsys):
    assert main(["llm", "check", "--base-url", server.url, "--model", MODEL]) == 0
    out = capsys.readouterr().out
    assert "[ok  ] reachable" in out and "tokens/s" in out
    assert main(["llm", "check", "--base-url", f"http://127.0.0.1:{free_port()}/v1", "--model", MODEL,
                 "--timeout", "2"]) == 1
    assert "connection error" in capsys.readouterr().out


def test_cli_check_with_preset_override(server, capsys):
    assert main(["llm", "check", "--model-preset", "gpt-oss-120b", "--base-url", server.url]) == 0
    assert server.requests[-1]["reasoning_effort"] == "medium"


def test_cli_check_needs_an_endpoint(capsys):
    assert main(["llm", "check", "--model", MODEL]) == 2
    assert "--base-url" in capsys.readouterr().err
