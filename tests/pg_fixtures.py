"""A throwaway PostgreSQL server for the tests that need one (one per test session).

Import the fixtures into a test module: ``from pg_fixtures import pg_server, pg_url``. Each
``pg_url`` is a fresh, empty database on the shared server. Without the server binaries the
tests skip with the reason; in CI (``CI`` set) they fail instead, because ``.ci/run`` installs
Debian's ``postgresql`` package.
"""
from __future__ import annotations

import itertools
import os

import pytest

_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_server():
    from accelopt_nb.store.pgtemp import TempPostgres, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is required in CI (.ci/run installs it): {reason}")
        pytest.skip(reason)
    server = TempPostgres().start()
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server):
    import psycopg

    name = f"t{os.getpid()}_{next(_counter)}"
    admin = pg_server.url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return pg_server.url.rsplit("/", 1)[0] + f"/{name}"
