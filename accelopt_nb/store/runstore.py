"""The run store: one SQLite file per experiment directory, or one PostgreSQL database a team shares.

Crash safety comes from three choices:

* every write is a short transaction that holds the database's write lock (SQLite:
  ``BEGIN IMMEDIATE`` in WAL mode with ``synchronous=FULL``; PostgreSQL: one advisory lock),
  so a killed process loses nothing that was committed and concurrent writers never interleave;
* a step's outputs are buffered and committed together with the step's ``done`` marker
  (:meth:`RunStore.step`), so a step is either fully recorded or not at all, and a
  resumed run re-runs exactly the steps without a marker (:meth:`RunStore.resume_point`);
* rows have stable keys and identical rewrites are no-ops (a conflicting rewrite is an
  error), so resuming never duplicates rows.

LLM calls are recorded immediately, outside any step: money spent on a step that was killed
before it finished is still accounted for. What differs between SQLite and PostgreSQL is in
:mod:`accelopt_nb.store.backends`; everything here is written once for both.
"""
from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from accelopt_nb.errors import StoreError
from accelopt_nb.store import rows as R
from accelopt_nb.store.backends import DEFAULT_FILENAME, Backend, is_database_url, open_backend
from accelopt_nb.store.schema import ADDED_COLUMNS, COLUMNS, DDL, KEYS, SCHEMA_VERSION, VOLATILE

if TYPE_CHECKING:
    import pandas as pd

    from accelopt_nb.store.steps import StepWriter

__all__ = ["RunStore", "DEFAULT_FILENAME"]

_TIME_COLUMNS = ("created_at", "updated_at", "started_at", "finished_at")
_BOOL_COLUMNS = ("correct", "replayed")
# Columns added after release, per table: NULL in a row written before them means "not recorded".
_ADDED = {}
for _table, _column, _type in ADDED_COLUMNS:
    _ADDED.setdefault(_table, set()).add(_column)


