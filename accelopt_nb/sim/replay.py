"""Loop replay in trace-only mode: run a few iterations, extrapolate the rest, exactly or not at all.

A trace-only simulation spends ~100 µs of Python per instruction, and compiler-style kernels issue tens
of thousands of instructions from a handful of loop bodies. In trace-only mode an ``nl.*_range`` loop
runs its first :data:`PROBES` iterations for real (*probes*). If their records (instructions, tensors
registered, loop uids, epochs, counters) are structurally identical and every integer in them moves by
the same delta from one probe to the next, the runtime stops running the Python body and builds the
records of the following iterations by extrapolation, leaving the trace and the runtime's counters as
running every iteration would.

Extrapolation is only used where it provably gives the same records:

* the loop passes the static check of :mod:`accelopt_nb.sim.loopcheck` (no Python state carried across
  iterations or out of the loop, stores only into NKI tensors, calls only to NKI / NumPy / pure code);
* the loop variable is a :class:`Tainted` int while probing: arithmetic that keeps it affine (``+``,
  ``-``, ``*`` by a constant) propagates the taint; anything else done with it outside the simulator
  (comparisons, ``bool``, ``hash``, ``//``, ``%``, ``int()``, formatting, NumPy conversion) marks the
  loops it depends on as not replayable;
* every mask comparison made while probing (``nl.arange(...) + 128 * i < n``) is extrapolated too:
  replay stops at the first iteration where its outcome would change (a ragged tail), which then runs
  for real, and probing starts again after it;
* no region was clamped to its tensor while probing, and replay stops before the first iteration
  whose extrapolated regions would leave their tensor (where a real run clamps or raises);
* the runtime's other state (log, warnings, pending ``loop_reduce``, shared HBM cursor, ...) does not
  change while probing.

A nested loop replays inside each executed iteration of its parent, and the parent replays as a whole
(its records include the child's extrapolated ones). ``Trace.replayed`` counts extrapolated
instructions. ``SimOptions(loop_replay=False)`` runs every iteration.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from accelopt_nb.sim import loopcheck
from accelopt_nb.sim.runtime import LoopFrame, LoopIndex, Runtime, active
from accelopt_nb.sim.trace import Instruction, Region, TensorInfo

PROBES = 3
_SIM_DIR = str(Path(__file__).parent)
probing = 0        # probes active in any thread: gates the hooks' slow path


# ---- taint ------------------------------------------------------------------------------------------
def _outside_simulator(depth: int) -> bool:
    """Whether the code ``depth`` frames up (the caller of a dunder method) is not the simulator's own."""
    return not sys._getframe(depth).f_code.co_filename.startswith(_SIM_DIR)


class _TaintOps:
    """Methods of the tainted ints: ``deps`` are the :class:`Probe` s of the loop variables they depend on."""

    __slots__ = ()
    deps: tuple["Probe", ...]

    def _escape(self, depth: int = 3) -> None:
        if _outside_simulator(depth):
            for p in self.deps:
                p.fail("the loop variable reaches Python control flow or non-affine arithmetic")

    def _linear(self, other: Any, result: Any) -> Any:
        if result is NotImplemented or type(result) is not int:
            if isinstance(result, float):
                self._escape(5)
            return result
        deps = self.deps
        if isinstance(other, _TaintOps):
            deps = deps + tuple(p for p in other.deps if p not in deps)
        out = Tainted(result)
        out.deps = deps
        return out

    def __add__(self, o): return self._linear(o, int.__add__(self, o))
    def __radd__(self, o): return self._linear(o, int.__radd__(self, o))
    def __sub__(self, o): return self._linear(o, int.__sub__(self, o))
    def __rsub__(self, o): return self._linear(o, int.__rsub__(self, o))
    def __neg__(self): return self._linear(0, int.__neg__(self))
    def __pos__(self): return self

    def __mul__(self, o):
        if isinstance(o, _TaintOps) and any(p in o.deps for p in self.deps):
            self._escape()  # quadratic in one loop variable
            return int.__mul__(self, o)
        return self._linear(o, int.__mul__(self, o))

    __rmul__ = __mul__


