"""Questions a team asks its kernel database, as SQL that SQLite and PostgreSQL both run.

* :func:`best_kernels` — the fastest correct kernels, per problem, hardware and fidelity, over
  every run in the store (everyone's, in a shared database);
* :func:`lineage` — a kernel's ancestry up to the baseline, with the plan that produced each
  step and the speedup of each step over its parent (one recursive query);
* :func:`memory_items` — the newest optimization-memory items of a problem, from every run.

Latencies are in the store's unit (microseconds) and converted to milliseconds here.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from accelopt_nb.errors import StoreError

if TYPE_CHECKING:
    from accelopt_nb.store.runstore import RunStore

__all__ = ["best_kernels", "lineage", "memory_items", "latest_evaluations", "LINEAGE_SQL"]


def _ms(latency_us: Any) -> float | None:
    if latency_us is None:
        return None
    v = float(latency_us)
    return v / 1e3 if math.isfinite(v) else None


def latest_evaluations(store: "RunStore", run_id: str, kernel_id: str) -> list[dict[str, Any]]:
    """Every evaluation of a kernel, the latest attempt last (hardware and fidelity included)."""
    return store.query("SELECT eval_id, backend, hw, fidelity, attempt, status, correct, latency_us, pct_peak, "
                       "created_at FROM evaluations WHERE run_id=? AND kernel_id=? ORDER BY attempt, created_at",
                       (run_id, kernel_id))


def best_kernels(store: "RunStore", *, problem: str | None = None, hw: str | None = None,
                 fidelity: str | None = None, limit: int = 10) -> list[dict[str, Any]]:
    """The fastest correct kernels (one row per kernel, its latest correct evaluation on that
    hardware), fastest first."""
    where = ["e.status = 'correct'", "e.latency_us IS NOT NULL"]
    params: list[Any] = []
    for column, value in (("k.problem_id", problem), ("e.hw", hw), ("e.fidelity", fidelity)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    rows = store.query(
        "SELECT k.run_id, k.kernel_id, k.problem_id, k.parent_id, k.iteration, k.origin, k.sha256, "
        "e.hw, e.fidelity, e.backend, e.attempt, e.latency_us, e.pct_peak, e.created_at "
        "FROM kernels k JOIN evaluations e ON e.run_id = k.run_id AND e.kernel_id = k.kernel_id "
        f"WHERE {' AND '.join(where)} ORDER BY e.latency_us, e.created_at", params)
    seen: set[tuple] = set()
    out = []
    for r in rows:
        key = (r["run_id"], r["kernel_id"], r["hw"], r["fidelity"])
        if key in seen:
            continue
        seen.add(key)
        r["latency_ms"] = _ms(r.pop("latency_us"))
        out.append(r)
        if len(out) >= limit:
            break
    return out


# The kernel, its parent, its parent's parent ... each with its latest evaluation on one hardware.
LINEAGE_SQL = """
WITH RECURSIVE chain(run_id, kernel_id, parent_id, plan_id, iteration, origin, problem_id, depth) AS (
    SELECT run_id, kernel_id, parent_id, plan_id, iteration, origin, problem_id, 0
    FROM kernels WHERE run_id = ? AND kernel_id = ?
    UNION ALL
    SELECT k.run_id, k.kernel_id, k.parent_id, k.plan_id, k.iteration, k.origin, k.problem_id, c.depth + 1
    FROM kernels k JOIN chain c ON k.run_id = c.run_id AND k.kernel_id = c.parent_id
    WHERE c.depth < 1000
)
SELECT c.depth, c.kernel_id, c.parent_id, c.iteration, c.origin, c.problem_id, p.text AS plan,
       e.status, e.latency_us, e.pct_peak, e.hw, e.fidelity, e.attempt
FROM chain c
LEFT JOIN plans p ON p.run_id = c.run_id AND p.plan_id = c.plan_id
LEFT JOIN evaluations e ON e.run_id = c.run_id AND e.kernel_id = c.kernel_id{hw_filter}
ORDER BY c.depth DESC, e.attempt
"""


def lineage(store: "RunStore", run_id: str, kernel_id: str, *, hw: str | None = None) -> list[dict[str, Any]]:
    """The chain from the root (usually the baseline) to ``kernel_id``, one row per kernel with its
    latest evaluation (on ``hw`` when given) and ``speedup`` over its parent."""
    if hw is None:
        rows = store.query(LINEAGE_SQL.format(hw_filter=""), (run_id, kernel_id))
    else:
        # NULL: an evaluation recorded before the store had a hw column (its hardware is not known)
        rows = store.query(LINEAGE_SQL.format(hw_filter=" AND (e.hw = ? OR e.hw IS NULL)"), (run_id, kernel_id, hw))
    if not rows:
        raise StoreError(f"no kernel {kernel_id!r} in run {run_id!r}")
    latest: dict[str, dict[str, Any]] = {}
    for r in rows:  # attempts ascending: the last one wins
        latest[r["kernel_id"]] = r
    chain = sorted(latest.values(), key=lambda r: -r["depth"])
    out = []
    prev_ms = None
    for r in chain:
        latency_us = r.pop("latency_us", None)
        ms = _ms(latency_us) if r.get("status") == "correct" else None
        r["latency_ms"] = ms
        r["speedup_over_parent"] = (prev_ms / ms) if (prev_ms and ms) else None
        prev_ms = ms
        out.append(r)
    return out


def memory_items(store: "RunStore", *, problem: str | None = None, limit: int = 16) -> list[dict[str, Any]]:
    """The newest optimization-memory items (of one problem, or all), newest first."""
    sql = ("SELECT run_id, item_id, problem_id, iteration, slow_kernel_id, fast_kernel_id, speedup, summary, "
           "created_at FROM memory_items")
    params: tuple = ()
    if problem is not None:
        sql += " WHERE problem_id = ?"
        params = (problem,)
    return store.query(sql + f" ORDER BY created_at DESC, item_id LIMIT {int(limit)}", params)
