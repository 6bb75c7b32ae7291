"""The primitives: every function that changes simulator memory, declared once where it is defined, with its rules.

A *primitive* is a plain function that computes on arrays: it writes into one of its array arguments in place or
returns new memory (``writes``), and it depends on nothing but its arguments. Array data is passed positionally,
everything else (functions, dtypes, axes, flags) by keyword: ``call(fn, *arrays, **params)``. Every change the
simulator makes to memory, validity or its books goes through :func:`call` (or :func:`note`, for a change the
caller made itself), the one interception point: the core runs ``fn`` and, while an observer records (loop replay
with values, see :mod:`accelopt_nb.sim.core.hooks`), hands it the call.

Each primitive carries its rules, declared with :func:`primitive` next to its definition (the way JAX attaches one
rule per transformation to a primitive):

* eager evaluation: the function itself;
* ``replay``: how value replay treats a recorded call. :data:`REBUILD`: re-run it at a later iteration with its
  arguments rebuilt at that iteration's offsets (the function depends on its arguments alone); :data:`BOOKS`: it
  changes only the runtime's books (loop frames, validity covers, the write log), takes no arrays, and runs
  iteration by iteration before any lanes; :data:`GUARD`: a validity check evaluated before each replayed
  iteration (its call does nothing). ``None``, the default: a loop that calls it is not replayed with values (it
  runs every iteration), so a primitive added without a rule is exact by construction;
* ``lane``: how the replayed iterations' calls run as one NumPy call (:class:`Lane`), or ``None``, the default:
  they run iteration by iteration;
* ``provable``: for a check of writes, ``(logged, clear)``: the same call without the check, and a test whether no
  write logged before meets the given boxes (value replay then decides the checks once per replay);
* ``writes``: the positional argument it writes into, if any.

What an instruction records in the trace (its engine, op and the attrs the performance model reads, documented on
:class:`accelopt_nb.sim.trace.Instruction`) is the API's part: one instruction may run several primitives (reads,
casts, its compute, the write) and one primitive serves many instructions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from accelopt_nb.sim.core.context import active

REBUILD = "rebuild"
BOOKS = "books"
GUARD = "guard"


@dataclass(frozen=True)
class Lane:
    """How a primitive runs over lanes: each array argument gains a leading axis, one lane per replayed iteration.

    ``impl`` runs the lanes (None: the primitive itself, whose arrays broadcast over a leading axis or which
    computes on the trailing axes of its arrays); ``accepts(args, params)`` says whether lanes are exact for one
    recorded call (``args``: per positional argument an :class:`Array` for an array, else its value; ``params`` by
    name); ``accumulates``: the call adds into its written argument, which may stay put, lane after lane."""

    impl: Callable[..., Any] | None = None
    accepts: Callable[[list, dict], bool] | None = None
    accumulates: bool = False


@dataclass(frozen=True)
class Array:
    """An array argument as a lane rule sees it: its rank within one iteration."""

    rank: int


@dataclass(frozen=True)
class Prim:
    fn: Callable[..., Any]
    replay: str | None = None
    lane: Lane | None = None
    writes: int | None = None
    provable: tuple[Callable[..., Any], Callable[[Any, list], bool]] | None = None

    @property
    def name(self) -> str:
        return getattr(self.fn, "__qualname__", repr(self.fn))


PRIMS: dict[Callable[..., Any], Prim] = {}


def primitive(*, replay: str | None = None, lane: Lane | None = None, writes: int | None = None,
              provable: tuple | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare the decorated function a primitive with these rules (the function itself is returned unchanged)."""
    if replay not in (None, REBUILD, BOOKS, GUARD):
        raise ValueError(f"unknown replay rule {replay!r}")
    if lane is not None and replay != REBUILD:
        raise ValueError("a lane form needs replay=REBUILD")

    def declare(fn: Callable[..., Any]) -> Callable[..., Any]:
        PRIMS[fn] = Prim(fn, replay, lane, writes, provable)
        return fn
    return declare


def call(fn: Callable[..., Any], /, *args: Any, **params: Any) -> Any:
    """``fn(*args, **params)``, handed to the recording observer (if one records)."""
    result = fn(*args, **params)
    rt = active()
    if rt is not None:
        rec = rt.recording
        if rec is not None:
            rec.record(fn, args, params, result)
    return result


def note(fn: Callable[..., Any], /, *args: Any, result: Any = None, **params: Any) -> None:
    """Hand the recording observer ``fn(*args, **params)`` (returning ``result``), done by the caller itself."""
    rt = active()
    if rt is not None:
        rec = rt.recording
        if rec is not None:
            rec.record(fn, args, params, result)


def fail(reason: str) -> None:
    """Memory changed in a way no recorded call repeats (a gather, per-element validity, ...)."""
    rt = active()
    if rt is not None:
        rec = rt.recording
        if rec is not None:
            rec.fail(reason)


# ---- lane rules shared by several primitives ---------------------------------------------------------
ELEMENTWISE: set[Callable[..., Any]] = set()   # functions that are elementwise though not ufuncs (elementwise())


def elementwise(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Declare ``fn`` elementwise: an element of its result depends on the same element of each operand (so it
    runs over lanes as over any other broadcast axis)."""
    ELEMENTWISE.add(fn)
    return fn


def is_elementwise(fn: Any) -> bool:
    """A single-output ufunc without a core signature, or a function declared :func:`elementwise`."""
    try:
        return (type(fn) is np.ufunc and fn.signature is None and fn.nout == 1) or fn in ELEMENTWISE
    except TypeError:   # unhashable
        return False


def lane_axes(axes: Any) -> Any:
    """Reduction axes of an iteration's array as axes of its lanes (behind the lane axis)."""
    return tuple(a + 1 if a >= 0 else a for a in axes) if isinstance(axes, tuple) else axes + 1 if axes >= 0 else axes


def reduces_over_axes(args: list, params: dict) -> bool:
    """Lanes of a reduction over given axes (``axes``) of arrays of one rank (so no padding shifts them); axes None
    reduce everything."""
    ranks = {a.rank if isinstance(a, Array) else np.ndim(a) for a in args if isinstance(a, (Array, np.ndarray))}
    return params.get("axes") is not None and len(ranks) == 1



__all__ = ["Array", "BOOKS", "ELEMENTWISE", "GUARD", "Lane", "PRIMS", "Prim", "REBUILD", "call",
           "elementwise", "fail", "is_elementwise", "lane_axes", "note", "primitive", "reduces_over_axes"]
