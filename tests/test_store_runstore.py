"""The SQLite run store: idempotent writes, atomic steps, resume points, pandas accessors."""
from __future__ import annotations

import sqlite3
import threading

import pandas as pd
import pytest

from accelopt_nb.errors import StoreError
from accelopt_nb.store import DEFAULT_FILENAME, RunStore, sha256_text

SOURCE = "import neuronxcc.nki as nki\n\n@nki.jit\ndef kernel(x):\n    return x\n"
STEPS = ["plan", "execute", "select", "summarize"]


@pytest.fixture
def store(tmp_path):
    s = RunStore.open(tmp_path / "exp")
    s.create_run("r1", {"model": "gpt-oss-120b", "beam": 6, "iterations": 16},
                 prices={"as_of": "2026-11"})
    yield s
    s.close()


def test_one_file_per_experiment_directory_in_wal_mode(tmp_path):
    s = RunStore.open(tmp_path / "exp")
    assert s.path == tmp_path / "exp" / DEFAULT_FILENAME
    s.close()
    conn = sqlite3.connect(tmp_path / "exp" / DEFAULT_FILENAME)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    assert RunStore(tmp_path / "exp").path == tmp_path / "exp" / DEFAULT_FILENAME


def test_run_config_roundtrip_and_resume_guard(store):
    run = store.get_run("r1")
    assert run["config"] == {"model": "gpt-oss-120b", "beam": 6, "iterations": 16}
    assert run["prices"] == {"as_of": "2026-11"}
    assert store.create_run("r1", {"model": "gpt-oss-120b", "beam": 6, "iterations": 16}) is False
    with pytest.raises(StoreError, match="different config"):
        store.create_run("r1", {"model": "claude", "beam": 6, "iterations": 16})
    store.set_run_status("r1", "running")
    assert store.runs_df().loc[0, "status"] == "running"
    with pytest.raises(StoreError, match="no run"):
        store.get_run("missing")


def test_writes_are_idempotent(store):
    k1 = store.add_kernel("r1", problem_id="softmax", source=SOURCE, iteration=0)
    k2 = store.add_kernel("r1", problem_id="softmax", source=SOURCE, iteration=0)
    assert k1 == k2
    p1 = store.add_plan("r1", problem_id="softmax", iteration=0, text="tile by 128", parent_kernel_id=k1)
    assert store.add_plan("r1", problem_id="softmax", iteration=0, text="tile by 128",
                          parent_kernel_id=k1) == p1
    e = store.add_evaluation("r1", kernel_id=k1, backend="sim", status="ok", correct=True, latency_us=12.5,
                             sha256=sha256_text(SOURCE))
    assert store.add_evaluation("r1", kernel_id=k1, backend="sim", status="ok", correct=True,
                                latency_us=12.5, sha256=sha256_text(SOURCE)) == e
    store.add_memory_item("r1", problem_id="softmax", iteration=0, summary="fuse exp", speedup=1.3)
    store.add_memory_item("r1", problem_id="softmax", iteration=0, summary="fuse exp", speedup=1.3)
    store.add_problem("r1", "softmax", {"shape": [4, 128]})
    store.add_problem("r1", "softmax", {"shape": [4, 128]})
    counts = store.table_counts("r1")
    assert {k: counts[k] for k in ("problems", "kernels", "plans", "evaluations", "memory_items")} == \
        dict(problems=1, kernels=1, plans=1, evaluations=1, memory_items=1)


def test_conflicting_rewrite_is_an_error(store):
    k = store.add_kernel("r1", problem_id="p", source=SOURCE, iteration=0, kernel_id="fixed")
    with pytest.raises(StoreError, match="conflicting write to kernels.*source"):
        store.add_kernel("r1", problem_id="p", source=SOURCE + "# changed\n", iteration=0, kernel_id=k)
    store.add_evaluation("r1", kernel_id=k, backend="sim", status="ok", latency_us=1.0)
    with pytest.raises(StoreError, match="latency_us"):
        store.add_evaluation("r1", kernel_id=k, backend="sim", status="ok", latency_us=2.0)
    # A re-measurement is a new attempt, not an overwrite.
    store.add_evaluation("r1", kernel_id=k, backend="sim", status="ok", latency_us=2.0, attempt=1)


def test_rows_need_an_existing_run(store):
    with pytest.raises(StoreError, match="FOREIGN KEY"):
        store.add_kernel("nope", problem_id="p", source=SOURCE, iteration=0)