def _escaping(name: str):
    base = getattr(int, name)

    def method(self, *args):
        result = base(self, *args)
        if result is not NotImplemented:  # else Python asks the other operand (an index expression)
            self._escape()
        return result
    method.__name__ = name
    return method


for _name in ("__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__divmod__", "__rdivmod__", "__truediv__",
              "__rtruediv__", "__pow__", "__rpow__", "__lshift__", "__rlshift__", "__rshift__", "__rrshift__",
              "__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__", "__invert__", "__abs__", "__lt__",
              "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__bool__", "__hash__", "__int__", "__float__",
              "__index__", "__format__", "__str__", "__repr__", "__round__", "__trunc__", "__floor__", "__ceil__",
              "bit_length", "to_bytes", "as_integer_ratio"):
    setattr(_TaintOps, _name, _escaping(_name))


class Tainted(_TaintOps, int):
    """An int computed affinely from probing loop variables."""


class ProbeIndex(_TaintOps, LoopIndex):
    """The loop variable of a probing iteration."""


# ---- probes -----------------------------------------------------------------------------------------
class Probe:
    """One loop instance's evidence while its probe iterations run."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.events: list[list[tuple]] = []   # per probe iteration: (op, lhs, rhs, result) of mask comparisons

    def fail(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason


def note_mask(op: Any, lhs: np.ndarray, rhs: Any, result: np.ndarray) -> None:
    """A mask comparison made while probing (``IndexExpr`` comparison hook)."""
    rt = active()
    if rt is None:
        return
    rhs = np.asarray(rhs)
    for p in rt.probes:
        if p.events:
            p.events[-1].append((op, lhs, rhs, result))


def note_region(region: Region, shape: tuple[int, ...], clamped: bool) -> None:
    """A region recorded while probing (``View.region`` hook): its view's shape, and whether it was clamped."""
    rt = active()
    if rt is None or not rt.probes:
        return
    rt.region_shapes[id(region)] = shape
    if clamped:
        for p in rt.probes:
            p.fail("a region was clamped to its tensor")


# ---- the loop ---------------------------------------------------------------------------------------
def run(rt: Runtime, frame: LoopFrame, values: range, caller: Any) -> Iterator[int]:
    """Iterate ``values`` for the kernel frame ``caller``, replaying what can be replayed."""
    site: loopcheck.LoopSite | str = "loop not called from kernel code"
    if caller is not None and caller.f_code.co_filename in rt.kernel_files:
        site = loopcheck.loop_site(caller.f_code, caller.f_lineno)
    n = len(values)
    pos = 0
    import os
    if os.environ.get("REPLAY_DEBUG") and isinstance(site, str): print("REPLAY site:", caller and caller.f_lineno, site, file=sys.stderr)
    global probing
    while pos < n:
        if isinstance(site, str) or n - pos <= PROBES:
            for i in values[pos:]:
                yield rt.enter_iteration(frame, i)
            return
        probe = Probe()
        marks = [_mark(rt)]
        for j in range(PROBES):
            probe.events.append([])
            rt.probes.append(probe)
            probing += 1
            try:
                idx = rt.enter_iteration(frame, values[pos + j], ProbeIndex)
                idx.deps = (probe,)
                yield idx
            finally:
                probing -= 1
                rt.probes.remove(probe)
            marks.append(_mark(rt))
            if probe.reason is None and j == 0:
                reason = loopcheck.runtime_reason(site, caller.f_locals, caller.f_globals, rt.kernel_files,
                                                  _sim_types())
                if reason:
                    probe.fail(reason)
        pos += PROBES
        done = None if probe.reason else _extrapolate(rt, frame, values, pos, probe, marks)
        if not rt.probes:
            rt.region_shapes.clear()
        if done is None:
            site = probe.reason or "replay check failed"
            import os
            if os.environ.get("REPLAY_DEBUG"): print("REPLAY no:", caller.f_lineno, site, file=sys.stderr)
        else:
            pos += done


def _sim_types() -> tuple[type, ...]:
    from accelopt_nb.sim.indexing import IndexExpr, Mask, _Grid, _MGrid
    from accelopt_nb.sim.tensor import Tensor, View
    return (Tensor, View, IndexExpr, Mask, _Grid, _MGrid)


