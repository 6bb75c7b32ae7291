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
  whose extrapolated regions, or int and slice indices (used by an instruction or not), would leave
  their tensor or view (where a real run clamps or raises);
* the runtime's other state (log, warnings, pending ``loop_reduce``, shared HBM cursor, ...) does not
  change while probing.

When the first probes differ (a ``loop_reduce`` restarting at the loop's first iteration) one more
iteration runs and the last :data:`PROBES` are compared. A nested loop replays inside each executed
iteration of its parent, and the parent replays as a whole (its records include the child's extrapolated
ones; the child hands up its last mask outcomes and index bounds, the far corner of its range). Mask
outcomes and bounds are linear in each loop variable, so checking a range's ends checks all of it.
``Trace.replayed`` counts extrapolated instructions. ``SimOptions(loop_replay=False)`` runs every
iteration.
"""
from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from accelopt_nb.sim import loopcheck
from accelopt_nb.sim.runtime import LoopFrame, LoopIndex, Runtime, active
from accelopt_nb.sim.trace import Instruction, Region, TensorInfo, Trace

PROBES = 3         # iterations compared (two steps: a constant step is seen twice)
WARMUP = 1         # iterations that may run first when the probes differ (a loop_reduce restarting at the start)
_SIM_DIR = str(Path(__file__).parent)
_log = logging.getLogger(__name__)


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
              "bit_length", "bit_count", "to_bytes", "as_integer_ratio", "conjugate", "__reduce_ex__",
              "__getnewargs__"):
    setattr(_TaintOps, _name, _escaping(_name))


def _escaping_attribute(name: str) -> property:
    base = getattr(int, name)

    def get(self):
        self._escape()
        return base.__get__(self)
    return property(get)


for _name in ("real", "imag", "numerator", "denominator"):   # plain ints: the taint would be lost
    setattr(_TaintOps, _name, _escaping_attribute(_name))


class Tainted(_TaintOps, int):
    """An int computed affinely from probing loop variables."""


class ProbeIndex(_TaintOps, LoopIndex):
    """The loop variable of a probing iteration."""


# ---- probes -----------------------------------------------------------------------------------------
class Probe:
    """One loop instance's evidence while its probe iterations run."""

    def __init__(self) -> None:
        self.reason: str | None = None        # why this loop cannot be replayed at all
        self.mismatch: str | None = None      # why the latest probe iterations do not extrapolate
        self.events: list[list[tuple]] = []   # per probe iteration: (op, lhs, rhs, result) of mask comparisons
        self.keys: list[list[int]] = []       # per probe iteration: (lo, hi, size) of every int and slice index

    def fail(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason


def probing() -> Runtime | None:
    """The runtime of this thread when one of its loops is probing (the hooks' gate)."""
    rt = active()
    return rt if rt is not None and rt.probes else None


def note_mask(rt: Runtime, op: Any, lhs: np.ndarray, rhs: Any, result: np.ndarray) -> None:
    """A mask comparison made while probing (``IndexExpr`` comparison hook)."""
    rhs = np.asarray(rhs)
    for p in rt.probes:
        if p.events:
            p.events[-1].append((op, lhs, rhs, result))


def note_key(rt: Runtime, key: tuple, shape: tuple[int, ...]) -> None:
    """A tensor indexed while probing (``Tensor.__getitem__`` hook): its ints and slices as (lo, hi, size)."""
    out = []
    for k, size in zip(key, shape):
        if type(k) is int:
            out += (k, k + 1, size)
        elif type(k) is slice:
            out += (k.start, k.stop, size)
    if out:
        for p in rt.probes:
            p.keys[-1] += out


def note_view_key(rt: Runtime, key: list[Any], lengths: list[int]) -> None:
    """A view re-indexed while probing (``View.__getitem__`` hook): bounds relative to the view's axes."""
    out: list[int] = []
    for k, length in zip(key, lengths):
        if isinstance(k, slice):
            if (k.start is None or isinstance(k.start, int)) and (k.stop is None or isinstance(k.stop, int)):
                out += (0 if k.start is None else int(k.start), length if k.stop is None else int(k.stop), length)
        elif isinstance(k, int):
            out += (int(k), int(k) + 1, length)
    if out:
        for p in rt.probes:
            p.keys[-1] += out


def note_region(rt: Runtime, region: Region, shape: tuple[int, ...], clamped: bool) -> None:
    """A region recorded while probing (``View.region`` hook): its view's shape, and whether it was clamped."""
    rt.region_shapes[id(region)] = shape
    if clamped:
        for p in rt.probes:
            p.fail("a region was clamped to its tensor")


def trace_fields(trace: Trace) -> tuple:
    """Everything a trace records except ``replayed``, as plain data: what replay must leave unchanged."""
    return ([dataclasses.astuple(i) for i in trace.instructions],
            [dataclasses.astuple(t) for t in trace.tensors.values()], list(trace.tensors), trace.kernel_name,
            trace.grid, trace.trace_only, trace.num_cores, trace.program_cores)


# ---- the loop ---------------------------------------------------------------------------------------
def run(rt: Runtime, frame: LoopFrame, values: range, caller: Any) -> Iterator[int]:
    """Iterate ``values`` for the kernel frame ``caller``, replaying what can be replayed."""
    site: loopcheck.LoopSite | str = "loop not called from kernel code"
    if caller is not None and caller.f_code.co_filename in rt.kernel_files:
        site = loopcheck.loop_site(caller.f_code, caller.f_lineno)
    if isinstance(site, str):
        _log.debug("loop at %s runs every iteration: %s", caller and caller.f_lineno, site)
    n = len(values)
    pos = 0
    while pos < n:
        if isinstance(site, str) or n - pos <= PROBES:
            for i in values[pos:]:
                yield rt.enter_iteration(frame, i)
            return
        probe = Probe()
        marks = [_mark(rt)]
        done = None
        while done is None and probe.reason is None and pos < n and len(marks) <= PROBES + WARMUP:
            probe.events.append([])
            probe.keys.append([])
            rt.probes.append(probe)
            try:
                idx = rt.enter_iteration(frame, values[pos], ProbeIndex)
                idx.deps = (probe,)
                yield idx
            finally:
                rt.probes.remove(probe)
            pos += 1
            marks.append(_mark(rt))
            if len(marks) == 2:
                reason = loopcheck.runtime_reason(site, caller.f_locals, caller.f_globals, rt.kernel_files,
                                                  _sim_types())
                if reason:
                    probe.fail(reason)
            if len(marks) > PROBES and probe.reason is None:
                done = _extrapolate(rt, frame, values, pos, probe, marks[-PROBES - 1:], probe.events[-PROBES:],
                                    probe.keys[-PROBES:])
        if not rt.probes:
            rt.region_shapes.clear()
            rt.replayed_blocks.clear()
            rt.flattened.clear()
        if done is None:
            site = probe.reason or probe.mismatch or "replay check failed"
            _log.debug("loop at %s:%s runs every iteration: %s", caller.f_code.co_filename, caller.f_lineno, site)
        else:
            pos += done


def _sim_types() -> tuple[type, ...]:
    from accelopt_nb.sim.indexing import IndexExpr, Mask, _Grid, _MGrid
    from accelopt_nb.sim.tensor import Tensor, View
    return (Tensor, View, IndexExpr, Mask, _Grid, _MGrid)


_MARK_SKIP = frozenset({"trace", "loops", "loop_key", "epoch", "_next_uid", "_next_tensor", "probes", "region_shapes",
                        "replayed_blocks", "flattened"})


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
# Signature nodes: _INT (an integer), a str/bool/None (itself), ("f", hex, x) (a float), ("c", type, x)
# (another constant), ("g", type) (a NumPy integer), ("t"|"l", items), ("d", keys, values), ("R", ...)
# (a Region), ("L", kinds) (a loops tuple), ("N", class, fields) (a record), ("auto",) (a default name).
_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in (Instruction, Region, TensorInfo)}
_REGION_FAST = _FIELDS[Region] == ("tensor", "buffer", "lo", "hi", "elements", "itemsize", "block")
_CTOR = {Instruction: "I", Region: "R", TensorInfo: "T"}
_INT = ("i",)
_PLAIN = (str, bool, type(None))


class _Block:
    """Records a nested loop extrapolated while its parent probes: what the parent's flatten reads back."""

    __slots__ = ("first_ins", "first_tensor", "count", "ins_sigs", "tens_sigs", "ins_ints", "tens_ints", "ins_plan",
                 "tens_plan", "width_ins", "width_tens", "lo", "hi", "size", "free", "unchecked")


class _Flat:
    """Signatures and integers of a run of records, and where each region's integers sit.

    Integers accumulate in a Python list, flushed into NumPy chunks when a nested loop's block of
    extrapolated records is read back whole. Region slots: ``lo``/``hi``/``size`` per checked dimension,
    ``free`` for slots of regions whose view shape is unknown (they must not move).
    """

    def __init__(self, rt: Runtime) -> None:
        self.ints: list[int] = []
        self.chunks: list[np.ndarray] = []
        self.base = 0
        self.shapes = rt.region_shapes
        self.blocks = rt.replayed_blocks
        self.seen = rt.flattened
        self.lo: list[int] = []
        self.hi: list[int] = []
        self.size: list[int] = []
        self.free: list[int] = []
        self.block_slots: dict[str, list[np.ndarray]] = {"lo": [], "hi": [], "size": [], "free": []}
        self.unchecked = False
        self.plan: list[tuple[tuple, int, bool]] = []    # per record: (signature, first slot, is a tensor)
        self.sigs: list[tuple] = []

    def pos(self) -> int:
        return self.base + len(self.ints)

    def flush(self) -> None:
        if self.ints:
            self.chunks.append(np.array(self.ints, dtype=np.int64))
            self.base += len(self.ints)
            self.ints = []

    def array(self) -> np.ndarray:
        self.flush()
        return np.concatenate(self.chunks) if self.chunks else np.zeros(0, dtype=np.int64)

    def slots(self, name: str) -> np.ndarray:
        """All ``lo``/``hi``/``size``/``free`` entries: the records' own, then the blocks'."""
        return np.concatenate([np.array(getattr(self, name), dtype=np.int64)] + self.block_slots[name])

    def add(self, rec: Any, tensor: bool) -> None:
        first = self.pos()
        hit = self.seen.get(id(rec))
        if hit is not None and hit[0] is rec:   # flattened already by a nested loop's probe
            _, sig, ints, lo, hi, size, free, unchecked = hit
            self.ints += ints
            if lo:
                self.lo += [first + r for r in lo]
                self.hi += [first + r for r in hi]
                self.size += size
            if free:
                self.free += [first + r for r in free]
            self.unchecked = self.unchecked or unchecked
        else:
            n_lo, n_free, unchecked = len(self.lo), len(self.free), self.unchecked
            sig = self.record(rec)
            if len(self.seen) < 1_000_000:   # a parent probe flattens this record again: keep the result
                self.seen[id(rec)] = (rec, sig, self.ints[first - self.base:], [x - first for x in self.lo[n_lo:]],
                                      [x - first for x in self.hi[n_lo:]], self.size[n_lo:],
                                      [x - first for x in self.free[n_free:]], self.unchecked and not unchecked)
        self.plan.append((sig, first, tensor))
        self.sigs.append(sig)

    def add_block(self, blk: _Block, tensor: bool) -> None:
        """All records of a nested loop's extrapolated block (its instructions or its tensors) at once."""
        self.flush()
        first = self.base
        rows = np.arange(blk.count, dtype=np.int64)
        if tensor:
            width, ints, plan, sigs = blk.width_tens, blk.tens_ints, blk.tens_plan, blk.tens_sigs
        else:
            width, ints, plan, sigs = blk.width_ins, blk.ins_ints, blk.ins_plan, blk.ins_sigs
            offs = first + rows * width
            for name in ("lo", "hi", "free"):
                rel = getattr(blk, name)
                if rel.size:
                    self.block_slots[name].append((offs[:, None] + rel[None, :]).ravel())
            if blk.size.size:
                self.block_slots["size"].append(np.tile(blk.size, blk.count))
            self.unchecked = self.unchecked or blk.unchecked
        self.chunks.append(ints)
        self.base += ints.size
        self.plan.extend((sig, first + r * width + rel, tensor) for r in range(blk.count) for sig, rel in plan)
        self.sigs.extend(sigs * blk.count)

    def sig(self, x: Any) -> Any:
        t = type(x)
        if t is int:
            self.ints.append(x)
            return _INT
        if t in _PLAIN:
            return x
        if t is float:   # by its bits: 0.0 == -0.0 and nan != nan would mislead the comparison
            return ("f", x.hex(), x)
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
        return ("c", t, x)

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
            self.unchecked = True   # a layout the fast path does not read
            return self.record(x)
        ints = self.ints
        first = self.base + len(ints)
        ndim = len(x.lo)
        shape = self.shapes.get(id(x))
        if shape is not None and len(shape) == ndim == len(x.hi):
            self.lo.extend(range(first + 1, first + 1 + ndim))
            self.hi.extend(range(first + 1 + ndim, first + 1 + 2 * ndim))
            self.size.extend(shape)
        else:
            self.free.extend(range(first + 1, first + 1 + ndim + len(x.hi)))
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
    """The records between two marks: (signature, integers, the flattening with its plan and regions)."""
    flat = _Flat(rt)
    blocks = flat.blocks
    ins = rt.trace.instructions
    k, end = a[0], b[0]
    while k < end:
        rec = ins[k]
        blk = blocks.get(id(rec))
        if blk is not None and blk.first_ins is rec and k + blk.count * len(blk.ins_plan) <= end:
            flat.add_block(blk, False)
            k += blk.count * len(blk.ins_plan)
        else:
            flat.add(rec, False)
            k += 1
    tensors = rt.trace.tensors
    tid, end = a[1], b[1]
    while tid < end:
        info = tensors.get(tid)
        blk = blocks.get(id(info)) if info is not None else None
        if blk is not None and blk.first_tensor is info and tid + blk.count * len(blk.tens_plan) <= end:
            flat.add_block(blk, True)
            tid += blk.count * len(blk.tens_plan)
            continue
        if info is not None:
            flat.add(info, True)
        tid += 1
    return tuple(flat.sigs), flat.array(), flat


class _Codegen:
    """Python source of a function ``build(v, o, C)`` that rebuilds one record from integers ``v[o:]``."""

    def __init__(self) -> None:
        self.k = 0
        self.consts: list[Any] = []

    def slot(self, wrap: type | None = None) -> str:
        self.k += 1
        text = f"v[o+{self.k - 1}]" if self.k > 1 else "v[o]"
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
            return self.const(sig[2])
        if kind == "f":
            return self.const(sig[2])
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
            return f"R({tensor},{self.const(buffer)},{lo},{hi},{self.slot()},{self.slot()},{self.slot()})"
        if kind == "N":
            cls, parts = sig[1], sig[2]
            names = _FIELDS[cls]
            args, id_slot = [], ""
            for name, part in zip(names, parts):   # positional: the dataclasses' field order
                if part == ("auto",):
                    args.append(f"{self.const(parts[names.index('kind')])}+str({id_slot})")
                    continue
                text = self.expr(part)
                if cls is TensorInfo and name == "id":
                    id_slot = text
                args.append(text)
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
def _extrapolate(rt: Runtime, frame: LoopFrame, values: range, pos: int, probe: Probe, marks: list[tuple],
                 events: list[list[tuple]], keys: list[list[int]]) -> int | None:
    """Append the records of as many iterations from ``pos`` as provably repeat the last probes' step.

    ``marks`` are the runtime at the boundaries of the last :data:`PROBES` iterations, ``events`` their
    mask comparisons. Returns how many iterations were appended, or None (``probe.mismatch`` or
    ``probe.reason`` says why).
    """
    probe.mismatch = None
    if any(m[4] != marks[0][4] for m in marks):
        probe.mismatch = "runtime state other than the trace changed in the loop body"
        return None
    counters = np.array([m[:4] for m in marks], dtype=np.int64)
    steps = np.diff(counters, axis=0)
    if (steps != steps[0]).any():
        probe.mismatch = "iterations differ in their instruction, tensor, loop or epoch counts"
        return None
    flats = [_flatten(rt, marks[j], marks[j + 1]) for j in range(PROBES)]
    sig, last, flat = flats[-1]
    try:
        same = all(f[0] == sig for f in flats[:-1])
    except Exception:  # noqa: BLE001 - a constant whose == is not a truth value (an array): not provably equal
        same = False
    if not same:
        probe.mismatch = "iterations differ in structure"
        return None
    deltas = np.diff(np.stack([f[1] for f in flats]), axis=0)
    if (deltas != deltas[0]).any():
        probe.mismatch = "a number in the records does not change by a constant step"
        return None
    delta = deltas[0]
    count, comparisons = _mask_limit(probe, events, len(values) - pos)
    if count is None:
        return None
    count, bounds = _key_limit(probe, keys, count)
    if count is None:
        return None
    count = _bounds_limit(flat, last, delta, count)
    if count is None:
        probe.fail("a region of the records cannot be checked against its tensor")
        return None
    if count <= 0:
        return 0
    _emit(rt, frame, values, pos, last, delta, count, steps[0], flat)
    # an enclosing probing loop must also see this loop's last mask outcomes and index bounds: the far corner
    # of its range (each is linear in both loops' variables, so the corners decide the whole rectangle)
    for p in rt.probes:
        p.events[-1].extend((op, lhs + count * dl, rhs + count * dr, res) for op, lhs, dl, rhs, dr, res in comparisons)
        p.keys[-1] += bounds(count)
    return count


def _mask_limit(probe: Probe, ev: list[list[tuple]], count: int) -> tuple[int | None, list[tuple]]:
    """How many of ``count`` further iterations see every mask comparison come out as in the probes,
    and each comparison as (op, lhs, lhs step, rhs, rhs step, outcome) at the last probe."""
    comparisons: list[tuple] = []
    if any(len(e) != len(ev[0]) for e in ev):
        probe.mismatch = "iterations differ in their mask comparisons"
        return None, comparisons
    for k in range(len(ev[0])):
        ops = {e[k][0] for e in ev}
        if len(ops) != 1:
            probe.mismatch = "iterations differ in their mask comparisons"
            return None, comparisons
        op = ev[0][k][0]
        lhs = [np.asarray(e[k][1]) for e in ev]
        rhs = [np.asarray(e[k][2]) for e in ev]
        res = [e[k][3] for e in ev]
        try:
            dl = [lhs[j + 1] - lhs[j] for j in range(PROBES - 1)]
            dr = [rhs[j + 1] - rhs[j] for j in range(PROBES - 1)]
        except ValueError:
            probe.mismatch = "iterations differ in their mask comparisons"
            return None, comparisons
        if any(r.shape != res[0].shape or not np.array_equal(r, res[0]) for r in res) or \
                any(d.shape != dl[0].shape or not np.array_equal(d, dl[0]) for d in dl) or \
                any(d.shape != dr[0].shape or not np.array_equal(d, dr[0]) for d in dr):
            probe.mismatch = "a mask comparison changes between probe iterations"
            return None, comparisons
        comparisons.append((op, lhs[-1], dl[0], rhs[-1], dr[0], res[0]))
        count = min(count, _comparison_limit(op, lhs[-1], dl[0], rhs[-1], dr[0], res[0], count))
    return count, comparisons


def _key_limit(probe: Probe, keys: list[list[int]], count: int) -> tuple[int | None, Any]:
    """How many of ``count`` further iterations keep every int and slice index in bounds, and the bounds
    (as a flat list) at a given step past the last probe."""
    arrs = [np.array(k, dtype=np.int64).reshape(-1, 3) for k in keys]
    if any(a.shape != arrs[0].shape or (a[:, 2] != arrs[0][:, 2]).any() for a in arrs):
        probe.mismatch = "iterations differ in the tensors they index"
        return None, None
    steps = np.diff(np.stack(arrs), axis=0)
    if (steps != steps[0]).any():
        probe.mismatch = "an index does not change by a constant step"
        return None, None
    last, step = arrs[-1], steps[0]
    lo, hi, size = last[:, 0], last[:, 1], last[:, 2]
    d_lo, d_hi = step[:, 0], step[:, 1]
    for value, d in ((lo, d_lo), (size - hi, -d_hi), (hi - lo, d_hi - d_lo)):   # each must stay >= 0
        down = d < 0
        if down.any():
            count = min(count, int((value[down] // -d[down]).min()))
    return count, lambda t: (last + t * step).ravel().tolist()


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


def _bounds_limit(flat: _Flat, last: np.ndarray, delta: np.ndarray, count: int) -> int | None:
    """Largest t <= count whose extrapolated regions all stay inside their view shapes; None if unknown."""
    if flat.unchecked:
        return None
    free = flat.slots("free")
    if free.size and delta[free].any():
        return None  # a moving region of unknown shape
    lo, hi, size = flat.slots("lo"), flat.slots("hi"), flat.slots("size")
    for slots, low_side in ((lo, True), (hi, False)):
        # a region bound must stay within [0, size]; lo and hi are both bounds of the same box
        base, step = last[slots], delta[slots]
        down, up = step < 0, step > 0
        if down.any():
            count = min(count, int((base[down] // -step[down]).min()))
        if up.any():
            count = min(count, int(((size[up] - base[up]) // step[up]).min()))
    return count


def _emit(rt: Runtime, frame: LoopFrame, values: range, pos: int, last: np.ndarray, delta: np.ndarray,
          count: int, step: np.ndarray, flat: _Flat) -> None:
    """Append ``count`` extrapolated iterations and advance the runtime's counters past them."""
    plan = [(*_builder(rec_sig), first, tensor) for rec_sig, first, tensor in flat.plan]
    rows = last[None, :] + np.arange(1, count + 1, dtype=np.int64)[:, None] * delta[None, :]
    trace = rt.trace
    ins, tens = trace.instructions, trace.tensors
    first_ins, first_tensor = len(ins), rt._next_tensor
    append = ins.append
    for v in rows.tolist():
        for build, consts, o, tensor in plan:
            rec = build(v, o, consts)
            if tensor:
                tens[rec.id] = rec
            else:
                append(rec)
    trace.replayed += len(ins) - first_ins
    if rt.probes:  # an enclosing loop is probing: it reads these records back as one block
        _keep_block(rt, flat, rows, count, ins[first_ins] if len(ins) > first_ins else None,
                    tens.get(first_tensor), int(step[1]))
    _, n_tensor, n_uid, n_epoch = (int(x) * count for x in step)
    rt._next_tensor += n_tensor
    rt._next_uid += n_uid
    rt.epoch += n_epoch
    frame.iteration = values[pos + count - 1]
    if frame.kind == "affine":
        frame.iter_epoch = rt.epoch - int(step[3]) + 1


def _keep_block(rt: Runtime, flat: _Flat, rows: np.ndarray, count: int, first_ins: Any, first_tensor: Any,
                tensor_ids: int) -> None:
    """Register the records just built as one block, keyed by their first instruction and first tensor."""
    blk = _Block()
    ins_plan = [(sig, first) for sig, first, tensor in flat.plan if not tensor]
    tens_plan = [(sig, first) for sig, first, tensor in flat.plan if tensor]
    width = rows.shape[1]
    split = tens_plan[0][1] if tens_plan else width
    if tens_plan and len(tens_plan) != tensor_ids:
        tens_plan, first_tensor = [], None  # ids without a record: read back record by record
    blk.first_ins, blk.first_tensor, blk.count = first_ins, first_tensor, count
    blk.ins_plan = ins_plan
    blk.tens_plan = [(sig, first - split) for sig, first in tens_plan]
    blk.ins_sigs = tuple(sig for sig, _ in ins_plan)
    blk.tens_sigs = tuple(sig for sig, _ in tens_plan)
    blk.width_ins, blk.width_tens = split, width - split
    blk.ins_ints = np.ascontiguousarray(rows[:, :split]).ravel()
    blk.tens_ints = np.ascontiguousarray(rows[:, split:]).ravel()
    blk.lo, blk.hi, blk.size, blk.free = (flat.slots(n) for n in ("lo", "hi", "size", "free"))
    blk.unchecked = flat.unchecked
    if first_ins is not None and ins_plan:
        rt.replayed_blocks[id(first_ins)] = blk
    if first_tensor is not None and tens_plan:
        rt.replayed_blocks[id(first_tensor)] = blk
