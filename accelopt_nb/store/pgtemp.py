"""A throwaway PostgreSQL server in a temporary directory: for tests, demos, and trying the team
run store on one machine before pointing it at a real database server.

::

    from accelopt_nb.store.pgtemp import TempPostgres

    with TempPostgres() as pg:                   # initdb + pg_ctl start on 127.0.0.1:<free port>
        store = RunStore(pg.url)                 # postgresql://accelopt@127.0.0.1:<port>/accelopt

It uses the server binaries of the operating system (Debian's ``postgresql`` package puts them
in ``/usr/lib/postgresql/<version>/bin``; ``ACCELOPT_PG_BIN`` names another directory). The
server refuses to run as root, so under root the cluster belongs to the ``postgres`` system user
(created by that package) and is started through ``runuser``. Nothing outside the temporary
directory is touched, and :meth:`TempPostgres.stop` removes it.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from accelopt_nb.errors import StoreError
from accelopt_nb.pyutil import free_port

__all__ = ["TempPostgres", "find_pg_bin", "unavailable_reason"]

BIN_ENV = "ACCELOPT_PG_BIN"
SYSTEM_USER = "postgres"
DB_USER = "accelopt"
DB_NAME = "accelopt"


def find_pg_bin() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or None."""
    candidates = []
    if os.environ.get(BIN_ENV):
        candidates.append(Path(os.environ[BIN_ENV]))
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).parent)
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: _version(Path(p).parent.name),
                      reverse=True)
    candidates += [Path(p) for p in versions]
    for d in candidates:
        if all((d / exe).is_file() for exe in ("initdb", "pg_ctl", "postgres")):
            return d
    return None


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split("."))
    except ValueError:
        return (0,)


def _system_user_ids() -> tuple[int, int] | None:
    try:
        import pwd
        entry = pwd.getpwnam(SYSTEM_USER)
    except (ImportError, KeyError):
        return None
    return entry.pw_uid, entry.pw_gid


def unavailable_reason() -> str | None:
    """Why a throwaway server cannot start here (None when it can)."""
    if find_pg_bin() is None:
        return (f"PostgreSQL server binaries not found (install Debian's 'postgresql' package, or set "
                f"{BIN_ENV} to the directory holding initdb, pg_ctl and postgres)")
    if os.geteuid() == 0:
        if _system_user_ids() is None:
            return (f"running as root and there is no '{SYSTEM_USER}' system user to own the cluster "
                    "(the postgres server refuses to run as root)")
        if shutil.which("runuser") is None:
            return "running as root and 'runuser' is missing (needed to start postgres as its own user)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the psycopg package is not installed (pip install 'accelopt_nb[postgres]')"
    return None


class TempPostgres:
    """One PostgreSQL cluster in a fresh temporary directory, listening on loopback only."""

    def __init__(self, *, database: str = DB_NAME) -> None:
        self.database = database
        self.port = 0
        self.root: Path | None = None
        self._bin: Path | None = None
        self._as_user: list[str] = []

    @property
    def url(self) -> str:
        return f"postgresql://{DB_USER}@127.0.0.1:{self.port}/{self.database}"

    def _run(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        cmd = [*self._as_user, *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            log = ""
            if self.root is not None and (self.root / "server.log").is_file():
                log = (self.root / "server.log").read_text()[-2000:]
            raise StoreError(f"{Path(args[0]).name} failed ({done.returncode}): "
                             f"{(done.stderr or done.stdout).strip()[-2000:]}\n{log}".rstrip())
        return done

    def start(self) -> "TempPostgres":
        reason = unavailable_reason()
        if reason is not None:
            raise StoreError(f"cannot start a throwaway PostgreSQL server: {reason}")
        self._bin = find_pg_bin()
        # Directly under the system temp dir: a per-user test directory is often closed to other users.
        self.root = Path(tempfile.mkdtemp(prefix="accelopt-pg-"))
        if os.geteuid() == 0:
            uid, gid = _system_user_ids()  # type: ignore[misc]
            os.chown(self.root, uid, gid)
            self._as_user = ["runuser", "-u", SYSTEM_USER, "--"]
        data = self.root / "data"
        assert self._bin is not None
        self._run(str(self._bin / "initdb"), "-D", str(data), "-U", DB_USER, "-A", "trust", "-E", "UTF8",
                  "--no-instructions")
        self.port = free_port()
        # No fsync: a throwaway cluster trades durability for speed. Unix socket inside root only.
        options = f"-h 127.0.0.1 -p {self.port} -k {self.root} -F"
        self._run(str(self._bin / "pg_ctl"), "-D", str(data), "-o", options, "-l",
                  str(self.root / "server.log"), "-w", "-t", "60", "start")
        if self.database != "postgres":
            import psycopg
            with psycopg.connect(f"postgresql://{DB_USER}@127.0.0.1:{self.port}/postgres",
                                 autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.database}"')
        return self

    def stop(self) -> None:
        if self.root is None:
            return
        try:
            if (self.root / "data" / "postmaster.pid").exists() and self._bin is not None:
                self._run(str(self._bin / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "-w",
                          "stop", timeout=60.0)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> "TempPostgres":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
