"""Moving runs between stores (SQLite file <-> PostgreSQL database) as a JSON-lines file.

The file's first line is a header (``{"format": "accelopt-runs", "schema_version": 1}``); every
other line is ``{"table": ..., "row": {...}}`` with the row exactly as stored (JSON columns as
text, timestamps as written), parents before children. Importing writes each run in one
transaction through the store's own idempotent insert, so importing the same file twice changes
nothing, and a row that exists with different content is a conflict that stops the import
before anything of that run is written.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from accelopt_nb.errors import StoreError
from accelopt_nb.store.schema import COLUMNS, SCHEMA_VERSION

if TYPE_CHECKING:
    from accelopt_nb.store.runstore import RunStore

__all__ = ["FORMAT", "TABLE_ORDER", "export_runs", "import_runs"]

FORMAT = "accelopt-runs"
# Parents first: a row's run exists before it is written.
TABLE_ORDER = ("runs", "problems", "kernels", "plans", "evaluations", "memory_items", "steps", "llm_calls")


def export_runs(store: "RunStore", path: str | Path, run_ids: Sequence[str] | None = None) -> dict[str, int]:
    """Write ``run_ids`` (default: every run) to a JSON-lines file; returns rows per table."""
    known = store.run_ids()
    chosen = list(run_ids) if run_ids else known
    missing = [r for r in chosen if r not in known]
    if missing:
        raise StoreError(f"no run(s) {', '.join(map(repr, missing))} in {store.location}")
    counts: dict[str, int] = defaultdict(int)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        f.write(json.dumps({"format": FORMAT, "schema_version": SCHEMA_VERSION, "source": store.location,
                            "runs": chosen}) + "\n")
        for run_id in chosen:
            for table in TABLE_ORDER:
                for row in store.rows(table, run_id, decode_json=False):
                    f.write(json.dumps({"table": table, "row": row}, ensure_ascii=False) + "\n")
                    counts[table] += 1
    return dict(counts)


def _read(path: Path) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    if not path.is_file():
        raise StoreError(f"export file not found: {path}")
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        header = json.loads(lines[0]) if lines else {}
    except json.JSONDecodeError as exc:
        raise StoreError(f"{path}: line 1 is not JSON: {exc}") from None
    if header.get("format") != FORMAT:
        raise StoreError(f"{path} is not an accelopt run export (its first line has no format {FORMAT!r})")
    if int(header.get("schema_version", 0)) > SCHEMA_VERSION:
        raise StoreError(f"{path} has schema version {header['schema_version']}, newer than this accelopt_nb "
                         f"({SCHEMA_VERSION}); upgrade accelopt_nb")
    rows = []
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            table, row = item["table"], item["row"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise StoreError(f"{path}:{n}: not a row record ({exc})") from None
        if table not in COLUMNS:
            raise StoreError(f"{path}:{n}: unknown table {table!r}")
        unknown = set(row) - set(COLUMNS[table])
        if unknown:
            raise StoreError(f"{path}:{n}: unknown {table} column(s) {sorted(unknown)}")
        rows.append((table, row))
    return header, rows


def _by_run(rows: Iterable[tuple[str, dict[str, Any]]]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    out: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for table, row in rows:
        out[str(row.get("run_id"))].append((table, row))
    for run_rows in out.values():
        run_rows.sort(key=lambda tr: TABLE_ORDER.index(tr[0]))
    return out


def import_runs(store: "RunStore", path: str | Path) -> dict[str, int]:
    """Load an export into ``store`` (one transaction per run); returns rows read per table.

    Rows already present with the same content are skipped; a run id already holding different
    content raises StoreError and leaves that run as it was."""
    _, rows = _read(Path(path))
    counts: dict[str, int] = defaultdict(int)
    for run_rows in _by_run(rows).values():
        store.write_rows(run_rows)
        for table, _ in run_rows:
            counts[table] += 1
    return dict(counts)
