"""Where a run store lives: the one seam between :class:`~accelopt_nb.store.RunStore` and a database.

RunStore's logic (stable keys, idempotent writes, steps committed with their rows) is written
once, against SQL with ``?`` placeholders and the SQLite dialect of ``schema.DDL``. A backend
supplies what differs between databases, and nothing else:

* how to connect, and how a *write* transaction starts: every write transaction of every
  process holds the database's single write lock, so check-then-insert logic is safe under
  concurrency (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: ``pg_advisory_xact_lock`` on one key);
* "insert unless the key exists" (``INSERT OR IGNORE`` / ``ON CONFLICT DO NOTHING``);
* the DDL and the declared column types (``REAL`` is ``DOUBLE PRECISION`` in PostgreSQL);
* the column that orders rows by insertion (SQLite's ``rowid``; an identity column in
  PostgreSQL, which has no row order of its own).

:func:`open_backend` picks one from what the user wrote: a ``postgresql://`` URL, or a path
(a ``.sqlite`` file, or a directory that gets ``accelopt.sqlite``). PostgreSQL needs the
optional ``psycopg`` package (``pip install 'accelopt_nb[postgres]'``).
"""
from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any, Iterator, Sequence
from urllib.parse import urlsplit, urlunsplit

from accelopt_nb.errors import StoreError

__all__ = ["Backend", "SQLiteBackend", "PostgresBackend", "Row", "is_database_url", "open_backend",
           "redact_url", "DEFAULT_FILENAME", "URL_SCHEMES"]

DEFAULT_FILENAME = "accelopt.sqlite"
URL_SCHEMES = ("postgresql", "postgres")
# The one advisory-lock key every accelopt write transaction takes (an arbitrary constant).
PG_WRITE_LOCK_KEY = 0x61636365  # "acce"
PG_ORDER_COLUMN = "row_seq"


def is_database_url(target: Any) -> bool:
    """True for ``postgresql://...`` / ``postgres://...`` (a database server, not a file)."""
    return isinstance(target, str) and target.split("://", 1)[0].lower() in URL_SCHEMES and "://" in target


def redact_url(url: str) -> str:
    """The URL without its password, for messages and records."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":***"
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[-1]}"))


class Row:
    """A result row addressable by position and by column name (like ``sqlite3.Row``)."""

    __slots__ = ("_names", "_values")

    def __init__(self, names: Sequence[str], values: Sequence[Any]) -> None:
        self._names = tuple(names)
        self._values = tuple(values)

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, int):
            return self._values[key]
        try:
            return self._values[self._names.index(key)]
        except ValueError:
            raise IndexError(f"no column {key!r}") from None

    def keys(self) -> list[str]:
        return list(self._names)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


class Backend:
    """What a database must provide to RunStore (see the module docstring)."""

    name: str = ""
    location: str = ""                       # a path or a redacted URL: for messages
    order_column: str = "rowid"
    integrity_errors: tuple[type[BaseException], ...] = ()
    database_errors: tuple[type[BaseException], ...] = ()

    def connect(self) -> Any:
        """A connection whose ``execute(sql, params)`` takes ``?`` placeholders and returns a
        cursor with ``fetchone``/``fetchall``/``rowcount``/``description``, rows being
        :class:`Row`-like."""
        raise NotImplementedError

    def create_schema(self, conn: Any, ddl: str) -> None:
        raise NotImplementedError

    def begin_write(self, conn: Any) -> None:
        raise NotImplementedError

    def insert_ignore(self, table: str, columns: Sequence[str]) -> str:
        raise NotImplementedError

    def declared_types(self, conn: Any, table: str) -> dict[str, str]:
        """Column name -> SQLite type name (``TEXT``, ``INTEGER``, ``REAL``), in table order,
        without the backend's own ordering column."""
        raise NotImplementedError

    def add_column(self, conn: Any, table: str, column: str, sql_type: str) -> None:
        raise NotImplementedError