def test_step_commits_rows_with_its_done_marker(store):
    with store.step("r1", 0, "execute", scope="softmax") as st:
        kid = st.add_kernel(problem_id="softmax", source=SOURCE, iteration=0, plan_id="p0")
        st.add_evaluation(kernel_id=kid, backend="sim", status="ok", correct=True, latency_us=3.0)
        st.info["kernels"] = 1
        assert st.pending == 2
        # Nothing is visible until the step completes.
        assert store.table_counts("r1")["kernels"] == 0
        assert not store.is_step_done("r1", 0, "execute", scope="softmax")
    assert store.table_counts("r1")["kernels"] == 1
    assert store.is_step_done("r1", 0, "execute", scope="softmax")
    steps = store.steps_df("r1")
    assert steps.loc[0, "status"] == "done" and steps.loc[0, "info"] == {"kernels": 1}
    with pytest.raises(StoreError, match="already done"):
        with store.step("r1", 0, "execute", scope="softmax"):
            pass


def test_failed_step_keeps_nothing_and_can_rerun(store):
    with pytest.raises(RuntimeError, match="evaluator crashed"):
        with store.step("r1", 0, "execute") as st:
            st.add_kernel(problem_id="p", source=SOURCE, iteration=0)
            raise RuntimeError("evaluator crashed")
    assert store.table_counts("r1")["kernels"] == 0
    row = store.steps_df("r1").iloc[0]
    assert row["status"] == "failed" and "evaluator crashed" in row["info"]["error"]
    assert store.resume_point("r1", STEPS) == (0, "plan")
    with store.step("r1", 0, "execute") as st:
        st.add_kernel(problem_id="p", source=SOURCE, iteration=0)
    assert store.is_step_done("r1", 0, "execute")


def test_resume_point_follows_the_last_completed_step(store):
    assert store.resume_point("r1", STEPS, scope="a") == (0, "plan")
    for it, step in [(0, "plan"), (0, "execute"), (0, "select"), (0, "summarize"), (1, "plan")]:
        store.mark_step("r1", it, step, "done", scope="a")
    assert store.resume_point("r1", STEPS, scope="a") == (1, "execute")
    store.mark_step("r1", 1, "execute", "done", scope="a")
    store.mark_step("r1", 1, "select", "done", scope="a")
    store.mark_step("r1", 1, "summarize", "done", scope="a")
    assert store.resume_point("r1", STEPS, scope="a") == (2, "plan")
    # Scopes (problems) resume independently; a started-but-unfinished step is not done.
    store.mark_step("r1", 0, "plan", "started", scope="b")
    assert store.resume_point("r1", STEPS, scope="b") == (0, "plan")
    assert store.completed_steps("r1", scope="a")[:2] == [(0, "plan"), (0, "execute")]


def test_pandas_accessors_for_every_table(store):
    kid = store.add_kernel("r1", problem_id="p", source=SOURCE, iteration=2, data={"tags": ["fused"]})
    store.add_problem("r1", "p", {"flops": 1e9})
    store.add_plan("r1", problem_id="p", iteration=2, text="t", data={"steps": 3})
    store.add_evaluation("r1", kernel_id=kid, backend="sim", status="ok", correct=False,
                         latency_us=float("inf"), result={"l2": 0.5})
    store.add_memory_item("r1", problem_id="p", iteration=2, summary="s", speedup=1.5)
    store.record_llm_call({"call_id": "c1", "run_id": "r1", "iteration": 2, "role": "planner",
                           "model": "m", "status": "ok", "cost_usd": 0.01, "replayed": True})
    store.mark_step("r1", 2, "plan", "done")
    frames = {name: getattr(store, f"{name}_df")("r1") for name in
              ("problems", "kernels", "plans", "evaluations", "memory_items", "llm_calls", "steps")}
    frames["runs"] = store.runs_df()
    for name, df in frames.items():
        assert isinstance(df, pd.DataFrame) and len(df) == 1, name
    assert frames["runs"].loc[0, "config"]["beam"] == 6
    assert frames["kernels"].loc[0, "data"] == {"tags": ["fused"]}
    assert frames["kernels"].loc[0, "sha256"] == sha256_text(SOURCE)
    ev = frames["evaluations"].loc[0]
    assert ev["latency_us"] == float("inf") and not ev["correct"] and ev["result"] == {"l2": 0.5}
    assert pd.api.types.is_datetime64_any_dtype(frames["kernels"]["created_at"])
    assert bool(frames["llm_calls"].loc[0, "replayed"]) is True
    assert store.total_llm_cost("r1") == pytest.approx(0.01)


