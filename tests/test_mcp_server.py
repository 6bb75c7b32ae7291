"""The MCP server, driven by the official SDK's own client: over stdio as a coding agent launches it,
and over streamable HTTP on loopback (against a PostgreSQL store).

Every tool validates its input and answers bad input with a structured error; the session writes
only inside its run directory.
"""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402

from accelopt_nb.kernels import kernel_path  # noqa: E402
from accelopt_nb.mcp.server import TOOL_NAMES  # noqa: E402
from accelopt_nb.pyutil import free_port  # noqa: E402
from pg_fixtures import pg_server, pg_url  # noqa: E402,F401  (fixtures)

# Stages two row blocks on 256 partitions: the NKI tile limit is 128 (line 11).
BAD_SILU = kernel_path("silu_staged_256").read_text()


def _server(run_dir: Path, *extra: str) -> StdioServerParameters:
    """The server as an agent starts it, from a working directory of its own (``<run_dir>/../cwd``,
    which must stay empty: the session writes only inside its run directory)."""
    cwd = run_dir.parent / "cwd"
    cwd.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("ACCELOPT_CACHE_DIR", None)
    return StdioServerParameters(command=sys.executable, cwd=str(cwd),
                                 args=["-m", "accelopt_nb.cli", "mcp", "--run-dir", str(run_dir), *extra],
                                 env=env)


async def _call(client, tool: str, **arguments):
    result = await client.call_tool(tool, arguments)
    data = result.structured_content
    assert json.loads(result.content[0].text) == data  # the text and the structure say the same
    return result.is_error, data


def _run(coro):
    return asyncio.run(coro)


@pytest.mark.slow
def test_stdio_tools_validate_input_and_stay_in_the_run_directory(tmp_path):
    run_dir = tmp_path / "run"

    async def session():
        async with Client(_server(run_dir, "--session", "s1", "--max-source-kb", "4")) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == set(TOOL_NAMES)
            assert "problem" in tools["evaluate"].input_schema["properties"]

            err, data = await _call(client, "list_problems")
            assert not err and len(data["problems"]) == 14
            silu = next(p for p in data["problems"] if p["name"] == "silu")
            assert silu["shapes"]["small"] == {"M": 256, "N": 640} and silu["peak"]["trn1"]["small"]["ms"] > 0

            err, data = await _call(client, "show_problem", problem="silu")
            assert not err and "def kernel" in data["baseline_source"] and "def forward" in data["reference_source"]
            assert "adversarial" not in data["reference_source"] and data["run_id"] == "s1-silu-small"

            err, data = await _call(client, "nki_api", name="nisa.nc_matmul")
            entry = data["entries"][0]
            assert entry["signature"].startswith("nc_matmul(stationary, moving")
            assert entry["simulator"]["status"] == "supported"
            assert any("stationary is [K <= 128, M <= 128]" in r["text"] for r in entry["rules"])

            # ---- bad input: each a structured error naming the problem
            err, data = await _call(client, "show_problem", problem="../../etc/passwd")
            assert err and data["error"]["code"] == "unknown_problem" and "silu" in data["error"]["known"]
            err, data = await _call(client, "evaluate", problem="silu", source="x = 1\n" * 2000)
            assert err and data["error"]["code"] == "source_too_large" and data["error"]["limit"] == 4096
            err, data = await _call(client, "simulate", problem="silu", source="x = 1\n", filename="../../x.py")
            assert err and data["error"]["code"] == "invalid_argument" and data["error"]["field"] == "filename"
            err, data = await _call(client, "simulate", problem="silu", source="x = 1\n", seed="many")
            assert err and data["error"]["code"] == "invalid_argument"
            assert data["error"]["problems"][0]["field"] == "seed"
            err, data = await _call(client, "show_problem", problem="silu", shapes="huge")
            assert err and data["error"]["code"] == "unknown_shapes" and data["error"]["choices"] == ["paper", "small"]
            err, data = await _call(client, "nki_api", name="nl.lod")
            assert err and data["error"]["code"] == "unknown_api" and "nl.load" in data["error"]["did_you_mean"]
            err, data = await _call(client, "lineage", kernel_id="k-0000000000000000")
            assert err and data["error"]["code"] == "unknown_kernel"
            err, data = await _call(client, "get_kernel", kernel_id="../../../etc/passwd")
            assert err and data["error"]["code"] == "invalid_argument"
            err, data = await _call(client, "best_kernels", limit=0)
            assert err and data["error"]["code"] == "invalid_argument"
            err, data = await _call(client, "no_such_tool")
            assert err and data["error"]["code"] == "unknown_tool"

            err, data = await _call(client, "session_info")
            assert data["session"] == "s1" and data["runs"] == {"silu/small": "s1-silu-small"}

    _run(session())
    # The session wrote only inside its run directory.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cwd", "run"] and not any((tmp_path / "cwd").iterdir())
    assert (run_dir / "accelopt.sqlite").is_file()