_MARK_SKIP = frozenset({"trace", "loops", "loop_key", "epoch", "_next_uid", "_next_tensor", "probes", "region_shapes"})


def _mark(rt: Runtime) -> tuple:
    """The runtime at an iteration boundary: positions, counters, and the identity of everything else."""
    other = tuple((k, id(v), len(v) if isinstance(v, (list, dict)) else None)
                  for k, v in vars(rt).items() if k not in _MARK_SKIP)
    return (len(rt.trace.instructions), rt._next_tensor, rt._next_uid, rt.epoch, other)


# ---- records as signatures and builders ----------------------------------------------------------------
# A record (instruction or tensor) becomes a *signature*, its structure and every non-integer value as
# nested tuples, and the list of its integers. Iterations whose records have equal signatures differ
# only in their integers. Each record signature compiles, once, into a function that builds the record
# from integers; an extrapolated iteration is those functions applied to the extrapolated integers.
# Signature nodes: _INT (an integer), a str/bool/float/None (itself), ("c", x) (another constant),
# ("g", type) (a NumPy integer), ("t"|"l", items), ("d", keys, values), ("R", ...) (a Region),
# ("L", kinds) (a loops tuple), ("N", class, fields) (a record), ("auto",) (a tensor's default name).
_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in (Instruction, Region, TensorInfo)}
_REGION_FAST = _FIELDS[Region] == ("tensor", "buffer", "lo", "hi", "elements", "itemsize", "block")
_CTOR = {Instruction: "I", Region: "R", TensorInfo: "T"}
_INT = ("i",)
_PLAIN = (str, bool, float, type(None))


class _Flat:
    """Signatures and integers of a run of records, and where each region's integers sit."""

    def __init__(self, rt: Runtime) -> None:
        self.ints: list[int] = []
        self.shapes = rt.region_shapes
        # per region: (its first slot (the tensor id), number of dims or -1 if unknown, its view's shape or None)
        self.regions: list[tuple[int, int, tuple[int, ...] | None]] = []
        self.plan: list[tuple[tuple, int, bool]] = []    # per record: (signature, first slot, is a tensor)

    def add(self, rec: Any, tensor: bool) -> tuple:
        first = len(self.ints)
        sig = self.record(rec)
        self.plan.append((sig, first, tensor))
        return sig

    def sig(self, x: Any) -> Any:
        t = type(x)
        if t is int:
            self.ints.append(x)
            return _INT
        if t in _PLAIN:
            return x
        if t is tuple:
            return ("t", self.items(x))
        if t is Region:
            return self.region(x)
        if t is dict:
            return ("d", tuple(x), self.items(x.values()))
        if t is list:
            return ("l", self.items(x))
        if t in _FIELDS:
            return self.record(x)
        if t is Tainted or t is ProbeIndex:
            self.ints.append(int(x))
            return _INT
        if isinstance(x, np.integer):
            self.ints.append(int(x))
            return ("g", t)
        return ("c", x)

    def items(self, xs: Any) -> tuple:
        out = []
        ints = self.ints
        for e in xs:
            t = type(e)
            if t is int:
                ints.append(e)
                out.append(_INT)
            elif t in _PLAIN:
                out.append(e)
            else:
                out.append(self.sig(e))
        return tuple(out)

    def region(self, x: Region) -> Any:
        if not (_REGION_FAST and type(x.tensor) is int and type(x.elements) is int and type(x.itemsize) is int
                and type(x.block) is int and all(type(e) is int for e in x.lo) and all(type(e) is int for e in x.hi)):
            self.regions.append((len(self.ints), -1, None))   # a layout the fast path does not read: unchecked
            return self.record(x)
        ints = self.ints
        self.regions.append((len(ints), len(x.lo), self.shapes.get(id(x))))
        ints.append(x.tensor)
        ints += x.lo
        ints += x.hi
        ints.append(x.elements)
        ints.append(x.itemsize)
        ints.append(x.block)
        return ("R", x.buffer, len(x.lo), len(x.hi))

    def loops(self, x: Any) -> Any:
        if type(x) is tuple and all(type(e) is tuple and len(e) == 3 and type(e[0]) is int and type(e[2]) is int
                                    and type(e[1]) is str for e in x):
            ints = self.ints
            for uid, _, it in x:
                ints.append(uid)
                ints.append(it)
            return ("L", tuple(e[1] for e in x))
        return self.sig(x)

    def record(self, x: Any) -> tuple:
        t = type(x)
        parts = []
        for name in _FIELDS[t]:
            val = getattr(x, name)
            if name == "loops":
                parts.append(self.loops(val))
            elif t is TensorInfo and name == "name" and val == f"{x.kind}{x.id}":
                parts.append(("auto",))   # the runtime's default name: kind + id
            else:
                parts.append(self.sig(val))
        return ("N", t, tuple(parts))


