"""Schema of the run store, in SQLite's dialect (``backends.postgres_ddl`` derives PostgreSQL's).

Every table keys its rows by stable ids (content hashes or caller ids), so writing the same
row twice is a no-op: a resumed run can never duplicate what an earlier process recorded.
JSON columns end in ``_json``; timestamps are ISO-8601 UTC text.
"""
from __future__ import annotations

SCHEMA_VERSION = 1

# Column lists per table, in order: the single source for inserts, comparisons and frames.
COLUMNS: dict[str, tuple[str, ...]] = {
    "runs": ("run_id", "created_at", "status", "config_json", "prices_json", "notes", "updated_at"),
    "problems": ("run_id", "problem_id", "spec_json", "created_at"),
    "kernels": ("run_id", "kernel_id", "problem_id", "iteration", "sha256", "source", "parent_id",
                "plan_id", "origin", "data_json", "created_at"),
    "evaluations": ("run_id", "eval_id", "kernel_id", "sha256", "backend", "attempt", "status",
                    "correct", "latency_us", "pct_peak", "result_json", "created_at", "hw", "fidelity"),
    "plans": ("run_id", "plan_id", "problem_id", "iteration", "parent_kernel_id", "text",
              "data_json", "created_at"),
    "memory_items": ("run_id", "item_id", "problem_id", "iteration", "slow_kernel_id",
                     "fast_kernel_id", "speedup", "summary", "data_json", "created_at"),
    "llm_calls": ("call_id", "run_id", "iteration", "role", "model", "price_key", "started_at",
                  "latency_s", "prompt_tokens", "completion_tokens", "reasoning_tokens",
                  "cached_tokens", "cost_usd", "status", "attempts", "transport_failures",
                  "unusable_outputs", "failures_json", "error", "replayed", "request_hash", "sample",
                  "finish_reason"),
    "steps": ("run_id", "scope", "iteration", "step", "status", "started_at", "finished_at",
              "info_json"),
}

# Columns added after a table was first released: (table, column, SQL type). A store written
# before them gets them on open (NULL in old rows), so old stores still load and take new rows.
ADDED_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("llm_calls", "finish_reason", "TEXT"),
    # The hardware and fidelity an evaluation ran at (also inside result_json): queried by a shared store.
    ("evaluations", "hw", "TEXT"),
    ("evaluations", "fidelity", "TEXT"),
)

# Primary key of each table: what makes a write idempotent.
KEYS: dict[str, tuple[str, ...]] = {
    "runs": ("run_id",),
    "problems": ("run_id", "problem_id"),
    "kernels": ("run_id", "kernel_id"),
    "evaluations": ("run_id", "eval_id"),
    "plans": ("run_id", "plan_id"),
    "memory_items": ("run_id", "item_id"),
    "llm_calls": ("call_id",),
    "steps": ("run_id", "scope", "iteration", "step"),
}

# Columns that may legitimately differ when the same row is written again (not content).
VOLATILE = {"created_at", "updated_at", "started_at", "finished_at"}

DDL = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    run_id      TEXT PRIMARY KEY,
    created_at  TEXT NOT NULL,
    status      TEXT NOT NULL DEFAULT 'created',
    config_json TEXT NOT NULL,
    prices_json TEXT,
    notes       TEXT,
    updated_at  TEXT
);
CREATE TABLE IF NOT EXISTS problems (
    run_id     TEXT NOT NULL REFERENCES runs(run_id),
    problem_id TEXT NOT NULL,
    spec_json  TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, problem_id)
);
CREATE TABLE IF NOT EXISTS kernels (
    run_id     TEXT NOT NULL REFERENCES runs(run_id),
    kernel_id  TEXT NOT NULL,
    problem_id TEXT NOT NULL,
    iteration  INTEGER NOT NULL,
    sha256     TEXT NOT NULL,
    source     TEXT NOT NULL,
    parent_id  TEXT,
    plan_id    TEXT,
    origin     TEXT,
    data_json  TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, kernel_id)
);
CREATE INDEX IF NOT EXISTS kernels_by_hash ON kernels (sha256);
CREATE INDEX IF NOT EXISTS kernels_by_problem ON kernels (run_id, problem_id, iteration);
CREATE TABLE IF NOT EXISTS evaluations (
    run_id      TEXT NOT NULL REFERENCES runs(run_id),
    eval_id     TEXT NOT NULL,
    kernel_id   TEXT NOT NULL,
    sha256      TEXT,
    backend     TEXT NOT NULL,
    attempt     INTEGER NOT NULL DEFAULT 0,
    status      TEXT NOT NULL,
    correct     INTEGER,
    latency_us  REAL,
    pct_peak    REAL,
    result_json TEXT,
    created_at  TEXT NOT NULL,
    hw          TEXT,
    fidelity    TEXT,
    PRIMARY KEY (run_id, eval_id)
);
CREATE INDEX IF NOT EXISTS evaluations_by_kernel ON evaluations (run_id, kernel_id);
CREATE TABLE IF NOT EXISTS plans (
    run_id           TEXT NOT NULL REFERENCES runs(run_id),
    plan_id          TEXT NOT NULL,
    problem_id       TEXT NOT NULL,
    iteration        INTEGER NOT NULL,
    parent_kernel_id TEXT,
    text             TEXT NOT NULL,
    data_json        TEXT,
    created_at       TEXT NOT NULL,
    PRIMARY KEY (run_id, plan_id)
);
CREATE TABLE IF NOT EXISTS memory_items (
    run_id         TEXT NOT NULL REFERENCES runs(run_id),
    item_id        TEXT NOT NULL,
    problem_id     TEXT NOT NULL,
    iteration      INTEGER NOT NULL,
    slow_kernel_id TEXT,
    fast_kernel_id TEXT,
    speedup        REAL,
    summary        TEXT NOT NULL,
    data_json      TEXT,
    created_at     TEXT NOT NULL,
    PRIMARY KEY (run_id, item_id)
);
-- No foreign key on llm_calls: money spent is recorded even for ad-hoc calls outside a run.
CREATE TABLE IF NOT EXISTS llm_calls (
    call_id            TEXT PRIMARY KEY,
    run_id             TEXT,
    iteration          INTEGER,
    role               TEXT NOT NULL,
    model              TEXT NOT NULL,
    price_key          TEXT,
    started_at         TEXT,
    latency_s          REAL,
    prompt_tokens      INTEGER NOT NULL,
    completion_tokens  INTEGER NOT NULL,
    reasoning_tokens   INTEGER NOT NULL,
    cached_tokens      INTEGER NOT NULL,
    cost_usd           REAL,
    status             TEXT NOT NULL,
    attempts           INTEGER NOT NULL,
    transport_failures INTEGER NOT NULL,
    unusable_outputs   INTEGER NOT NULL,
    failures_json      TEXT,
    error              TEXT,
    replayed           INTEGER NOT NULL,
    request_hash       TEXT,
    sample             INTEGER,
    finish_reason      TEXT
);
CREATE INDEX IF NOT EXISTS llm_calls_by_run ON llm_calls (run_id, iteration);
CREATE TABLE IF NOT EXISTS steps (
    run_id      TEXT NOT NULL REFERENCES runs(run_id),
    scope       TEXT NOT NULL DEFAULT '',
    iteration   INTEGER NOT NULL,
    step        TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('started', 'done', 'failed')),
    started_at  TEXT,
    finished_at TEXT,
    info_json   TEXT,
    PRIMARY KEY (run_id, scope, iteration, step)
);
"""