@pytest.mark.slow
def test_stdio_agent_session_profile_improve_and_a_rule_violation(tmp_path):
    run_dir = tmp_path / "run"
    fused = kernel_path("silu_fused").read_text()

    async def session():
        async with Client(_server(run_dir, "--session", "agent", "--author", "tester")) as client:
            err, base = await _call(client, "profile", problem="silu", explain=True)
            assert not err and base["status"] == "correct" and base["kernel_id"] == "baseline"
            assert 0 < base["pct_peak"] < 100 and base["profile"]["hbm_read_bytes"] > 0
            assert "hbm_read_bytes" in base["glossary"]

            err, good = await _call(client, "evaluate", problem="silu", source=fused,
                                    plan="Fuse exp, add and divide into one silu activation.")
            assert not err and good["status"] == "correct" and good["parent_kernel_id"] == "baseline"
            assert good["speedup_over_parent"] > 1.0 and good["pct_peak"] > base["pct_peak"]
            assert all(c["passed"] for c in good["checks"]) and any(c["kind"] == "adversarial" for c in good["checks"])

            err, bad = await _call(client, "evaluate", problem="silu", source=BAD_SILU, filename="staged.py",
                                   parent_kernel_id=good["kernel_id"])
            assert err and bad["error"]["code"] == "kernel_error" and bad["error"]["status"] == "build_failed"
            ke = bad["error"]["kernel_error"]
            assert (ke["file"], ke["line"], ke["api"]) == ("staged.py", 11, "nl.ndarray")
            assert "128" in ke["rule"] and ke["type"] == "NKIRuleError"

            err, chain = await _call(client, "lineage", kernel_id=bad["error"]["kernel_id"])
            assert [c["kernel_id"] for c in chain["chain"]] == ["baseline", good["kernel_id"], bad["error"]["kernel_id"]]
            assert [c["status"] for c in chain["chain"]] == ["correct", "correct", "build_failed"]
            assert chain["chain"][1]["plan"].startswith("Fuse exp")

            err, lesson = await _call(client, "add_memory", problem="silu", slow_kernel_id="baseline",
                                      fast_kernel_id=good["kernel_id"],
                                      summary="**Fuse the activation**\nOne nisa.activation(op=nl.silu) call.")
            assert not err and lesson["speedup"] == pytest.approx(good["speedup_over_parent"])
            err, mem = await _call(client, "memory", problem="silu")
            assert [m["item_id"] for m in mem["items"]] == [lesson["item_id"]]
            err, best = await _call(client, "best_kernels", problem="silu", include_source=True)
            assert best["kernels"][0]["kernel_id"] == good["kernel_id"] and best["kernels"][0]["source"] == fused

    _run(session())
    copies = sorted(p.name for p in (run_dir / "kernels" / "agent-silu-small").iterdir())
    assert len(copies) == 2  # the two submitted kernels, for people to read
    # Evaluations too (the judge's input and result caches included) wrote only inside the run directory.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cwd", "run"] and not any((tmp_path / "cwd").iterdir())
    assert (run_dir / ".accelopt_cache" / "eval").is_dir()


@pytest.mark.slow
def test_streamable_http_on_loopback_with_a_postgres_store(tmp_path, pg_url):
    port = free_port()
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "accelopt_nb.cli", "mcp", "--transport", "http", "--port",
                             str(port), "--run-dir", str(tmp_path / "run"), "--store", pg_url, "--session", "web"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, (tmp_path / "server.log").read_text()
                time.sleep(0.5)

        async def session():
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                err, info = await _call(client, "session_info")
                assert info["store_backend"] == "postgresql" and "web" == info["session"]
                err, base = await _call(client, "profile", problem="silu")
                assert not err and base["status"] == "correct" and base["run_id"] == "web-silu-small"

        _run(session())
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
    from accelopt_nb.store import RunStore
    with RunStore(pg_url) as store:  # the evaluation is in the team database, with hw and fidelity
        rows = store.rows("evaluations", "web-silu-small")
        assert [(r["kernel_id"], r["hw"], r["fidelity"], r["status"]) for r in rows] == \
            [("baseline", "trn1", "full", "correct")]
