"""``ast.parse`` that is safe to call from several threads at once.

CPython 3.11 keeps the AST constructor's recursion-depth counter per interpreter, not per thread:
two threads parsing at once can fail with ``SystemError: AST constructor recursion depth
mismatch``. Every parse of the package (agents reading answers on LLM threads, the search's
dedupe, the evaluation's static check) goes through this one lock.
"""
from __future__ import annotations

import ast
import threading

__all__ = ["PARSE_LOCK", "parse"]

PARSE_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    with PARSE_LOCK:
        return ast.parse(source, filename=filename, mode=mode)
