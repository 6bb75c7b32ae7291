"""The run store: one SQLite file per experiment directory.

Crash safety comes from three choices:

* every write is a short transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``) in WAL mode with
  ``synchronous=FULL``, so a killed process loses nothing that was committed;
* a step's outputs are buffered and committed together with the step's ``done`` marker
  (:meth:`RunStore.step`), so a step is either fully recorded or not at all, and a
  resumed run re-runs exactly the steps without a marker (:meth:`RunStore.resume_point`);
* rows have stable keys and identical rewrites are no-ops (a conflicting rewrite is an
  error), so resuming never duplicates rows.

LLM calls are recorded immediately, outside any step: money spent on a step that was killed
before it finished is still accounted for.
"""
from __future__ import annotations

import json
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from accelopt_nb.errors import StoreError
from accelopt_nb.store import rows as R
from accelopt_nb.store.schema import ADDED_COLUMNS, COLUMNS, DDL, KEYS, SCHEMA_VERSION, VOLATILE

if TYPE_CHECKING:
    import pandas as pd

    from accelopt_nb.store.steps import StepWriter

__all__ = ["RunStore", "DEFAULT_FILENAME"]

DEFAULT_FILENAME = "accelopt.sqlite"

_TIME_COLUMNS = ("created_at", "updated_at", "started_at", "finished_at")
_BOOL_COLUMNS = ("correct", "replayed")


