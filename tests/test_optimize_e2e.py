"""End to end: `accelopt optimize` on NKIBench matmul (small preset) against a fake model server.

The fake model (accelopt_nb/fake_model/nki_model.py) answers over real HTTP with valid NKI kernels: a
genuinely faster matmul (column blocks outside row blocks, B loaded once) and harmless variations of its parent. The
CLI runs as a separate process, is SIGKILLed in the middle of iteration 1, and is resumed.
"""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fakes.fake_nki_llm import FakeNKIModel, harmless_variation, matmul_column_outer, role_of
from fakes.fake_openai_server import FakeOpenAIServer, Slow

ROOT = Path(__file__).resolve().parent.parent
PRICE = (0.15, 0.60)  # gpt-oss-120b@groq in the shipped price table, USD per 1M tokens


def query(db: Path, sql: str, *params):
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError:  # tables not created yet
        return []
    finally:
        conn.close()


class SlowAfter:
    """Wraps the fake model: executor calls after the first ``n`` hang (until released)."""

    def __init__(self, model: FakeNKIModel, n: int) -> None:
        self.model, self.n, self.hang = model, n, True
        self.executor_requests = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict):
        reply = self.model.responder(body)
        if role_of(body) == "executor":
            with self._lock:
                self.executor_requests += 1
                slow = self.hang and self.executor_requests > self.n
            if slow:
                return Slow(60.0, reply)
        return reply


def cli(tmp_path: Path, url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "accelopt_nb.cli", "optimize", "matmul", "--preset", "smoke",
            "--shapes", "small", "--base-url", url, "--model", "fake-nki", "--price", "gpt-oss-120b@groq",
            "--run-dir", str(tmp_path / "run"), "--no-progress", "--workers", "2", *extra]