def _flatten(rt: Runtime, a: tuple, b: tuple) -> tuple[tuple, np.ndarray, _Flat]:
    """The records between two marks: (signature, integers, where their regions sit)."""
    flat = _Flat(rt)
    sig = [flat.add(ins, False) for ins in rt.trace.instructions[a[0]:b[0]]]
    tensors = rt.trace.tensors
    for tid in range(a[1], b[1]):
        info = tensors.get(tid)
        if info is not None:
            sig.append(flat.add(info, True))
    return tuple(sig), np.array(flat.ints, dtype=np.int64), flat


class _Codegen:
    """Python source of a function ``build(v, o, C)`` that rebuilds one record from integers ``v[o:]``."""

    def __init__(self) -> None:
        self.k = 0
        self.consts: list[Any] = []

    def slot(self, wrap: type | None = None) -> str:
        self.k += 1
        text = f"v[o+{self.k - 1}]"
        return text if wrap is None else f"{self.const(wrap)}({text})"

    def const(self, x: Any) -> str:
        if type(x) in (str, bool) or x is None:
            return repr(x)
        self.consts.append(x)
        return f"C[{len(self.consts) - 1}]"

    def expr(self, sig: Any) -> str:
        if type(sig) is not tuple:
            return self.const(sig)
        kind = sig[0]
        if kind == "i":
            return self.slot()
        if kind == "c":
            return self.const(sig[1])
        if kind == "g":
            return self.slot(sig[1])
        if kind == "t":
            return "(" + "".join(self.expr(e) + "," for e in sig[1]) + ")"
        if kind == "l":
            return "[" + ",".join(self.expr(e) for e in sig[1]) + "]"
        if kind == "d":
            return "{" + ",".join(f"{self.const(key)}:{self.expr(e)}" for key, e in zip(sig[1], sig[2])) + "}"
        if kind == "L":
            return "(" + "".join(f"({self.slot()},{kind!r},{self.slot()})," for kind in sig[1]) + ")"
        if kind == "R":
            _, buffer, nlo, nhi = sig
            tensor = self.slot()
            lo = "(" + "".join(self.slot() + "," for _ in range(nlo)) + ")"
            hi = "(" + "".join(self.slot() + "," for _ in range(nhi)) + ")"
            return (f"R(tensor={tensor},buffer={self.const(buffer)},lo={lo},hi={hi},"
                    f"elements={self.slot()},itemsize={self.slot()},block={self.slot()})")
        if kind == "N":
            cls, parts = sig[1], sig[2]
            names = _FIELDS[cls]
            args, id_slot = [], ""
            for name, part in zip(names, parts):
                if part == ("auto",):
                    args.append(f"name={self.const(parts[names.index('kind')])}+str({id_slot})")
                    continue
                text = self.expr(part)
                if cls is TensorInfo and name == "id":
                    id_slot = text
                args.append(f"{name}={text}")
            return f"{_CTOR[cls]}({','.join(args)})"
        raise AssertionError(f"unknown signature node {kind!r}")


_builders: dict[tuple, tuple[Any, list[Any]]] = {}
_SCOPE = {"I": Instruction, "R": Region, "T": TensorInfo}


