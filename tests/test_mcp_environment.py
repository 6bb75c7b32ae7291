"""The agent environment behind `accelopt mcp`, called directly (no MCP transport, no kernel runs):
input validation and its structured errors, the store-backed tools, the API reference, the skill."""
from __future__ import annotations

import json
import re
import tomllib

import pytest

from accelopt_nb.cli import main
from accelopt_nb.errors import ConfigError
from accelopt_nb.mcp import Environment, Limits, ToolFailure, skill_text

KERNEL = "import neuronxcc.nki as nki\n\n@nki.jit\ndef kernel(x):\n    return x\n"


@pytest.fixture
def env(tmp_path):
    e = Environment(tmp_path / "run", session="s", limits=Limits(max_source_bytes=1000, max_text_chars=200))
    yield e
    e.close()


def _code(fn, *args, **kwargs) -> dict:
    with pytest.raises(ToolFailure) as info:
        fn(*args, **kwargs)
    return info.value.to_dict()["error"]


def test_problems_and_the_session_run(env, tmp_path):
    problems = env.list_problems()["problems"]
    assert len(problems) == 14
    mm = next(p for p in problems if p["name"] == "matmul")
    assert mm["peak"]["trn1"]["paper"]["bound"] == "mm" and mm["shapes"]["small"] == {"M": 256, "N": 640, "K": 384}
    shown = env.show_problem("matmul", "small")
    assert shown["run_id"] == "s-matmul-small" and shown["peak"]["trn2"]["ms"] > 0
    assert "def get_adversarial_inputs" not in shown["reference_source"]
    rows = env.store.rows("kernels", "s-matmul-small")
    assert [(r["kernel_id"], r["iteration"], r["source"]) for r in rows] == [
        ("baseline", -1, shown["baseline_source"])]
    assert env.session_info()["runs"] == {"matmul/small": "s-matmul-small"}
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_every_bad_input_is_a_structured_error(env):
    e = _code(env.show_problem, "softmax")
    assert e["code"] == "unknown_problem" and e["did_you_mean"] == ["bmm_softmax"] and len(e["known"]) == 14
    e = _code(env.show_problem, "silu", "tiny")
    assert (e["code"], e["field"], e["choices"]) == ("unknown_shapes", "shapes", ["paper", "small"])
    assert _code(env.evaluate, "silu", KERNEL, hw="trn3")["code"] == "unknown_hw"
    assert _code(env.evaluate, "silu", KERNEL, fidelity="quick")["code"] == "unknown_fidelity"
    e = _code(env.evaluate, "silu", "#" * 1001)
    assert (e["code"], e["limit"], e["field"]) == ("source_too_large", 1000, "source")
    assert _code(env.evaluate, "silu", "   \n")["code"] == "invalid_argument"
    assert _code(env.evaluate, "silu", 42)["field"] == "source"
    for name in ("../kernel.py", "/etc/passwd.py", "a/b.py", "kernel.txt", ""):
        assert _code(env.simulate, "silu", KERNEL, filename=name)["field"] == "filename"
    assert _code(env.simulate, "silu", KERNEL, seed=-1)["field"] == "seed"
    assert _code(env.evaluate, "silu", KERNEL, plan="x" * 201)["code"] == "too_large"
    assert _code(env.best_kernels, limit=101)["field"] == "limit"
    assert _code(env.lineage, "../../etc")["code"] == "invalid_argument"
    assert _code(env.get_kernel, "k-missing")["code"] == "unknown_kernel"
    assert _code(env.profile, "silu", kernel_id="k-missing")["code"] == "unknown_kernel"
    with pytest.raises(ConfigError, match="session name"):
        Environment(env.run_dir, session="../escape")