@pytest.mark.slow
def test_optimize_two_iterations_survive_sigkill_and_resume(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ACCELOPT_CACHE_DIR": str(tmp_path / "cache")}
    db = tmp_path / "run" / "accelopt.sqlite"
    model = FakeNKIModel(plans=["COLUMN BLOCKS OUTER: load each block of B once, not once per row block.",
                                "HARMLESS: tidy the loop nest without changing it."],
                         rewrites=[("COLUMN BLOCKS OUTER", matmul_column_outer), ("HARMLESS", harmless_variation)],
                         lesson="**Load a reused operand once**\nPut the loop over its blocks outside the loop that reuses it.")
    responder = SlowAfter(model, n=2)  # iteration 0 has 1 beam kernel x 2 plans x 1 sample
    with FakeOpenAIServer(models=["fake-nki"], responder=responder) as srv:
        proc = subprocess.Popen(cli(tmp_path, srv.url), cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 120
        # Kill once iteration 1's plans are stored and its executor calls are in flight.
        while time.time() < deadline:
            plan1_done = query(db, "SELECT 1 FROM steps WHERE iteration=1 AND step='plan' AND status='done'")
            if plan1_done and responder.executor_requests >= 4:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        else:
            proc.kill()
            pytest.fail("the run never reached iteration 1's executor calls")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL

        kernels_before = query(db, "SELECT kernel_id, sha256 FROM kernels ORDER BY kernel_id")
        calls_before = [c for (c,) in query(db, "SELECT call_id FROM llm_calls")]
        steps_before = query(db, "SELECT iteration, step FROM steps WHERE status='done'")
        assert (0, "summarize") in steps_before and (1, "plan") in steps_before
        assert (1, "execute") not in steps_before
        assert len(kernels_before) == 3  # the baseline and iteration 0's two kernels
        requests_before = srv.chat_requests
        assert len(calls_before) < requests_before  # the executor calls in flight were lost, nothing else

        responder.hang = False
        done = subprocess.run(cli(tmp_path, srv.url, "--resume", "--json"), cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
        requests_after = srv.chat_requests - requests_before

    # Two iterations ran; the beam improved (the column-outer rewrite is faster) and never regressed.
    assert report["iterations_done"] == 2
    hist = report["history"]
    assert [h["iteration"] for h in hist] == [0, 1]
    assert 1.0 < hist[0]["best_speedup"] <= hist[1]["best_speedup"]
    assert report["speedup"] == pytest.approx(hist[1]["best_speedup"])
    assert report["best_pct_peak"] > report["baseline_pct_peak"] > 0
    assert "nc_matmul" in report["best_source"]
    # Memory items appeared (the column-outer rewrite is > 1.04x faster than its parent).
    assert report["memory_items"] >= 1
    items = query(db, "SELECT speedup FROM memory_items")
    assert items and all(s > 1.04 for (s,) in items)
    # Nothing recorded before the kill was lost or duplicated.
    kernels_after = query(db, "SELECT kernel_id, sha256 FROM kernels ORDER BY kernel_id")
    assert set(kernels_before) <= set(kernels_after)
    assert len(kernels_after) == 3 + 4  # iteration 1: two beam kernels x 2 plans x 1 sample
    assert set(calls_before) <= {c for (c,) in query(db, "SELECT call_id FROM llm_calls")}
    assert query(db, "SELECT COUNT(*) FROM plans WHERE iteration=1")[0][0] == 4  # not re-planned
    # The resumed process made exactly the calls it recorded: 4 executor calls, then summaries.
    calls = query(db, "SELECT role, prompt_tokens, completion_tokens, cost_usd, status FROM llm_calls")
    assert len(calls) == len(calls_before) + requests_after
    assert {c[4] for c in calls} == {"ok"}
    # The ledger adds up: each call priced from its tokens, roles sum to the total.
    for _, p, c, cost, _ in calls:
        assert cost == pytest.approx((p * PRICE[0] + c * PRICE[1]) / 1e6)
    by_role = {u["role"]: u for u in report["usage"]}
    assert sum(u["calls"] for u in report["usage"]) == len(calls)
    assert report["total_cost_usd"] == pytest.approx(sum(c[3] for c in calls))
    assert sum(u["cost_usd"] for u in report["usage"]) == pytest.approx(report["total_cost_usd"])
    assert by_role["planner"]["calls"] == 2 + 4 and by_role["summarizer"]["calls"] >= 1
    assert (tmp_path / "run" / f"best_kernel-{report['run_id']}.py").read_text() == report["best_source"]


def _axpb_args(tmp_path: Path, url: str, *extra: str) -> list[str]:
    from fakes.fake_nki_llm import write_axpb_problem

    task, kern = write_axpb_problem(tmp_path / "problem")
    return ["optimize", "axpb", "--task", str(task), "--kernel", str(kern), "--preset", "smoke", "-T", "1",
            "--base-url", url, "--model", "fake-nki", "--price", "gpt-oss-120b@groq",
            "--run-dir", str(tmp_path / "run"), "--no-progress", *extra]


def test_cli_spending_cap_stops_cleanly_and_resume_finishes(tmp_path, monkeypatch, capsys):
    from fakes.fake_nki_llm import double_tile, set_tile

    from accelopt_nb.cli import main

    monkeypatch.setenv("ACCELOPT_CACHE_DIR", str(tmp_path / "cache"))
    model = FakeNKIModel(plans=["DOUBLE the tile width.", "Use 512-column tiles: WIDE512."],
                         rewrites=[("DOUBLE", double_tile), ("WIDE512", set_tile(512))])
    with FakeOpenAIServer(models=["fake-nki"], responder=model.responder) as srv:
        # One call costs ~0.0002 USD here: the first planner call reserves its estimate, which
        # reaches the cap, so the second never starts; the plan step is left open (a call is
        # missing) and the executor makes no call.
        rc = main(_axpb_args(tmp_path, srv.url, "--cap-usd", "0.0001"))
        out = capsys.readouterr()
        assert rc == 3 and "spending cap" in out.err and "baseline:" in out.out
        db = tmp_path / "run" / "accelopt.sqlite"
        done = {s for (s,) in query(db, "SELECT step FROM steps WHERE status='done' AND iteration=0")}
        assert "plan" not in done and "execute" not in done
        assert model.calls["planner"] == 1 and model.calls["executor"] == 0
        spent = query(db, "SELECT SUM(cost_usd) FROM llm_calls")[0][0]
        assert spent >= 0.0001
        (prices_json,) = query(db, "SELECT prices_json FROM runs")[0]
        prices = json.loads(prices_json)   # the dated price table, with its rules, is recorded with the run
        assert prices["as_of"] and prices["resolved_rules"]
        rc = main(_axpb_args(tmp_path, srv.url, "--resume", "--cap-usd", "1.0", "--json"))
        out = capsys.readouterr()
    assert rc == 0, out.err
    report = json.loads(out.out.strip().splitlines()[-1])
    assert report["iterations_done"] == 1 and report["speedup"] > 1.2      # the wider tile was found (1.40x in the model)
    assert report["total_cost_usd"] == pytest.approx(query(db, "SELECT SUM(cost_usd) FROM llm_calls")[0][0])


def test_cli_argument_errors(tmp_path, capsys):
    from accelopt_nb.cli import main

    assert main(["optimize", "matmul", "--run-dir", str(tmp_path / "r")]) == 2
    assert "--base-url and --model" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()  # nothing written for a bad command line
    assert main(["optimize", "matmul", "--resume", "--run-dir", str(tmp_path / "r")]) == 2
    assert "no run store" in capsys.readouterr().err
    assert main(["optimize", "x", "--task", "t.py", "--base-url", "http://h/v1", "--model", "m",
                 "--run-dir", str(tmp_path / "r2")]) == 2
    assert "--task and --kernel go together" in capsys.readouterr().err


def test_unreachable_endpoint_fails_before_anything_is_written(tmp_path, capsys):
    import socket

    from accelopt_nb.cli import main

    with socket.socket() as sock:  # a loopback port with nothing listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert main(["optimize", "silu", "--preset", "smoke", "--base-url", f"http://127.0.0.1:{port}/v1",
                 "--model", "m", "--run-dir", str(tmp_path / "r")]) == 2
    assert "cannot reach the LLM endpoint" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