class RunStore:
    """Runs, problems, kernels, evaluations, plans, memory items, LLM calls and steps.

    ``RunStore(path)`` opens (creating if needed) a store file, or the default file
    ``accelopt.sqlite`` inside ``path`` when it is a directory. Thread-safe.
    """

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        if path.is_dir() or (not path.exists() and path.suffix == ""):
            path.mkdir(parents=True, exist_ok=True)
            path = path / DEFAULT_FILENAME
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.RLock()
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves (no implicit transactions).
            self._conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False,
                                         timeout=30.0)
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.executescript(DDL)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open run store {path}: {exc}") from exc
        self._check_version()

    @classmethod
    def open(cls, experiment_dir: str | Path) -> "RunStore":
        """The store of an experiment directory (created if missing)."""
        path = Path(experiment_dir)
        path.mkdir(parents=True, exist_ok=True)
        return cls(path / DEFAULT_FILENAME)

    def _check_version(self) -> None:
        with self._tx() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                conn.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)",
                             (str(SCHEMA_VERSION),))
            elif int(row["value"]) > SCHEMA_VERSION:
                raise StoreError(f"run store {self.path} has schema version {row['value']}, newer than "
                                 f"this accelopt_nb ({SCHEMA_VERSION}); upgrade accelopt_nb")
            for table, column, sql_type in ADDED_COLUMNS:
                present = {r["name"] for r in conn.execute(f"PRAGMA table_info({table})")}
                if column not in present:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {sql_type}")

    # -- transactions ------------------------------------------------------------------
    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _insert(self, conn: sqlite3.Connection, table: str, row: Mapping[str, Any]) -> bool:
        """Insert ``row`` unless its key exists; True if inserted.

        An existing row with the same key must hold the same content, otherwise the write
        is a conflict (two different things given one id) and raises StoreError.
        """
        cols = COLUMNS[table]
        placeholders = ", ".join("?" for _ in cols)
        try:
            cur = conn.execute(f"INSERT OR IGNORE INTO {table} ({', '.join(cols)}) VALUES ({placeholders})",
                               [row.get(c) for c in cols])
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"cannot write {table} row {self._key_text(table, row)}: {exc}") from exc
        if cur.rowcount == 1:
            return True
        keys = KEYS[table]
        existing = conn.execute(f"SELECT * FROM {table} WHERE " + " AND ".join(f"{k}=?" for k in keys),
                                [row.get(k) for k in keys]).fetchone()
        differing = [c for c in cols if c not in VOLATILE and existing[c] != row.get(c)]
        if differing:
            raise StoreError(f"conflicting write to {table} {self._key_text(table, row)}: "
                             f"already stored with different {', '.join(differing)}")
        return False

    @staticmethod
    def _key_text(table: str, row: Mapping[str, Any]) -> str:
        return ", ".join(f"{k}={row.get(k)!r}" for k in KEYS[table])

    def _write(self, table: str, row: Mapping[str, Any]) -> bool:
        with self._tx() as conn:
            return self._insert(conn, table, row)

    def write_rows(self, rows: Sequence[tuple[str, Mapping[str, Any]]],
                   then: Mapping[str, Any] | None = None) -> None:
        """Write ``(table, row)`` pairs in one transaction, then (optionally) mark a step
        done in the same transaction. Used by :class:`~accelopt_nb.store.steps.StepWriter`."""
        with self._tx() as conn:
            for table, row in rows:
                self._insert(conn, table, row)
            if then is not None:
                self._set_step(conn, **then)

    # -- runs --------------------------------------------------------------------------
    def create_run(self, run_id: str, config: Mapping[str, Any], *,
                   prices: Mapping[str, Any] | None = None, notes: str | None = None) -> bool:
        """Record a run with its full config; True if new.

        Re-creating an existing run (a resume) is fine with the same config and an error
        with a different one; the original price snapshot is kept.
        """
        if not run_id:
            raise StoreError("run_id is required")
        config_json = R.to_json(dict(config))
        with self._tx() as conn:
            existing = conn.execute("SELECT config_json FROM runs WHERE run_id=?", (run_id,)).fetchone()
            if existing is not None:
                if existing["config_json"] != config_json:
                    raise StoreError(f"run {run_id!r} already exists in {self.path} with a different "
                                     "config; use a new run id or the original config to resume")
                return False
            now = R.now_iso()
            conn.execute("INSERT INTO runs (run_id, created_at, status, config_json, prices_json, notes, "
                         "updated_at) VALUES (?, ?, 'created', ?, ?, ?, ?)",
                         (run_id, now, config_json, R.to_json(prices), notes, now))
            return True

    def set_run_status(self, run_id: str, status: str) -> None:
        with self._tx() as conn:
            cur = conn.execute("UPDATE runs SET status=?, updated_at=? WHERE run_id=?",
                               (status, R.now_iso(), run_id))
            if cur.rowcount == 0:
                raise StoreError(f"no run {run_id!r} in {self.path}")

    def get_run(self, run_id: str) -> dict[str, Any]:
        """A run's record with ``config`` and ``prices`` decoded."""
        with self._lock:
            row = self._conn.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            raise StoreError(f"no run {run_id!r} in {self.path}")
        out = dict(row)
        out["config"] = json.loads(out.pop("config_json"))
        prices = out.pop("prices_json")
        out["prices"] = json.loads(prices) if prices else None
        return out

    def run_ids(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._conn.execute("SELECT run_id FROM runs ORDER BY created_at, run_id")]

    def latest_run_id(self) -> str | None:
        """The most recently created run (what a resume continues by default), or None."""
        ids = self.run_ids()
        return ids[-1] if ids else None

    # -- records -----------------------------------------------------------------------
    def add_problem(self, run_id: str, problem_id: str, spec: Mapping[str, Any] | None = None) -> str:
        self._write("problems", R.problem_row(run_id, problem_id, spec))
        return problem_id

    def add_kernel(self, run_id: str, **fields: Any) -> str:
        """Record a kernel (see :func:`accelopt_nb.store.rows.kernel_row`); returns its id."""
        row = R.kernel_row(run_id, **fields)
        self._write("kernels", row)
        return row["kernel_id"]

    def add_plan(self, run_id: str, **fields: Any) -> str:
        row = R.plan_row(run_id, **fields)
        self._write("plans", row)
        return row["plan_id"]

    def add_evaluation(self, run_id: str, **fields: Any) -> str:
        row = R.evaluation_row(run_id, **fields)
        self._write("evaluations", row)
        return row["eval_id"]

    def add_memory_item(self, run_id: str, **fields: Any) -> str:
        row = R.memory_item_row(run_id, **fields)
        self._write("memory_items", row)
        return row["item_id"]

    def record_llm_call(self, row: Mapping[str, Any]) -> None:
        """Ledger sink: persist one LLM call at once (committed outside any step)."""
        self._write("llm_calls", R.llm_call_row(row, COLUMNS["llm_calls"]))

    def total_llm_cost(self, run_id: str | None = None) -> float:
        """USD recorded for ``run_id`` (all runs when None); unpriced calls count 0."""
        sql = "SELECT COALESCE(SUM(cost_usd), 0.0) FROM llm_calls"
        with self._lock:
            if run_id is None:
                return float(self._conn.execute(sql).fetchone()[0])
            return float(self._conn.execute(sql + " WHERE run_id=?", (run_id,)).fetchone()[0])

    def get_kernel(self, run_id: str, kernel_id: str) -> dict[str, Any]:
        with self._lock:
            row = self._conn.execute("SELECT * FROM kernels WHERE run_id=? AND kernel_id=?",
                                     (run_id, kernel_id)).fetchone()
        if row is None:
            raise StoreError(f"no kernel {kernel_id!r} in run {run_id!r}")
        return dict(row)

    def find_evaluation(self, sha256: str, backend: str) -> dict[str, Any] | None:
        """The latest evaluation of any kernel with this source hash on ``backend`` (any run):
        lets an evaluator skip re-measuring a duplicate kernel."""
        with self._lock:
            row = self._conn.execute(
                "SELECT * FROM evaluations WHERE sha256=? AND backend=? ORDER BY created_at DESC LIMIT 1",
                (sha256, backend)).fetchone()
        return dict(row) if row is not None else None

    # -- steps -------------------------------------------------------------------------
    def _step_row(self, conn: sqlite3.Connection, run_id: str, scope: str, iteration: int,
                  step: str) -> sqlite3.Row | None:
        return conn.execute("SELECT * FROM steps WHERE run_id=? AND scope=? AND iteration=? AND step=?",
                            (run_id, scope, iteration, step)).fetchone()

    def _set_step(self, conn: sqlite3.Connection, *, run_id: str, scope: str, iteration: int,
                  step: str, status: str, info: Mapping[str, Any] | None = None) -> None:
        now = R.now_iso()
        existing = self._step_row(conn, run_id, scope, iteration, step)
        if existing is not None and existing["status"] == "done":
            raise StoreError(f"step {step!r} of iteration {iteration} (run {run_id!r}, scope {scope!r}) "
                             "is already done; check is_step_done() before running it")
        if existing is None:
            try:
                conn.execute("INSERT INTO steps (run_id, scope, iteration, step, status, started_at, "
                             "finished_at, info_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                             (run_id, scope, iteration, step, status, now,
                              None if status == "started" else now, R.to_json(info)))
            except sqlite3.IntegrityError as exc:
                raise StoreError(f"cannot record step {step!r} for run {run_id!r}: {exc} "
                                 "(was the run created with create_run?)") from exc
        elif status == "started":
            conn.execute("UPDATE steps SET status='started', started_at=?, finished_at=NULL, info_json=? "
                         "WHERE run_id=? AND scope=? AND iteration=? AND step=?",
                         (now, R.to_json(info), run_id, scope, iteration, step))
        else:
            conn.execute("UPDATE steps SET status=?, finished_at=?, info_json=? "
                         "WHERE run_id=? AND scope=? AND iteration=? AND step=?",
                         (status, now, R.to_json(info), run_id, scope, iteration, step))

    def step(self, run_id: str, iteration: int, step: str, *, scope: str = "") -> "StepWriter":
        """A context manager for one step: buffered writes, committed with its ``done`` marker.

        ``scope`` separates independent searches in one run (e.g. the problem id).
        """
        from accelopt_nb.store.steps import StepWriter

        return StepWriter(self, run_id, int(iteration), step, scope)

    def mark_step(self, run_id: str, iteration: int, step: str, status: str, *, scope: str = "",
                  info: Mapping[str, Any] | None = None) -> None:
        """Set a step's status (``started``, ``done`` or ``failed``) in its own transaction."""
        with self._tx() as conn:
            self._set_step(conn, run_id=run_id, scope=scope, iteration=int(iteration), step=step,
                           status=status, info=info)

    def is_step_done(self, run_id: str, iteration: int, step: str, *, scope: str = "") -> bool:
        with self._lock:
            row = self._step_row(self._conn, run_id, scope, int(iteration), step)
        return row is not None and row["status"] == "done"

    def completed_steps(self, run_id: str, *, scope: str = "") -> list[tuple[int, str]]:
        """``(iteration, step)`` of every done step, in completion order."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT iteration, step FROM steps WHERE run_id=? AND scope=? AND status='done' "
                "ORDER BY finished_at, rowid", (run_id, scope)).fetchall()
        return [(r["iteration"], r["step"]) for r in rows]

    def resume_point(self, run_id: str, steps: Sequence[str], *, scope: str = "",
                     first_iteration: int = 0) -> tuple[int, str]:
        """The next ``(iteration, step)`` to run: the first one, in loop order, after the
        last completed step. ``steps`` is the ordered list of step names of one iteration."""
        if not steps:
            raise StoreError("resume_point needs the ordered step names of an iteration")
        order = {name: i for i, name in enumerate(steps)}
        done = [(it, order[s]) for it, s in self.completed_steps(run_id, scope=scope)
                if s in order and it >= first_iteration]
        if not done:
            return first_iteration, steps[0]
        it, idx = max(done)
        if idx + 1 < len(steps):
            return it, steps[idx + 1]
        return it + 1, steps[0]

    # -- plain rows --------------------------------------------------------------------
    def rows(self, table: str, run_id: str | None = None) -> list[dict[str, Any]]:
        """Rows of a table as dicts in insertion order, ``*_json`` columns decoded (into a
        key without the suffix), NULL as None: for code that wants no pandas."""
        if table not in COLUMNS:
            raise StoreError(f"unknown store table {table!r}; tables: {', '.join(COLUMNS)}")
        sql = f"SELECT * FROM {table}"
        params: tuple = ()
        if run_id is not None:
            sql += " WHERE run_id=?"
            params = (run_id,)
        with self._lock:
            fetched = self._conn.execute(sql + " ORDER BY rowid", params).fetchall()
        out = []
        for r in fetched:
            d = dict(r)
            for col in [c for c in d if c.endswith("_json")]:
                v = d.pop(col)
                d[col[: -len("_json")]] = json.loads(v) if v is not None else None
            out.append(d)
        return out

    # -- pandas accessors --------------------------------------------------------------
    def _frame(self, table: str, run_id: str | None, order: str) -> "pd.DataFrame":
        """A table as a DataFrame with predictable dtypes on pandas 2 and 3.

        Text stays ``object`` with ``None`` for missing values (pandas 3 would otherwise make
        ``str`` columns with NaN), integers are ``int64`` (``Int64`` when some are missing),
        ``*_json`` columns are decoded into a column without the suffix, timestamps are
        tz-aware, and flag columns are ``boolean``.
        """
        import pandas as pd

        sql = f"SELECT * FROM {table}"
        params: tuple = ()
        if run_id is not None:
            sql += " WHERE run_id=?"
            params = (run_id,)
        with self._lock:
            declared = {r["name"]: r["type"].upper() for r in self._conn.execute(f"PRAGMA table_info({table})")}
            cur = self._conn.execute(sql + f" ORDER BY {order}", params)
            data = [tuple(r) for r in cur.fetchall()]
            columns = [d[0] for d in cur.description]
        raw = {c: [row[i] for row in data] for i, c in enumerate(columns)}
        out: dict[str, Any] = {}
        for col in columns:
            values = raw[col]
            if col.endswith("_json"):
                out[col[: -len("_json")]] = pd.Series([json.loads(v) if v is not None else None for v in values],
                                                      dtype=object)
            elif col in _TIME_COLUMNS:
                out[col] = pd.to_datetime(pd.Series(values, dtype=object), utc=True, format="ISO8601")
            elif col in _BOOL_COLUMNS:
                out[col] = pd.Series(values, dtype=object).astype("boolean")
            elif declared.get(col) == "REAL":
                out[col] = pd.Series([float("nan") if v is None else v for v in values], dtype="float64")
            elif declared.get(col) == "INTEGER":
                out[col] = pd.Series(values, dtype="Int64" if None in values else "int64")
            else:
                out[col] = pd.Series(values, dtype=object)
        return pd.DataFrame(out, columns=list(out))

    def runs_df(self) -> "pd.DataFrame":
        return self._frame("runs", None, "created_at, run_id")

    def problems_df(self, run_id: str | None = None) -> "pd.DataFrame":
        return self._frame("problems", run_id, "rowid")

    def kernels_df(self, run_id: str | None = None) -> "pd.DataFrame":
        return self._frame("kernels", run_id, "rowid")

    def evaluations_df(self, run_id: str | None = None) -> "pd.DataFrame":
        return self._frame("evaluations", run_id, "rowid")

    def plans_df(self, run_id: str | None = None) -> "pd.DataFrame":
        return self._frame("plans", run_id, "rowid")

    def memory_items_df(self, run_id: str | None = None) -> "pd.DataFrame":
        return self._frame("memory_items", run_id, "rowid")

    def llm_calls_df(self, run_id: str | None = None) -> "pd.DataFrame":
        return self._frame("llm_calls", run_id, "rowid")

    def steps_df(self, run_id: str | None = None) -> "pd.DataFrame":
        return self._frame("steps", run_id, "rowid")

    def table_counts(self, run_id: str | None = None) -> dict[str, int]:
        """Row counts per table (handy in notebooks and tests)."""
        out = {}
        with self._lock:
            for table in COLUMNS:
                if run_id is None:
                    n = self._conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
                else:
                    n = self._conn.execute(f"SELECT COUNT(*) FROM {table} WHERE run_id=?",
                                           (run_id,)).fetchone()[0]
                out[table] = int(n)
        return out

    # -- lifecycle ---------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "RunStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunStore({str(self.path)!r})"
