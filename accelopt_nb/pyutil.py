"""Python-level helpers every layer may use (no dependency on any of them).

``parse``: ``ast.parse`` that is safe to call from several threads at once. CPython 3.11 keeps the AST
constructor's recursion-depth counter per interpreter, not per thread: two threads parsing at once can fail with
``SystemError: AST constructor recursion depth mismatch``. Every parse of the package (agents reading answers on
LLM threads, the search's dedupe, the evaluation's static check) goes through this one lock. In a notebook the
kernel parses and compiles every cell on its main thread while our LLM worker thread parses answers, so
``guard_ipython`` makes the running IPython shell take the same lock for its own parses and compiles (the magics
extension and the LLM worker thread install it).

``gc_paused``: the cyclic garbage collector paused around work that allocates many acyclic objects (a simulation's
trace, a performance-model estimate).

``free_port``: a loopback TCP port nobody listens on now (bound, then released), for a local server to take.
"""
from __future__ import annotations

import ast
import contextlib
import gc
import socket
import sys
import threading
from typing import Any, Iterator

__all__ = ["PARSE_LOCK", "free_port", "gc_paused", "guard_ipython", "parse"]

PARSE_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    with PARSE_LOCK:
        return ast.parse(source, filename=filename, mode=mode)


_LOCKED: dict[type, type] = {}


def _locked(cls: type) -> type:
    """A subclass of IPython's cell compiler whose parse and compile hold :data:`PARSE_LOCK`."""
    if getattr(cls, "_accelopt_parse_lock", False):
        return cls
    if cls not in _LOCKED:
        def ast_parse(self: Any, *args: Any, **kwargs: Any) -> Any:
            with PARSE_LOCK:
                return super(sub, self).ast_parse(*args, **kwargs)

        def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:  # compiling a syntax tree converts it back
            with PARSE_LOCK:
                return super(sub, self).__call__(*args, **kwargs)

        sub = type(cls.__name__, (cls,), {"ast_parse": ast_parse, "__call__": __call__,
                                          "_accelopt_parse_lock": True, "__module__": cls.__module__})
        _LOCKED[cls] = sub
    return _LOCKED[cls]


def guard_ipython(shell: Any = None) -> bool:
    """Make an IPython shell (the running one by default) parse and compile cells under :data:`PARSE_LOCK`.

    Returns whether a shell was guarded; idempotent, and a no-op outside IPython (IPython is never imported here).
    """
    if shell is None:
        ipython = sys.modules.get("IPython")
        get = getattr(ipython, "get_ipython", None)
        shell = get() if callable(get) else None
        if shell is None:
            return False
    compiler = getattr(shell, "compile", None)
    if compiler is None or not hasattr(compiler, "ast_parse"):
        return False
    compiler.__class__ = _locked(type(compiler))
    compiler_class = getattr(shell, "compiler_class", None)
    if isinstance(compiler_class, type):
        shell.compiler_class = _locked(compiler_class)
    return True


@contextlib.contextmanager
def gc_paused(pause: bool = True, keeps: bool = False) -> Iterator[None]:
    """Pause the cyclic garbage collector (when ``pause``).

    A simulation allocates a large, acyclic trace (it leaves a handful of cyclic objects, measured);
    the collector rescanned it over and over, half of a replayed run's time (gqa_full at paper shapes:
    4.1 s with it, 2.0 s without) and about 10% of a run with values (bmm). Tensors and their views
    form no reference cycles (``Tensor.full_view``), so a paused collector keeps no tile data alive.
    ``keeps``: what the block allocated mostly outlives it (the trace), so it moves to the oldest generation
    without the young-generation scan that re-enabling would start at once (10-20% of a replayed run:
    paper rope 6.5 of 32 ms); unless something else froze objects, whose freeze ``gc.unfreeze`` would undo.
    """
    was_enabled = gc.isenabled()
    if pause:
        gc.disable()
    try:
        yield
    finally:
        if pause and was_enabled:
            if keeps and gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def free_port() -> int:
    """A loopback TCP port that nothing listens on now (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
