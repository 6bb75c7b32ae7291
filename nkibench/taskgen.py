"""Materialise a problem's ``task.py`` for one shape preset.

A problem folder holds a single ``task.py`` in the paper's NKIBench file format, whose module-level
shape constants (``M = 4096`` ...) carry the paper's values. Materialising rewrites exactly those
assignments with the preset's values, giving the source of a standalone task file that is
identical to what the paper's tooling would load. :func:`load_task_source` imports such source
as a :class:`~accelopt_nb.taskfile.TaskModule` (used by ``Problem.task``); ``nkibench.export_task``
writes it to disk. Both go through the same text, so the exported file and the in-memory task can
never disagree.
"""
from __future__ import annotations

import ast
import hashlib
import linecache
from pathlib import Path
from types import ModuleType
from typing import Mapping

from accelopt_nb.errors import ProblemError
from accelopt_nb.pyutil import parse
from accelopt_nb.taskfile import REQUIRED, TaskModule


def materialize_source(source: str, shapes: Mapping[str, int], *, origin: str, header: str = "") -> str:
    """Return ``source`` with each top-level ``NAME = value`` for NAME in ``shapes`` set to that value."""
    try:
        tree = parse(source, filename=origin)
    except SyntaxError as exc:
        raise ProblemError(f"{origin}:{exc.lineno}: syntax error: {exc.msg}") from exc
    found: dict[str, ast.Assign] = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in shapes):
            name = node.targets[0].id
            if name in found:
                raise ProblemError(f"{origin}:{node.lineno}: shape constant {name} is assigned twice at module level")
            found[name] = node
    missing = [n for n in shapes if n not in found]
    if missing:
        raise ProblemError(f"{origin} does not define the shape constant(s) {', '.join(missing)} at module level "
                           "(each shape parameter needs a line like `M = 4096`)")
    lines = source.splitlines(keepends=True)
    # Replace from the bottom up so earlier offsets stay valid.
    for name, node in sorted(found.items(), key=lambda kv: (kv[1].value.lineno, kv[1].value.col_offset), reverse=True):
        v = node.value
        if v.lineno != v.end_lineno:
            raise ProblemError(f"{origin}:{v.lineno}: the value of shape constant {name} must fit on one line")
        row = lines[v.lineno - 1]
        # ast offsets are in UTF-8 bytes; shape lines are ASCII in practice, but be exact.
        raw = row.encode()
        row = (raw[: v.col_offset] + repr(int(shapes[name])).encode() + raw[v.end_col_offset:]).decode()
        lines[v.lineno - 1] = row
    text = "".join(lines)
    return header + text if header else text


def load_task_source(source: str, *, module_name: str, filename: str) -> TaskModule:
    """Import task source held in memory as a :class:`TaskModule` (tracebacks still show its lines)."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:10]
    filename = f"{filename}#{digest}"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    module = ModuleType(module_name)
    module.__file__ = filename
    try:
        code = compile(source, filename, "exec")
        exec(code, module.__dict__)
    except Exception as exc:  # a broken problem file deserves a message naming it
        raise ProblemError(f"task {filename} failed to import: {type(exc).__name__}: {exc}") from exc
    missing = [f for f in REQUIRED if not callable(getattr(module, f, None))]
    if missing:
        raise ProblemError(f"task {filename} does not define {', '.join(missing)}")
    return TaskModule(path=None, module=module)


def write_text(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
