"""Subcommands of the `accelopt` CLI, one module each (discovered by accelopt_nb.cli).

Machine-readable output: while a ``--json`` command runs, :func:`stdout_for_json_only` sends whatever
else is printed (a kernel's own ``print()``, a library's chatter) to stderr, and :func:`emit_json`
writes the command's JSON to the real stdout, so ``accelopt ... --json | jq`` always reads JSON.
"""
from __future__ import annotations

import contextlib
import json
import sys
from typing import Any, Iterator, TextIO

_json_streams: list[TextIO] = []   # the real stdout of each --json command running (innermost last)


@contextlib.contextmanager
def stdout_for_json_only(enabled: bool) -> Iterator[None]:
    """Reserve stdout for :func:`emit_json` while the block runs (when ``enabled``)."""
    if not enabled:
        yield
        return
    _json_streams.append(sys.stdout)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _json_streams.pop()


def emit_json(obj: Any, **dumps_kwargs: Any) -> None:
    """Print one JSON document on the command's real stdout (one line unless ``indent`` is given)."""
    out = _json_streams[-1] if _json_streams else sys.stdout
    out.write(json.dumps(obj, **dumps_kwargs) + "\n")
    out.flush()
