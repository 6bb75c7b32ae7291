"""The run store on PostgreSQL: the SQLite store's semantics, two concurrent sessions on one
database, lineage and best kernels across runs, and export/import between the two backends.

A real server (Debian's ``postgresql`` package, a throwaway cluster per test session) runs
every test here; see ``pg_fixtures.py``.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import time

import pytest

import test_store_runstore as sqlite_suite
from accelopt_nb.errors import StoreError
from accelopt_nb.store import RunStore
from accelopt_nb.store.backends import open_backend, postgres_ddl, redact_url
from accelopt_nb.store.queries import best_kernels, lineage, memory_items
from accelopt_nb.store.schema import COLUMNS, DDL
from accelopt_nb.store.transfer import export_runs, import_runs
from pg_fixtures import pg_server, pg_url  # noqa: F401  (fixtures)

SOURCE = sqlite_suite.SOURCE


@pytest.fixture
def store(pg_url):  # the same fixture as the SQLite suite's, on PostgreSQL
    s = RunStore(pg_url)
    s.create_run("r1", {"model": "gpt-oss-120b", "beam": 6, "iterations": 16}, prices={"as_of": "2026-11"})
    yield s
    s.close()


# The SQLite suite's behavioural tests, run again here against the PostgreSQL fixture above.
test_run_config_roundtrip_and_resume_guard = sqlite_suite.test_run_config_roundtrip_and_resume_guard
test_writes_are_idempotent = sqlite_suite.test_writes_are_idempotent
test_conflicting_rewrite_is_an_error = sqlite_suite.test_conflicting_rewrite_is_an_error
test_rows_need_an_existing_run = sqlite_suite.test_rows_need_an_existing_run
test_step_commits_rows_with_its_done_marker = sqlite_suite.test_step_commits_rows_with_its_done_marker
test_failed_step_keeps_nothing_and_can_rerun = sqlite_suite.test_failed_step_keeps_nothing_and_can_rerun
test_resume_point_follows_the_last_completed_step = sqlite_suite.test_resume_point_follows_the_last_completed_step
test_pandas_accessors_for_every_table = sqlite_suite.test_pandas_accessors_for_every_table
test_find_evaluation_by_source_hash = sqlite_suite.test_find_evaluation_by_source_hash
test_concurrent_ledger_writes_from_threads = sqlite_suite.test_concurrent_ledger_writes_from_threads
test_frames_keep_none_for_missing_text_and_json = sqlite_suite.test_frames_keep_none_for_missing_text_and_json
test_plain_rows_without_pandas = sqlite_suite.test_plain_rows_without_pandas


def test_both_backends_have_the_same_tables_and_columns(pg_url, tmp_path):
    pg, lite = RunStore(pg_url), RunStore(tmp_path / "x.sqlite")
    for table, cols in COLUMNS.items():
        assert list(pg.backend.declared_types(pg._conn, table)) == list(cols), table
        assert pg.backend.declared_types(pg._conn, table) == lite.backend.declared_types(lite._conn, table)
    assert "DOUBLE PRECISION" in postgres_ddl(DDL) and " REAL" not in postgres_ddl(DDL)
    pg.close(), lite.close()


def test_urls_and_errors():
    assert redact_url("postgresql://bob:secret@db.example:5432/k") == "postgresql://bob:***@db.example:5432/k"
    with pytest.raises(StoreError, match="unsupported run store URL"):
        open_backend("mysql://db/x")
    with pytest.raises(StoreError, match="cannot connect"):
        RunStore("postgresql://nobody@127.0.0.1:1/none")


def test_infinite_latency_and_newer_schema(store, pg_url):
    kid = store.add_kernel("r1", problem_id="p", source=SOURCE, iteration=0)
    store.add_evaluation("r1", kernel_id=kid, backend="simulator", status="incorrect", latency_us=float("inf"),
                         result={"hw": "trn2", "fidelity": "screen"})
    row = store.rows("evaluations", "r1")[0]
    assert row["latency_us"] == float("inf") and (row["hw"], row["fidelity"]) == ("trn2", "screen")
    store._conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    with pytest.raises(StoreError, match="schema version 99"):
        RunStore(pg_url)


# ------------------------------------------------------------------------ two concurrent sessions
def _session(url: str, name: str, start_at: float, n: int, queue) -> None:
    """One optimization session: its own run, plus writes into a run both sessions share."""
    store = RunStore(url)
    while time.time() < start_at:  # both processes begin writing at the same moment
        time.sleep(0.001)
    mine = f"run-{name}"
    store.create_run(mine, {"session": name})
    store.create_run("shared", {"team": "kernels"})               # both create it: one row
    store.add_problem(mine, "silu")
    store.add_problem("shared", "silu")
    parent = store.add_kernel(mine, kernel_id="baseline", problem_id="silu", source=SOURCE, iteration=-1)
    store.add_evaluation(mine, kernel_id=parent, backend="simulator", status="correct", correct=True,
                         latency_us=100.0, result={"hw": "trn1", "fidelity": "full"})
    shared_parent = store.add_kernel("shared", kernel_id="baseline", problem_id="silu", source=SOURCE,
                                     iteration=-1)                 # identical row from both: no-op
    stamps = []
    for it in range(n):
        with store.step(mine, it, "execute", scope="silu") as st:
            plan = st.add_plan(problem_id="silu", iteration=it, parent_kernel_id=parent, text=f"{name} step {it}")
            kid = st.add_kernel(problem_id="silu", source=SOURCE + f"# {name} {it}\n", iteration=it,
                                parent_id=parent, plan_id=plan, origin=name)
            st.add_evaluation(kernel_id=kid, backend="simulator", status="correct", correct=True,
                              latency_us=99.0 - it - (0.5 if name == "b" else 0.0),
                              result={"hw": "trn1", "fidelity": "full"})
        shared_parent = store.add_kernel("shared", problem_id="silu", source=SOURCE + f"# shared {name} {it}\n",
                                         iteration=it, parent_id=shared_parent, origin=name)
        store.record_llm_call({"call_id": f"{name}-{it}", "run_id": mine, "role": "executor", "model": "m",
                               "status": "ok", "cost_usd": 0.01})
        stamps.append(time.time())
        parent = kid
    store.add_memory_item(mine, problem_id="silu", iteration=n - 1, summary=f"lesson from {name}",
                          slow_kernel_id="baseline", fast_kernel_id=parent, speedup=100.0 / (99.0 - n + 1))
    store.close()
    queue.put((name, stamps[0], stamps[-1], parent))


@pytest.mark.slow
def test_two_concurrent_sessions_on_one_database(pg_url):
    n = 20
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    start_at = time.time() + 3.0
    procs = [ctx.Process(target=_session, args=(pg_url, name, start_at, n, queue)) for name in ("a", "b")]
    for p in procs:
        p.start()
    results = {}
    for _ in procs:
        name, first, last, leaf = queue.get(timeout=300)
        results[name] = (first, last, leaf)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    # The two sessions really overlapped in time.
    (a0, a1, _), (b0, b1, _) = results["a"], results["b"]
    assert a0 < b1 and b0 < a1

    store = RunStore(pg_url)
    assert sorted(store.run_ids()) == ["run-a", "run-b", "shared"]
    for name in ("a", "b"):
        counts = store.table_counts(f"run-{name}")
        assert (counts["kernels"], counts["evaluations"], counts["plans"], counts["steps"],
                counts["llm_calls"], counts["memory_items"]) == (n + 1, n + 1, n, n, n, 1)
        assert store.completed_steps(f"run-{name}", scope="silu") == [(i, "execute") for i in range(n)]
        chain = lineage(store, f"run-{name}", results[name][2])
        assert [r["kernel_id"] for r in chain][0] == "baseline" and len(chain) == n + 1
        assert [r["plan"] for r in chain[1:]] == [f"{name} step {i}" for i in range(n)]
        assert all(r["speedup_over_parent"] > 1.0 for r in chain[1:])
    shared = store.table_counts("shared")
    assert shared["kernels"] == 1 + 2 * n and shared["problems"] == 1
    best = best_kernels(store, problem="silu", hw="trn1", limit=3)
    assert [b["run_id"] for b in best] == ["run-b", "run-a", "run-b"]
    assert best[0]["latency_ms"] == pytest.approx((99.0 - (n - 1) - 0.5) / 1e3)
    assert {m["summary"] for m in memory_items(store, problem="silu")} == {"lesson from a", "lesson from b"}
    store.close()


# ----------------------------------------------------------------------------- export / import
def test_export_import_between_sqlite_and_postgres(tmp_path, pg_url):
    lite = RunStore(tmp_path / "exp")
    lite.create_run("r1", {"beam": 6})
    base = lite.add_kernel("r1", kernel_id="baseline", problem_id="silu", source=SOURCE, iteration=-1)
    lite.add_evaluation("r1", kernel_id=base, backend="simulator", status="correct", correct=True,
                        latency_us=10.0, result={"hw": "trn1", "fidelity": "full"})
    plan = lite.add_plan("r1", problem_id="silu", iteration=0, text="fuse", parent_kernel_id=base)
    child = lite.add_kernel("r1", problem_id="silu", source=SOURCE + "#2\n", iteration=0, parent_id=base,
                            plan_id=plan)
    lite.add_evaluation("r1", kernel_id=child, backend="simulator", status="correct", correct=True,
                        latency_us=float("inf"), result={"hw": "trn1", "fidelity": "full"})
    lite.mark_step("r1", 0, "plan", "done", scope="silu", info={"n": 1})
    lite.record_llm_call({"call_id": "c1", "run_id": "r1", "role": "planner", "model": "m", "status": "ok"})
    dump = tmp_path / "runs.jsonl"
    counts = export_runs(lite, dump)
    assert counts == {"runs": 1, "kernels": 2, "plans": 1, "evaluations": 2, "steps": 1, "llm_calls": 1}
    assert json.loads(dump.read_text().splitlines()[0])["format"] == "accelopt-runs"

    pg = RunStore(pg_url)
    assert import_runs(pg, dump) == counts
    assert import_runs(pg, dump) == counts          # idempotent: nothing doubles
    assert pg.table_counts("r1") == lite.table_counts("r1")
    for table in ("runs", "kernels", "plans", "evaluations", "steps", "llm_calls"):
        assert pg.rows(table, "r1") == lite.rows(table, "r1"), table
    assert [r["kernel_id"] for r in lineage(pg, "r1", child)] == ["baseline", child]

    back = tmp_path / "back.jsonl"               # and back again, into a fresh SQLite store
    export_runs(pg, back, ["r1"])
    again = RunStore(tmp_path / "again.sqlite")
    import_runs(again, back)
    assert again.rows("evaluations", "r1") == lite.rows("evaluations", "r1")

    lite.set_run_status("r1", "finished")        # a different run under the same id: refused whole
    export_runs(lite, dump)
    with pytest.raises(StoreError, match="conflicting write to runs"):
        import_runs(pg, dump)
    with pytest.raises(StoreError, match="no run"):
        export_runs(lite, dump, ["nope"])
    lite.close(), pg.close(), again.close()


def test_the_store_command_on_a_postgres_url(tmp_path, pg_url, capsys):
    from accelopt_nb.cli import main

    lite = RunStore(tmp_path / "exp")
    lite.create_run("r1", {"beam": 6})
    base = lite.add_kernel("r1", kernel_id="baseline", problem_id="silu", source=SOURCE, iteration=-1)
    lite.add_evaluation("r1", kernel_id=base, backend="simulator", status="correct", correct=True,
                        latency_us=10.0, result={"hw": "trn1", "fidelity": "full"})
    lite.close()
    dump = tmp_path / "r1.jsonl"
    assert main(["store", "export", "--store", str(tmp_path / "exp"), "--run", "r1", str(dump)]) == 0
    assert main(["store", "import", "--store", pg_url, str(dump)]) == 0
    out = capsys.readouterr().out
    assert "2 kernels" not in out and "1 kernels" in out and "postgresql://" in out
    assert main(["store", "best", "--store", pg_url, "--problem", "silu", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)
    assert [(b["run_id"], b["kernel_id"], b["latency_ms"]) for b in best] == [("r1", "baseline", 0.01)]


def test_a_dropped_connection_is_replaced(store, pg_url):
    import psycopg

    store.add_kernel("r1", problem_id="p", source=SOURCE, iteration=0)
    with psycopg.connect(pg_url, autocommit=True) as admin:   # the server drops every other session
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE datname = current_database() AND pid <> pg_backend_pid()")
    assert store.run_ids() == ["r1"]                            # reconnected for the next statement
    store.add_kernel("r1", problem_id="p", source=SOURCE + "#2\n", iteration=1)
    assert store.table_counts("r1")["kernels"] == 2


# ------------------------------------------------------------ two searches writing one team database
@pytest.mark.slow
def test_two_concurrent_optimize_runs_share_one_database(tmp_path, pg_url):
    """`accelopt optimize --store postgresql://...` twice at once: both runs land in the database whole, with
    lineage, evaluations per hardware, plans and lessons. Each run has its own fake model server: the fake hands
    out plans in request order per kernel, so one shared fake would give a run both copies of one plan whenever
    the two runs' requests interleave that way (a race, not a store fault)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from fakes.fake_nki_llm import FakeNKIModel, harmless_variation, matmul_column_outer
    from fakes.fake_openai_server import FakeOpenAIServer

    root = Path(__file__).resolve().parent.parent

    def model() -> FakeNKIModel:
        return FakeNKIModel(plans=["COLUMN BLOCKS OUTER: load each block of B once, not once per row block.",
                                   "HARMLESS: tidy the loop nest without changing it."],
                            rewrites=[("COLUMN BLOCKS OUTER", matmul_column_outer), ("HARMLESS", harmless_variation)],
                            lesson="**Load a reused operand once**\nPut the loop over its blocks outside the loop that "
                                   "reuses it.")
    env = {**os.environ, "PYTHONPATH": str(root), "ACCELOPT_CACHE_DIR": str(tmp_path / "cache")}

    def optimize(url: str, who: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "accelopt_nb.cli", "optimize", "matmul", "--preset", "smoke", "-T", "1",
                "--shapes", "small", "--base-url", url, "--model", "fake-nki", "--price", "gpt-oss-120b@groq",
                "--run-dir", str(tmp_path / who), "--store", pg_url, "--run-id", f"matmul-{who}",
                "--no-progress", "--json", *extra]

    with FakeOpenAIServer(models=["fake-nki"], responder=model().responder) as srv, \
            FakeOpenAIServer(models=["fake-nki"], responder=model().responder) as other:
        procs = [subprocess.Popen(optimize(url, who), cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for url, who in ((srv.url, "ann"), (other.url, "ben"))]
        outs = [p.communicate(timeout=500) for p in procs]
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 0, err
        reports = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
        nameless = subprocess.run([a for a in optimize(srv.url, "ann", "--resume") if not a.startswith("matmul-")
                                   and a != "--run-id"], cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=120)
        assert nameless.returncode == 2 and "holds everyone's runs" in nameless.stderr

    store = RunStore(pg_url)
    assert sorted(store.run_ids()) == ["matmul-ann", "matmul-ben"]
    assert not (tmp_path / "ann" / "accelopt.sqlite").exists()          # the database, not a local file
    for report in reports:
        run = report["run_id"]
        counts = store.table_counts(run)
        assert counts["kernels"] == 3 and counts["evaluations"] >= 3 and counts["plans"] == 2
        assert counts["memory_items"] == report["memory_items"] and counts["llm_calls"] > 0
        assert {r["hw"] for r in store.rows("evaluations", run)} == {"trn1"}
        best = best_kernels(store, problem="matmul", hw="trn1", limit=20)
        mine = [b for b in best if b["run_id"] == run]
        chain = lineage(store, run, mine[0]["kernel_id"], hw="trn1")
        assert chain[0]["kernel_id"] == "baseline" and chain[-1]["kernel_id"] == mine[0]["kernel_id"]
        assert chain[-1]["speedup_over_parent"] == pytest.approx(report["speedup"], rel=1e-6)
        assert "COLUMN BLOCKS OUTER" in chain[-1]["plan"]
    store.close()
