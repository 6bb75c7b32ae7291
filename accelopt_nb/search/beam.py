"""Beam selection, as the paper describes it.

The next beam is the B fastest **correct** kernels among the current beam (at their measured
latency) and this iteration's new candidates. This differs from the authors' code, where a
parent could only come back as a +inf fallback and the beam could regress (see
``accelopt_algorithm.md`` §1.3 and §7.4):

* a parent competes at its real latency, so the best kernel in the beam never gets worse;
* kernels with the same syntax tree (comments, docstrings and layout ignored) occupy one slot;
* ties are broken deterministically: incumbents before newcomers, then generation order, then id;
* candidates that are incorrect, failed, or have no finite latency never enter the beam.
"""
from __future__ import annotations

import ast
import hashlib
import math
from dataclasses import dataclass
from typing import Sequence

from accelopt_nb.pyutil import parse


def source_hash(source: str) -> str:
    """The identity of a kernel: sha256 of its source with line endings and trailing space normalized."""
    norm = "\n".join(line.rstrip() for line in source.replace("\r\n", "\n").split("\n")).strip() + "\n"
    return hashlib.sha256(norm.encode()).hexdigest()


def ast_hash(source: str) -> str:
    """A hash of the kernel's syntax tree without comments, docstrings or formatting, so two
    copies that differ only in those take one beam slot; unparsable text hashes as written."""
    try:
        tree = parse(source)
    except SyntaxError:
        return source_hash(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
    return source_hash(ast.dump(tree, annotate_fields=False, include_attributes=False))


@dataclass(frozen=True)
class Candidate:
    """A kernel competing for a beam slot."""

    kernel_id: str
    source_hash: str
    latency_ms: float | None
    correct: bool
    order: int = 0  # generation order within its group; lower wins ties

    @property
    def valid(self) -> bool:
        return bool(self.correct and self.latency_ms is not None and math.isfinite(self.latency_ms)
                    and self.latency_ms > 0)


def select_beam(current: Sequence[Candidate], new: Sequence[Candidate], width: int) -> list[Candidate]:
    """The next beam: at most ``width`` valid, distinct kernels, fastest first.

    ``current`` (the beam) is listed before ``new`` so that on equal latency an incumbent is
    kept; a kernel that re-appears with the same source keeps only its fastest measurement.
    """
    if width < 1:
        raise ValueError(f"beam width must be >= 1, got {width}")
    pool = [(0, c) for c in current] + [(1, c) for c in new]
    ranked = sorted(((group, c) for group, c in pool if c.valid),
                    key=lambda gc: (gc[1].latency_ms, gc[0], gc[1].order, gc[1].kernel_id))
    beam: list[Candidate] = []
    seen: set[str] = set()
    for _, cand in ranked:
        if cand.source_hash in seen:
            continue
        seen.add(cand.source_hash)
        beam.append(cand)
        if len(beam) == width:
            break
    return beam