def test_find_evaluation_by_source_hash(store):
    kid = store.add_kernel("r1", problem_id="p", source=SOURCE, iteration=0)
    assert store.find_evaluation(sha256_text(SOURCE), "sim") is None
    store.add_evaluation("r1", kernel_id=kid, backend="sim", status="ok", latency_us=9.0,
                         sha256=sha256_text(SOURCE))
    assert store.find_evaluation(sha256_text(SOURCE), "sim")["latency_us"] == 9.0
    assert store.find_evaluation(sha256_text(SOURCE), "trn1") is None


def test_concurrent_ledger_writes_from_threads(store):
    def writer(t):
        for i in range(25):
            store.record_llm_call({"call_id": f"t{t}-{i}", "run_id": "r1", "role": "executor", "model": "m",
                                   "status": "ok", "cost_usd": 0.001})

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    with store.step("r1", 0, "execute") as st:  # a step commit interleaves with them
        st.add_kernel(problem_id="p", source=SOURCE, iteration=0)
    for t in threads:
        t.join()
    assert store.table_counts("r1")["llm_calls"] == 100
    assert store.total_llm_cost("r1") == pytest.approx(0.1)


def test_newer_schema_is_refused(tmp_path):
    s = RunStore(tmp_path / "x.sqlite")
    s._conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    s.close()
    with pytest.raises(StoreError, match="schema version 99"):
        RunStore(tmp_path / "x.sqlite")


def test_reopen_sees_committed_data(tmp_path):
    with RunStore.open(tmp_path / "e") as s:
        s.create_run("r", {"a": 1})
        s.add_kernel("r", problem_id="p", source=SOURCE, iteration=0)
    with RunStore.open(tmp_path / "e") as s:
        assert len(s.kernels_df("r")) == 1 and s.run_ids() == ["r"]


def test_frames_keep_none_for_missing_text_and_json(store):
    """pandas 3 would turn a text column with gaps into str+NaN; the accessors keep None."""
    store.add_kernel("r1", problem_id="p", source=SOURCE, iteration=0, data={"order": 1})
    store.add_kernel("r1", problem_id="p", source=SOURCE + "#2\n", iteration=1, parent_id="k-parent")
    df = store.kernels_df("r1")
    assert list(df["data"]) == [{"order": 1}, None]
    assert df.loc[0, "parent_id"] is None and df.loc[1, "parent_id"] == "k-parent"
    assert df["iteration"].dtype == "int64"
    store.record_llm_call({"call_id": "a", "run_id": "r1", "role": "planner", "model": "m", "status": "ok",
                           "iteration": 0, "cost_usd": 0.5})
    store.record_llm_call({"call_id": "b", "run_id": "r1", "role": "planner", "model": "m", "status": "error",
                           "cost_usd": None})
    calls = store.llm_calls_df("r1")
    assert calls["iteration"].isna().tolist() == [False, True]
    from accelopt_nb.llm import summarize_calls

    summary = summarize_calls(calls).iloc[0]
    assert (summary["calls"], summary["failed_calls"], summary["cost_usd"]) == (2, 1, 0.5)


def test_plain_rows_without_pandas(store):
    kid = store.add_kernel("r1", problem_id="p", source=SOURCE, iteration=0, data={"order": 2})
    store.add_evaluation("r1", kernel_id=kid, backend="sim", status="ok", correct=True)
    rows = store.rows("kernels", "r1")
    assert rows[0]["data"] == {"order": 2} and rows[0]["parent_id"] is None and "data_json" not in rows[0]
    assert store.rows("evaluations", "r1")[0]["latency_us"] is None
    with pytest.raises(StoreError, match="unknown store table"):
        store.rows("nope")


def test_a_store_written_before_the_finish_reason_column_still_loads_and_records(tmp_path):
    import sqlite3

    from accelopt_nb.store import DEFAULT_FILENAME, RunStore

    old = RunStore.open(tmp_path)
    old.create_run("r1", {"beam": 6})
    old.record_llm_call({"call_id": "c1", "run_id": "r1", "role": "planner", "model": "m", "status": "ok"})
    old.close()
    with sqlite3.connect(tmp_path / DEFAULT_FILENAME) as conn:   # the table as it was first released
        conn.execute("ALTER TABLE llm_calls DROP COLUMN finish_reason")
    store = RunStore.open(tmp_path)
    store.record_llm_call({"call_id": "c2", "run_id": "r1", "role": "planner", "model": "m", "status": "ok",
                           "finish_reason": "length"})
    df = store.llm_calls_df("r1")
    assert list(df["call_id"]) == ["c1", "c2"]
    assert df["finish_reason"].tolist() == [None, "length"]
    store.close()