def _builder(sig: tuple) -> tuple[Any, list[Any]]:
    """The compiled builder of one record signature and its constants (cached: records repeat)."""
    try:
        hit = _builders.get(sig)
        hashable = True
    except TypeError:  # an unhashable constant
        hit, hashable = None, False
    if hit is not None:
        return hit
    gen = _Codegen()
    source = f"def build(v, o, C):\n    return {gen.expr(sig)}\n"
    scope = dict(_SCOPE)
    exec(compile(source, "<loop replay>", "exec"), scope)  # noqa: S102 - generated from the signature
    out = (scope["build"], gen.consts)
    if hashable:
        if len(_builders) >= 4096:
            _builders.clear()
        _builders[sig] = out
    return out


# ---- the check and the extrapolation -------------------------------------------------------------------
def _extrapolate(rt: Runtime, frame: LoopFrame, values: range, pos: int, probe: Probe, marks: list[tuple]) -> int | None:
    """Append the records of as many iterations from ``pos`` as are provably identical; how many, or None."""
    if any(m[4] != marks[0][4] for m in marks):
        probe.fail("runtime state other than the trace changed in the loop body")
        return None
    counters = np.array([m[:4] for m in marks], dtype=np.int64)
    steps = np.diff(counters, axis=0)
    if (steps != steps[0]).any():
        probe.fail("iterations differ in their instruction, tensor, loop or epoch counts")
        return None
    flats = [_flatten(rt, marks[j], marks[j + 1]) for j in range(PROBES)]
    sig, last, flat = flats[-1]
    try:
        same = all(f[0] == sig for f in flats[:-1])
    except Exception:  # noqa: BLE001 - a constant whose == is not a truth value (an array): not provably equal
        same = False
    if not same:
        probe.fail("iterations differ in structure")
        return None
    deltas = np.diff(np.stack([f[1] for f in flats]), axis=0)
    if (deltas != deltas[0]).any():
        probe.fail("a number in the records does not change by a constant step")
        return None
    delta = deltas[0]
    count, comparisons = _mask_limit(probe, len(values) - pos)
    if count is None:
        return None
    count = _bounds_limit(rt, flat, last, delta, count)
    if count is None:
        probe.fail("a region of the records cannot be checked against its tensor")
        return None
    if count <= 0:
        return 0
    _emit(rt, frame, values, pos, sig, last, delta, count, steps[0], flat)
    # an enclosing probing loop must also see this loop's last mask outcomes: the far corner of its range
    for p in rt.probes:
        p.events[-1].extend((op, lhs + count * dl, rhs + count * dr, res) for op, lhs, dl, rhs, dr, res in comparisons)
    return count


def _mask_limit(probe: Probe, count: int) -> tuple[int | None, list[tuple]]:
    """How many of ``count`` further iterations see every mask comparison come out as in the probes,
    and each comparison as (op, lhs, lhs step, rhs, rhs step, outcome) at the last probe."""
    ev = probe.events
    comparisons: list[tuple] = []
    if any(len(e) != len(ev[0]) for e in ev):
        probe.fail("iterations differ in their mask comparisons")
        return None, comparisons
    for k in range(len(ev[0])):
        ops = {e[k][0] for e in ev}
        if len(ops) != 1:
            probe.fail("iterations differ in their mask comparisons")
            return None, comparisons
        op = ev[0][k][0]
        lhs = [np.asarray(e[k][1]) for e in ev]
        rhs = [np.asarray(e[k][2]) for e in ev]
        res = [e[k][3] for e in ev]
        try:
            dl = [lhs[j + 1] - lhs[j] for j in range(PROBES - 1)]
            dr = [rhs[j + 1] - rhs[j] for j in range(PROBES - 1)]
        except ValueError:
            probe.fail("iterations differ in their mask comparisons")
            return None, comparisons
        if any(r.shape != res[0].shape or not np.array_equal(r, res[0]) for r in res) or \
                any(d.shape != dl[0].shape or not np.array_equal(d, dl[0]) for d in dl) or \
                any(d.shape != dr[0].shape or not np.array_equal(d, dr[0]) for d in dr):
            probe.fail("a mask comparison changes between probe iterations")
            return None, comparisons
        comparisons.append((op, lhs[-1], dl[0], rhs[-1], dr[0], res[0]))
        count = min(count, _comparison_limit(op, lhs[-1], dl[0], rhs[-1], dr[0], res[0], count))
    return count, comparisons


