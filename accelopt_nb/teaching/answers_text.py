"""Reading a learner's answer as a person would: numbers with units, names in any usual spelling.

Exercise checks compare meanings, not strings: ``"128"``, ``128.0`` and ``"128 partitions"`` are
the same count; ``"2 KiB"``, ``"2KB"`` and ``2048`` the same size in bytes; ``"memory-bound"``,
``"HBM"`` and ``"bandwidth"`` the same bound; ``"VectorE"``, ``"vector engine"`` and ``"DVE"`` the
same engine.
"""
from __future__ import annotations

import re
from numbers import Real
from typing import Any, Iterable

# bytes per unit; KB/MB are read as KiB/MiB (what a learner means for on-chip sizes)
_BYTE_UNITS = {"b": 1, "byte": 1, "bytes": 1, "k": 1024, "kb": 1024, "kib": 1024, "kbyte": 1024, "kbytes": 1024,
               "m": 2**20, "mb": 2**20, "mib": 2**20, "g": 2**30, "gb": 2**30, "gib": 2**30}
_NUMBER = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?)\s*([a-z]*)")


def number(answer: Any, *, byte_units: bool = False) -> float | None:
    """The number an answer states, or ``None``: ``128``, ``"128"``, ``"128 partitions"``, ``"2 KiB"``.

    With ``byte_units`` a unit after the number scales it (``"2 KiB"`` -> 2048); otherwise a word
    after the number is read as what is counted and ignored.
    """
    if isinstance(answer, bool):
        return None
    if isinstance(answer, Real):
        return float(answer)
    if hasattr(answer, "item") and callable(answer.item):      # numpy scalars, 0-d arrays
        try:
            return number(answer.item(), byte_units=byte_units)
        except (TypeError, ValueError):
            return None
    if not isinstance(answer, str):
        return None
    m = _NUMBER.match(answer.strip().lower().replace(",", "").replace("_", ""))
    if not m:
        return None
    value, unit = float(m.group(1)), m.group(2)
    if byte_units and unit:
        if unit not in _BYTE_UNITS:
            return None
        value *= _BYTE_UNITS[unit]
    return value


def words(answer: Any) -> list[str]:
    """Lower-case words of an answer, punctuation and ``-``/``_`` splitting words: "memory-bound" -> [memory, bound]."""
    return re.findall(r"[a-z0-9]+", str(answer).lower())


_NEGATIONS = {"not", "isn", "isnt", "no", "never", "neither", "nor"}


def negated(answer: Any) -> bool:
    return bool(_NEGATIONS & set(words(answer)))


# names people use for each engine (neuron-profile, the ISA docs, the architecture docs)
ENGINE_NAMES: dict[str, set[str]] = {
    "tensor": {"tensor", "tensore", "pe", "matmul", "systolic", "tensorengine", "te"},
    "vector": {"vector", "vectore", "dve", "vectorengine", "ve"},
    "scalar": {"scalar", "scalare", "act", "activation", "scalarengine", "se"},
    "gpsimd": {"gpsimd", "gpsimde", "pool", "simd", "gpsimdengine"},
    "dma": {"dma", "dmas", "queue", "queues"},
}


def engine(answer: Any) -> str | None:
    """The one engine an answer names (``"VectorE"``, ``"the vector engine"``, ``"DVE"`` -> ``"vector"``), else None."""
    ws = set(words(answer)) - {"the", "engine", "e", "unit", "core", "nc"}
    joined = "".join(words(answer))
    found = {name for name, aliases in ENGINE_NAMES.items()
             if ws & aliases or any(joined == a or joined == a + "engine" for a in aliases)}
    return found.pop() if len(found) == 1 else None


_MEMORY_WORDS = {"memory", "mem", "hbm", "bandwidth", "dma", "io", "traffic", "bytes", "data", "movement", "bw"}
_COMPUTE_WORDS = {"compute", "computation", "flops", "flop", "arithmetic", "math", "vector", "vec", "tensor", "mm",
                  "matmul", "alu", "engine", "engines", "tensore", "vectore", "scalar", "scalare", "gpsimd"}


def affirmed(answer: Any) -> list[str]:
    """The words of an answer minus those a negation denies: "memory, not compute" -> [memory]."""
    out, skip = [], False
    for w in words(answer):
        if w in _NEGATIONS or w == "t":          # "isn't" splits into isn, t
            skip = True
        elif skip and w not in {"the", "a", "an", "really", "very", "t"}:
            skip = False                          # the denied word
        else:
            out.append(w)
    return out


def bound(answer: Any) -> str | None:
    """``"memory"`` or ``"compute"`` from a phrase ("memory-bound", "HBM bandwidth", "compute bound", "FLOPs",
    "memory, not compute")."""
    ws = set(affirmed(answer))
    mem, comp = bool(ws & _MEMORY_WORDS), bool(ws & _COMPUTE_WORDS)
    if mem == comp:
        return None
    return "memory" if mem else "compute"


def one_of(answer: Any, names: dict[str, Iterable[str]]) -> str | None:
    """The key of ``names`` whose spellings the answer uses (words, or the whole answer without spaces)."""
    ws, joined = set(words(answer)), "".join(words(answer))
    found = {key for key, spellings in names.items()
             for s in spellings if ("".join(words(s)) == joined) or (len(words(s)) == 1 and words(s)[0] in ws)}
    return found.pop() if len(found) == 1 else None


__all__ = ["ENGINE_NAMES", "affirmed", "bound", "engine", "negated", "number", "one_of", "words"]