def test_store_tools_lineage_best_and_memory(env):
    run = env.run_id("silu", "small")
    base_result = {"hw": "trn1", "fidelity": "full"}
    env.store.add_evaluation(run, kernel_id="baseline", backend="simulator", status="correct", correct=True,
                             latency_us=8.0, pct_peak=36.0, result=base_result, attempt=0)
    plan = env.store.add_plan(run, problem_id="silu", iteration=0, text="fuse", parent_kernel_id="baseline")
    kid = env.store.add_kernel(run, problem_id="silu", source=KERNEL, iteration=0, parent_id="baseline",
                               plan_id=plan, origin="mcp")
    env.store.add_evaluation(run, kernel_id=kid, backend="simulator", status="correct", correct=True,
                             latency_us=5.0, pct_peak=58.0, result=base_result, attempt=0)
    bad = env.store.add_kernel(run, problem_id="silu", source=KERNEL + "#\n", iteration=1, parent_id=kid)

    chain = env.lineage(bad)["chain"]
    assert [c["kernel_id"] for c in chain] == ["baseline", kid, bad]
    assert chain[1]["plan"] == "fuse" and chain[1]["speedup_over_parent"] == pytest.approx(1.6)
    assert env.get_kernel(kid)["plan"] == "fuse" and env.get_kernel(kid)["evaluations"][0]["latency_ms"] == 0.005
    best = env.best_kernels("silu", include_source=True)["kernels"]
    assert [b["kernel_id"] for b in best] == [kid, "baseline"] and best[0]["source"] == KERNEL

    e = _code(env.add_memory, "silu", kid, bad, "lesson")
    assert e["code"] == "not_measured" and e["kernel_ids"] == [bad]
    assert _code(env.add_memory, "silu", kid, kid, "lesson")["code"] == "invalid_argument"
    item = env.add_memory("silu", "baseline", kid, "**Fuse**\nOne activation.")
    assert item["speedup"] == pytest.approx(1.6) and item["title"] == "Fuse"
    assert [m["item_id"] for m in env.memory("silu")["items"]] == [item["item_id"]]

    other = Environment(env.run_dir, session="t")            # another session, same store
    other.run_id("silu", "small")
    env.store.add_kernel("t-silu-small", kernel_id=kid, problem_id="silu", source=KERNEL, iteration=0,
                         parent_id="baseline")
    assert other.get_kernel(kid)["run_id"] == "t-silu-small"   # a session's own runs come first
    assert other.get_kernel(kid, run_id="s-silu-small")["plan"] == "fuse"
    third = Environment(env.run_dir, session="u")              # no runs of its own: the whole store
    e = _code(third.get_kernel, kid)
    assert e["code"] == "ambiguous_kernel" and sorted(e["runs"]) == ["s-silu-small", "t-silu-small"]
    other.close(), third.close()


def test_nki_api_reference(env):
    entry = env.nki_api("nisa.nc_matmul")["entries"][0]
    assert entry["module"] == "neuronxcc.nki.isa" and "moving" in entry["signature"]
    both = env.nki_api("nl.load", "both")["entries"]
    assert [b["front_end"] for b in both] == ["neuronxcc", "nki"]
    assert env.nki_api("affine_range")["entries"][0]["api"] == "nl.affine_range"
    assert any("sequential_range" in r["text"] for r in env.nki_api("nl.affine_range")["entries"][0]["rules"])
    e = _code(env.nki_api, "nisa.nc_matmull")
    assert e["code"] == "unknown_api" and "nisa.nc_matmul" in e["did_you_mean"]
    assert _code(env.nki_api, "torch.matmul")["code"] == "unknown_api"
    assert _code(env.nki_api, "nl.load", "jax")["code"] == "unknown_front_end"


def test_the_skill_names_only_real_tools():
    from accelopt_nb.mcp.server import TOOL_NAMES

    text = skill_text()
    assert text.startswith("---\nname: accelopt-nkibench\n")
    used = set(re.findall(r"`([a-z_]+)\(", text)) | set(re.findall(r"^\s+([a-z_]+)\(", text, re.M))
    assert used and used <= set(TOOL_NAMES), used - set(TOOL_NAMES)
    for role in ("planner", "executor", "summarizer", "beam", "memory"):
        assert role in text


def test_cli_skill_client_config_and_loopback_only(tmp_path, capsys):
    assert main(["mcp", "--skill"]) == 0
    assert capsys.readouterr().out == skill_text()
    assert main(["mcp", "--run-dir", str(tmp_path / "r"), "--store", "postgresql://me@db/k",
                 "--client-config", "claude"]) == 0
    cfg = json.loads(capsys.readouterr().out)["mcpServers"]["accelopt"]
    assert cfg["args"][-5:] == ["mcp", "--run-dir", str((tmp_path / "r").resolve()), "--store", "postgresql://me@db/k"]
    assert main(["mcp", "--client-config", "codex"]) == 0
    assert tomllib.loads(capsys.readouterr().out)["mcp_servers"]["accelopt"]["args"][-2] == "--run-dir"
    assert main(["mcp", "--transport", "http", "--host", "0.0.0.0"]) == 2
    assert "loopback only" in capsys.readouterr().err
