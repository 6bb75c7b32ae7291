"""Python-level helpers every layer may use (no dependency on any of them).

``parse``: ``ast.parse`` that is safe to call from several threads at once. CPython 3.11 keeps the AST
constructor's recursion-depth counter per interpreter, not per thread: two threads parsing at once can fail with
``SystemError: AST constructor recursion depth mismatch``. Every parse of the package (agents reading answers on
LLM threads, the search's dedupe, the evaluation's static check) goes through this one lock.

``gc_paused``: the cyclic garbage collector paused around work that allocates many acyclic objects (a simulation's
trace, a performance-model estimate).
"""
from __future__ import annotations

import ast
import contextlib
import gc
import threading
from typing import Iterator

__all__ = ["PARSE_LOCK", "gc_paused", "parse"]

PARSE_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    with PARSE_LOCK:
        return ast.parse(source, filename=filename, mode=mode)


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