# ---------------------------------------------------------------------------------------- SQLite
class SQLiteBackend(Backend):
    """The embedded default: one file per experiment directory, WAL mode, ``synchronous=FULL``."""

    name = "sqlite"
    order_column = "rowid"
    integrity_errors = (sqlite3.IntegrityError,)
    database_errors = (sqlite3.DatabaseError,)

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        if path.is_dir() or (not path.exists() and path.suffix == ""):
            path.mkdir(parents=True, exist_ok=True)
            path = path / DEFAULT_FILENAME
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.location = str(path)

    def connect(self) -> sqlite3.Connection:
        # isolation_level=None: RunStore issues BEGIN/COMMIT itself (no implicit transactions).
        conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False, timeout=30.0)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    def create_schema(self, conn: sqlite3.Connection, ddl: str) -> None:
        conn.executescript(ddl)

    def begin_write(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def insert_ignore(self, table: str, columns: Sequence[str]) -> str:
        return (f"INSERT OR IGNORE INTO {table} ({', '.join(columns)}) "
                f"VALUES ({', '.join('?' for _ in columns)})")

    def declared_types(self, conn: sqlite3.Connection, table: str) -> dict[str, str]:
        return {r["name"]: r["type"].upper() for r in conn.execute(f"PRAGMA table_info({table})")}

    def add_column(self, conn: sqlite3.Connection, table: str, column: str, sql_type: str) -> None:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {sql_type}")


# ------------------------------------------------------------------------------------ PostgreSQL
_PG_TYPES = {"text": "TEXT", "bigint": "INTEGER", "integer": "INTEGER", "smallint": "INTEGER",
             "double precision": "REAL", "real": "REAL", "numeric": "REAL"}


def postgres_type(sql_type: str) -> str:
    """The PostgreSQL spelling of a schema type: 64-bit integers and doubles, as SQLite stores them."""
    return {"INTEGER": "BIGINT", "REAL": "DOUBLE PRECISION"}.get(sql_type.upper(), sql_type)


def postgres_ddl(ddl: str) -> str:
    """``schema.DDL`` for PostgreSQL: the same tables, keys and checks, wider numeric types, and
    an identity column per table that records insertion order."""
    out = re.sub(r"\bREAL\b", "DOUBLE PRECISION", ddl)
    out = re.sub(r"\bINTEGER\b", "BIGINT", out)
    return re.sub(r"(CREATE TABLE IF NOT EXISTS \w+ \()",
                  rf"\1\n    {PG_ORDER_COLUMN} BIGINT GENERATED BY DEFAULT AS IDENTITY,", out)


def _qmark_to_format(sql: str) -> str:
    # RunStore's SQL never holds a literal '?' or '%': translate placeholders one to one.
    return sql.replace("%", "%%").replace("?", "%s")


class _PGCursor:
    def __init__(self, cur: Any) -> None:
        self._cur = cur
        self.rowcount = cur.rowcount
        self.description = [(c.name,) for c in cur.description] if cur.description else None

    def _row(self, values: Any) -> Row | None:
        if values is None:
            return None
        return Row([d[0] for d in self.description or ()], values)

    def fetchone(self) -> Row | None:
        return self._row(self._cur.fetchone())

    def fetchall(self) -> list[Row]:
        return [self._row(v) for v in self._cur.fetchall()]  # type: ignore[misc]

    def __iter__(self) -> Iterator[Row]:
        return iter(self.fetchall())


class _PGConnection:
    """A psycopg connection in autocommit mode speaking RunStore's ``?`` SQL.

    A connection the server dropped (a restart, an idle timeout) is replaced on the next statement
    outside a transaction; inside one, the transaction is lost and the error says so (nothing of it
    was committed, and RunStore's steps make that safe to redo)."""

    def __init__(self, connect: Any, location: str) -> None:
        self._connect = connect
        self._location = location
        self._conn = connect()
        self._in_tx = False

    def execute(self, sql: str, params: Sequence[Any] = ()) -> _PGCursor:
        import psycopg

        word = sql.lstrip()[:8].upper()
        if self._conn.broken and not self._in_tx:
            self._conn = self._connect()
        try:
            cur = self._conn.cursor()
            cur.execute(_qmark_to_format(sql), tuple(params))
        except psycopg.OperationalError as exc:
            if not self._conn.broken:
                raise
            if self._in_tx or word.startswith(("COMMIT", "ROLLBACK")):
                self._in_tx = False
                raise StoreError(f"lost the connection to {self._location} inside a transaction; nothing of "
                                 f"it was committed ({str(exc).strip()})") from exc
            self._conn = self._connect()  # once: a second failure is the server's answer
            cur = self._conn.cursor()
            cur.execute(_qmark_to_format(sql), tuple(params))
        if word.startswith("BEGIN"):
            self._in_tx = True
        elif word.startswith(("COMMIT", "ROLLBACK")):
            self._in_tx = False
        return _PGCursor(cur)

    def close(self) -> None:
        self._conn.close()


class PostgresBackend(Backend):
    """A PostgreSQL database shared by many machines and people (``postgresql://user@host/db``)."""

    name = "postgresql"
    order_column = PG_ORDER_COLUMN

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError as exc:
            raise StoreError("a postgresql:// run store needs the psycopg package: "
                             "pip install 'accelopt_nb[postgres]'") from exc
        self._psycopg = psycopg
        self.url = url
        self.location = redact_url(url)
        self.integrity_errors = (psycopg.errors.IntegrityError,)
        self.database_errors = (psycopg.Error,)

    def _raw_connect(self) -> Any:
        try:
            return self._psycopg.connect(self.url, autocommit=True, connect_timeout=30)
        except self._psycopg.Error as exc:
            raise StoreError(f"cannot connect to the run store {self.location}: {exc}".strip()) from exc

    def connect(self) -> _PGConnection:
        return _PGConnection(self._raw_connect, self.location)

    def begin_write(self, conn: _PGConnection) -> None:
        conn.execute("BEGIN")
        # One writer at a time, database-wide, as SQLite's BEGIN IMMEDIATE: the lock is held
        # until COMMIT/ROLLBACK, and every statement after it sees all earlier commits.
        conn.execute("SELECT pg_advisory_xact_lock(?)", (PG_WRITE_LOCK_KEY,))

    def create_schema(self, conn: _PGConnection, ddl: str) -> None:
        # Two processes creating the schema at once would race on the catalog: take the lock.
        self.begin_write(conn)
        try:
            conn._conn.execute(postgres_ddl(ddl))  # several statements, no parameters
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def insert_ignore(self, table: str, columns: Sequence[str]) -> str:
        return (f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)}) "
                "ON CONFLICT DO NOTHING")

    def declared_types(self, conn: _PGConnection, table: str) -> dict[str, str]:
        rows = conn.execute("SELECT column_name, data_type FROM information_schema.columns "
                            "WHERE table_schema = current_schema() AND table_name = ? ORDER BY ordinal_position",
                            (table,)).fetchall()
        return {r[0]: _PG_TYPES.get(r[1], "TEXT") for r in rows if r[0] != PG_ORDER_COLUMN}

    def add_column(self, conn: _PGConnection, table: str, column: str, sql_type: str) -> None:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {postgres_type(sql_type)}")


def open_backend(target: str | Path) -> Backend:
    """A backend for a ``postgresql://`` URL, or for a SQLite file or directory."""
    if is_database_url(target):
        return PostgresBackend(str(target))
    if isinstance(target, str) and re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", target):
        raise StoreError(f"unsupported run store URL {target.split('://', 1)[0]}://...: use a path (SQLite) "
                         "or postgresql://user@host:port/database")
    return SQLiteBackend(target)