class RunStore:
    """Runs, problems, kernels, evaluations, plans, memory items, LLM calls and steps.

    ``RunStore(target)`` opens (creating if needed) a store: a SQLite file, the default file
    ``accelopt.sqlite`` inside a directory, or a PostgreSQL database given as a
    ``postgresql://user@host:port/db`` URL. Thread-safe; several processes may write at once.
    """

    def __init__(self, path: str | Path) -> None:
        self.backend: Backend = open_backend(path)
        # A Path for SQLite (callers put files next to it); the redacted URL for a server.
        self.path: Path | str = getattr(self.backend, "path", self.backend.location)
        self._lock = threading.RLock()
        try:
            self._conn = self.backend.connect()
            self.backend.create_schema(self._conn, DDL)
        except self.backend.database_errors as exc:
            raise StoreError(f"cannot open run store {self.backend.location}: {exc}") from exc
        self._types: dict[str, dict[str, str]] = {}
        self._check_version()

    @property
    def location(self) -> str:
        """Where the store lives: a file path, or the database URL without its password."""
        return self.backend.location

    @classmethod
    def open(cls, experiment_dir: str | Path) -> "RunStore":
        """The store of an experiment directory (created if missing), or of a database URL."""
        if is_database_url(experiment_dir):
            return cls(experiment_dir)
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
                raise StoreError(f"run store {self.location} has schema version {row['value']}, newer than "
                                 f"this accelopt_nb ({SCHEMA_VERSION}); upgrade accelopt_nb")
            for table, column, sql_type in ADDED_COLUMNS:
                if column not in self.backend.declared_types(conn, table):
                    self.backend.add_column(conn, table, column, sql_type)

    # -- transactions ------------------------------------------------------------------
    @contextmanager
    def _tx(self) -> Iterator[Any]:
        with self._lock:
            conn = self._conn
            self.backend.begin_write(conn)
            try:
                yield conn
            except BaseException:
                try:
                    conn.execute("ROLLBACK")
                except (StoreError, *self.backend.database_errors):
                    pass  # the connection is gone, and the transaction with it: the first error tells why
                raise
            conn.execute("COMMIT")

    def _insert(self, conn: Any, table: str, row: Mapping[str, Any]) -> bool:
        """Insert ``row`` unless its key exists; True if inserted.

        An existing row with the same key must hold the same content, otherwise the write
        is a conflict (two different things given one id) and raises StoreError.
        """
        cols = COLUMNS[table]
        try:
            cur = conn.execute(self.backend.insert_ignore(table, cols), [row.get(c) for c in cols])
        except self.backend.integrity_errors as exc:
            reason = str(exc).splitlines()[0]
            if "foreign key" in reason.lower():  # SQLite and PostgreSQL word it differently
                reason = f"FOREIGN KEY: no run {row.get('run_id')!r} in this store (create_run first)"
            raise StoreError(f"cannot write {table} row {self._key_text(table, row)}: {reason}") from exc
        if cur.rowcount == 1:
            return True
        keys = KEYS[table]
        existing = conn.execute(f"SELECT {', '.join(cols)} FROM {table} WHERE "
                                + " AND ".join(f"{k}=?" for k in keys), [row.get(k) for k in keys]).fetchone()
        added = _ADDED.get(table, ())
        # A column added after the row was written holds NULL there: not a conflict.
        differing = [c for c in cols if c not in VOLATILE and existing[c] != row.get(c)
                     and not (c in added and existing[c] is None)]
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
                    raise StoreError(f"run {run_id!r} already exists in {self.location} with a different "
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
                raise StoreError(f"no run {run_id!r} in {self.location}")

    def add_run_note(self, run_id: str, note: str) -> None:
        """Append a line to a run's notes (e.g. an allowed model change on resume)."""
        with self._tx() as conn:
            row = conn.execute("SELECT notes FROM runs WHERE run_id=?", (run_id,)).fetchone()
            if row is None:
                raise StoreError(f"no run {run_id!r} in {self.path}")
            notes = f"{row['notes']}\n{note}" if row["notes"] else note
            conn.execute("UPDATE runs SET notes=?, updated_at=? WHERE run_id=?", (notes, R.now_iso(), run_id))

    def get_run(self, run_id: str) -> dict[str, Any]:
        """A run's record with ``config`` and ``prices`` decoded."""
        with self._lock:
            row = self._conn.execute(f"SELECT {self._select('runs')} FROM runs WHERE run_id=?",
                                     (run_id,)).fetchone()
        if row is None:
            raise StoreError(f"no run {run_id!r} in {self.location}")
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
            row = self._conn.execute(f"SELECT {self._select('kernels')} FROM kernels WHERE run_id=? AND kernel_id=?",
                                     (run_id, kernel_id)).fetchone()
        if row is None:
            raise StoreError(f"no kernel {kernel_id!r} in run {run_id!r}")
        return dict(row)

    def find_evaluation(self, sha256: str, backend: str) -> dict[str, Any] | None:
        """The latest evaluation of any kernel with this source hash on ``backend`` (any run):
        lets an evaluator skip re-measuring a duplicate kernel."""
        with self._lock:
            row = self._conn.execute(
                f"SELECT {self._select('evaluations')} FROM evaluations WHERE sha256=? AND backend=? "
                "ORDER BY created_at DESC LIMIT 1",
                (sha256, backend)).fetchone()
        return dict(row) if row is not None else None

    # -- steps -------------------------------------------------------------------------
    def _step_row(self, conn: Any, run_id: str, scope: str, iteration: int, step: str) -> Any:
        return conn.execute(f"SELECT {self._select('steps')} FROM steps WHERE run_id=? AND scope=? AND iteration=? AND step=?",
                            (run_id, scope, iteration, step)).fetchone()

    def _set_step(self, conn: Any, *, run_id: str, scope: str, iteration: int,
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
            except self.backend.integrity_errors as exc:
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
                f"ORDER BY finished_at, {self.backend.order_column}", (run_id, scope)).fetchall()
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
    def _declared(self, table: str) -> dict[str, str]:
        """Column -> SQLite type name of a table, as the database has it (cached)."""
        if table not in self._types:
            with self._lock:
                self._types[table] = self.backend.declared_types(self._conn, table)
        return self._types[table]

    def _select(self, table: str) -> str:
        """The column list of ``SELECT`` (not ``*``: a backend may add its own columns)."""
        return ", ".join(self._declared(table))

    def rows(self, table: str, run_id: str | None = None, *, decode_json: bool = True) -> list[dict[str, Any]]:
        """Rows of a table as dicts in insertion order, ``*_json`` columns decoded (into a
        key without the suffix; ``decode_json=False`` keeps the stored text), NULL as None:
        for code that wants no pandas."""
        if table not in COLUMNS:
            raise StoreError(f"unknown store table {table!r}; tables: {', '.join(COLUMNS)}")
        sql = f"SELECT {self._select(table)} FROM {table}"
        params: tuple = ()
        if run_id is not None:
            sql += " WHERE run_id=?"
            params = (run_id,)
        with self._lock:
            fetched = self._conn.execute(sql + f" ORDER BY {self.backend.order_column}", params).fetchall()
        out = []
        for r in fetched:
            d = dict(r)
            if not decode_json:
                out.append(d)
                continue
            for col in [c for c in d if c.endswith("_json")]:
                v = d.pop(col)
                d[col[: -len("_json")]] = json.loads(v) if v is not None else None
            out.append(d)
        return out

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """A read-only SQL query (``?`` placeholders, SQL both SQLite and PostgreSQL run) as dicts."""
        if not sql.lstrip().upper().startswith(("SELECT", "WITH")):
            raise StoreError("RunStore.query runs SELECT (or WITH ... SELECT) statements only")
        with self._lock:
            return [dict(r) for r in self._conn.execute(sql, tuple(params)).fetchall()]

    # -- pandas accessors --------------------------------------------------------------
    def _frame(self, table: str, run_id: str | None, order: str | None = None) -> "pd.DataFrame":
        """A table as a DataFrame with predictable dtypes on pandas 2 and 3.

        Text stays ``object`` with ``None`` for missing values (pandas 3 would otherwise make
        ``str`` columns with NaN), integers are ``int64`` (``Int64`` when some are missing),
        ``*_json`` columns are decoded into a column without the suffix, timestamps are
        tz-aware, and flag columns are ``boolean``.
        """
        import pandas as pd

        declared = self._declared(table)
        sql = f"SELECT {self._select(table)} FROM {table}"
        params: tuple = ()
        if run_id is not None:
            sql += " WHERE run_id=?"
            params = (run_id,)
        with self._lock:
            cur = self._conn.execute(sql + f" ORDER BY {order or self.backend.order_column}", params)
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
        return self._frame("problems", run_id)

    def kernels_df(self, run_id: str | None = None) -> "pd.DataFrame":
        return self._frame("kernels", run_id)

    def evaluations_df(self, run_id: str | None = None) -> "pd.DataFrame":
        return self._frame("evaluations", run_id)

    def plans_df(self, run_id: str | None = None) -> "pd.DataFrame":
        return self._frame("plans", run_id)

    def memory_items_df(self, run_id: str | None = None) -> "pd.DataFrame":
        return self._frame("memory_items", run_id)

    def llm_calls_df(self, run_id: str | None = None) -> "pd.DataFrame":
        return self._frame("llm_calls", run_id)

    def steps_df(self, run_id: str | None = None) -> "pd.DataFrame":
        return self._frame("steps", run_id)

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
        return f"RunStore({self.location!r})"