def _comparison_limit(op: Any, lhs: np.ndarray, dl: np.ndarray, rhs: np.ndarray, dr: np.ndarray,
                      res: np.ndarray, count: int) -> int:
    """Largest t <= count with ``op(lhs + s*dl, rhs + s*dr) == res`` for every s in 1..t.

    Each element's outcome along s is a half-line (ordering ops) or a point (equality), so for the
    ordering ops "same at t" implies "same at every s <= t" and a bisection finds the limit.
    """
    def same(t: int) -> bool:
        return bool(np.array_equal(op(lhs + t * dl, rhs + t * dr), res))

    if op in (np.equal, np.not_equal):
        slope = np.broadcast_to(dl - dr, np.broadcast_shapes(lhs.shape, rhs.shape, dl.shape, dr.shape))
        gap = np.broadcast_to(lhs - rhs, slope.shape)
        moving = slope != 0
        if not moving.any():
            return count
        s, g = slope[moving], gap[moving]
        hits = (g % s == 0) & (-g // s >= 1)   # the one s where the element would equal
        return count if not hits.any() else min(count, int((-g[hits] // s[hits]).min()) - 1)
    if same(count):
        return count
    lo, hi = 0, count   # same(lo), not same(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if same(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _bounds_limit(rt: Runtime, flat: _Flat, last: np.ndarray, delta: np.ndarray, count: int) -> int | None:
    """Largest t <= count whose extrapolated regions all stay inside their (view) shapes; None if unknown."""
    for first, ndim, shape in flat.regions:
        if ndim < 0:
            return None
        lo_slots = tuple(range(first + 1, first + 1 + ndim))
        hi_slots = tuple(range(first + 1 + ndim, first + 1 + 2 * ndim))
        if shape is None or len(shape) != ndim:
            if delta[list(lo_slots + hi_slots)].any():
                return None  # a moving region of unknown shape
            continue
        for slot_lo, slot_hi, size in zip(lo_slots, hi_slots, shape):
            d_lo, d_hi = int(delta[slot_lo]), int(delta[slot_hi])
            if d_lo < 0:
                count = min(count, int(last[slot_lo]) // -d_lo)
            if d_hi > 0:
                count = min(count, (size - int(last[slot_hi])) // d_hi)
            if d_lo > 0:
                count = min(count, (size - int(last[slot_lo])) // d_lo)
            if d_hi < 0:
                count = min(count, int(last[slot_hi]) // -d_hi)
    return count


def _emit(rt: Runtime, frame: LoopFrame, values: range, pos: int, sig: tuple, last: np.ndarray,
          delta: np.ndarray, count: int, step: np.ndarray, flat: _Flat) -> None:
    """Append ``count`` extrapolated iterations and advance the runtime's counters past them."""
    plan = [(*_builder(rec_sig), first, tensor) for rec_sig, first, tensor in flat.plan]
    rows = (last[None, :] + np.arange(1, count + 1, dtype=np.int64)[:, None] * delta[None, :]).tolist()
    trace = rt.trace
    ins, tens = trace.instructions, trace.tensors
    first_new = len(ins)
    append = ins.append
    for v in rows:
        for build, consts, o, tensor in plan:
            rec = build(v, o, consts)
            if tensor:
                tens[rec.id] = rec
            else:
                append(rec)
    shapes = [r[2] for r in flat.regions]
    if rt.probes and shapes:  # an enclosing loop is probing: it needs the shapes of the regions just built
        k = 0
        for instr in ins[first_new:]:
            for reg in instr.reads + instr.writes:
                if shapes[k % len(shapes)] is not None:
                    rt.region_shapes[id(reg)] = shapes[k % len(shapes)]
                k += 1
    trace.replayed += len(ins) - first_new
    n_ins, n_tensor, n_uid, n_epoch = (int(x) * count for x in step)
    rt._next_tensor += n_tensor
    rt._next_uid += n_uid
    rt.epoch += n_epoch
    frame.iteration = values[pos + count - 1]
    if frame.kind == "affine":
        frame.iter_epoch = rt.epoch - int(step[3]) + 1
