"""Lane replay: a loop's replayed iterations as one NumPy call per recorded call.

Value replay (:mod:`accelopt_nb.sim.replay.values`) re-runs an iteration's recorded calls once per replayed iteration,
about 40 µs of Python per call: most of a paper-shape run of a short-loop kernel (our bmm: 1.3 of 1.5 s). Where it
provably leaves memory the same, the iterations run instead as *lanes*: first the calls that only keep the
runtime's books (loop frames, validity covers, the write log) and the guards, iteration by iteration as before;
then every call that computes on memory once for all lanes, each array argument a view whose leading axis steps
through the iterations (its stride the argument's byte step), each register one array holding every lane's result
side by side, each lane laid out as the iteration's own.

Running call k for every lane before call k+1 reorders the iterations' memory accesses. It is exact where no
access of one iteration meets an access of another that it would be reordered with, one of them a write
(:func:`_independent`): registers are each lane's own; on a tensor's storage, each pair of accesses is checked
over every pair of lanes (a shared step: one access against the other's later lanes; steps that differ: their
whole sweeps), and a write's own lanes must be apart, but for an accumulator that stays put (PSUM over a
contraction loop), which is summed into lane after lane and must meet nothing else.

A program runs as lanes when each computing call's primitive declares a lane form (``core.prims.Lane``, declared
where the primitive is defined): elementwise functions, whose arrays are padded to one rank behind the lane axis
exactly as broadcasting aligns them, matmuls and transposes on their trailing axes, reductions over given axes. The
ints they take must not move. Anything else replays iteration by iteration. Inside a loop that is probing with values
the lane calls are recorded like any others, with a note per written tensor that the enclosing loop may only replay
them where their offsets all move by one step (:func:`values.same_step`): the distances proven apart here stay as
they were.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from accelopt_nb.sim.core.prims import BOOKS, GUARD, PRIMS, REBUILD, Array, call, note, primitive
from accelopt_nb.sim.core.runtime import LoopFrame, Runtime
from accelopt_nb.sim.replay import values as value_replay
from accelopt_nb.sim.replay.values import same_step

# lanes per NumPy call: at most this many bytes in a call's largest array (a paper-shape bmm tile is 256 KiB).
# Measured in one process, two alternations (CPU s, ours bmm / matmul / arange_mask): 1 MiB 0.98-1.06 / 7.49-7.85 /
# 0.16-0.18, 4 MiB 0.99-1.03 / 7.21 / 0.15, 16 MiB 1.02-1.10 / 6.38-7.31 / 0.14: within noise above 1 MiB
LANE_BYTES = 4 << 20
MAX_EXACT = 64        # exact checks of access pairs past which checking would cost more than lanes save
SHARES_WORK = 20000   # bound on np.shares_memory's exact search; past it the accesses count as meeting
_NUMBERS = (value_replay.INTS, value_replay.BOX, value_replay.TUPLE, value_replay.SLICE)   # nodes whose ints stay put


@dataclass
class _Access:
    call: int              # index among the plan's computing calls
    base: Any              # the tensor storage it views
    slot: int              # the number holding its byte offset
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    itemsize: int
    written: bool
    accumulates: bool = False   # the destination of an accumulating call (Lane.accumulates)

    def __post_init__(self) -> None:   # its byte span from its offset, and its size
        self.lo = sum(min(0, (k - 1) * s) for k, s in zip(self.shape, self.strides))
        self.hi = sum(max(0, (k - 1) * s) for k, s in zip(self.shape, self.strides)) + self.itemsize
        self.size = math.prod(self.shape)


@dataclass
class Plan:
    """A program's calls split for lanes: its bookkeeping calls (indices into ``Program.calls``), its computing
    calls (call index, builder, result tag, registers freed after it), the memory they access, the number slots
    that must not move, and the lanes per NumPy call."""

    books: list[int]
    compute: list[tuple[int, Callable, Any, Callable, tuple[int, ...]]]
    accesses: list[_Access]
    fixed: list[int]
    chunk: int

    def __post_init__(self) -> None:   # per written tensor accessed at several offsets: their number slots
        by_base: dict[int, list[_Access]] = {}
        for a in self.accesses:
            by_base.setdefault(id(a.base), []).append(a)
        self.groups = [s for s in (sorted({a.slot for a in g}) for g in by_base.values() if any(a.written for a in g))
                       if len(s) > 1]

    def together(self, row: list[int]) -> list[list[int]]:
        """Per written tensor, its accesses' offsets at ``row`` (see values.same_step)."""
        return [[row[s] for s in slots] for slots in self.groups]


def plan(log: value_replay.Log) -> Plan | str:
    """The lane plan of an iteration's log, or why its calls cannot run as lanes."""
    ns: dict[str, Any] = {"_nd": np.ndarray}
    slot = 0
    book_calls: list[int] = []
    compute: list[tuple] = []
    accesses: list[_Access] = []
    fixed: list[int] = []
    largest = [1]   # bytes of the largest array a call takes or makes
    uses: dict[int, int] = {}   # register -> index in compute of its last use
    index = -1   # in Program.calls (the guards' own calls are not there)
    for sig, consts in zip(log.sigs, log.consts):
        fn, names = sig[0], sig[1]
        nodes = sig[2:-1]
        prim = PRIMS[fn]
        if prim.replay == GUARD:
            slot = _skip(nodes, consts, slot)
            continue
        index += 1
        if prim.replay == BOOKS:
            if any(type(n) is tuple and n and n[0] == value_replay.ARRAY for n in nodes):
                return f"a bookkeeping call takes an array ({getattr(fn, '__qualname__', fn)})"
            if type(sig[-1]) is tuple and sig[-1][0] not in ("frame",):
                return "a bookkeeping call returns memory"
            book_calls.append(index)
            slot = _skip(nodes, consts, slot)
            continue
        lane = prim.lane
        name = prim.name
        if lane is None:
            return f"no lane form for {name}"
        tag = sig[-1]
        if type(tag) is tuple and tag[0] != "reg":
            return f"{name} allocates a tensor"
        described = _describe(nodes, consts)
        if described is None:
            return f"{name} takes an argument lanes cannot step"
        k = len(described) - len(names)
        args, params = described[:k], dict(zip(names, described[k:]))
        if lane.accepts is not None and not lane.accepts(args, params):
            return f"{name} with these arguments has no exact lane form"
        rank = max([a.rank for a in described if isinstance(a, Array)]
                   + [np.ndim(a) for a in described if isinstance(a, np.ndarray)] + [0])
        writes = prim.writes
        if writes is not None and args[writes] is not None and not isinstance(args[writes], Array):
            return f"{name} writes memory that is not a stepped view"
        it, cit = iter(nodes), iter(consts)
        exprs = []
        position = 0
        while (node := next(it, value_replay._END)) is not value_replay._END:
            first = slot
            expr, slot = _source(node, it, cit, slot, ns, rank, accesses, len(compute), position == writes,
                                 uses, largest, lane.accumulates)
            exprs.append(expr)
            position += 1
            if node == 0 or (type(node) is tuple and node[0] in _NUMBERS):
                fixed.extend(range(first, slot))
        if type(tag) is tuple:
            largest[0] = max(largest[0], math.prod(tag[2]) * np.dtype(tag[4]).itemsize)
        build = value_replay._compiled(f"lambda row, step, regs, n: {value_replay._call_source(exprs, names)}", ns)
        compute.append((index, lane.impl or fn, tag, build, ()))
    if not compute:
        return "no call computes on memory"
    frees: dict[int, list[int]] = {}
    for reg, last in uses.items():
        frees.setdefault(last, []).append(reg)
    compute = [c[:4] + (tuple(frees.get(k, ())),) for k, c in enumerate(compute)]
    return Plan(book_calls, compute, accesses, fixed, max(1, LANE_BYTES // largest[0]))


def plan_of(program: value_replay.Program) -> Plan | str:
    """The program's lane plan (:func:`plan`), made once per launch (kept with its compiled calls)."""
    if program._compiled[3] is None:
        program._compiled[3] = plan(program._log)
    return program._compiled[3]


def _skip(nodes: tuple, consts: list, slot: int) -> int:
    """The next number slot after a call's arguments (walked as ``values._source`` reads them)."""
    it, cit, scratch = iter(nodes), iter(consts), {}
    while (node := next(it, value_replay._END)) is not value_replay._END:
        _, slot = value_replay._source(node, it, cit, slot, scratch)
    return slot


def _describe(nodes: tuple, consts: list) -> list | None:
    """Per argument (positional, then the parameters): an Array (a stepped view), its value (a constant), or 0
    (ints); None for an argument lanes do not take (a container, a loop frame, a tensor allocated in the
    iteration)."""
    out: list[Any] = []
    cit = iter(consts)
    for node in nodes:
        if node == 0 or node[0] in (value_replay.INTS, value_replay.BOX):
            out.append(0)
        elif node[0] == value_replay.ARRAY:
            if node[1] == value_replay.IN_STORAGE:
                next(cit)
            out.append(Array(len(node[4])))
        elif node[0] == value_replay.VALUE:
            out.append(node[2])
        elif node[0] in (value_replay.CONST, value_replay.OBJECT):
            out.append(next(cit))
        else:
            return None
    return out


def _source(node: Any, it: Any, cit: Any, slot: int, ns: dict[str, Any], rank: int, accesses: list[_Access],
            call: int, written: bool, uses: dict[int, int], largest: list[int], accumulates: bool) -> tuple[str, int]:
    """Python source building one argument over lanes, and the next slot: an array as a view with a lane axis, any
    other argument as ``values._source`` rebuilds it for one iteration (ints do not move, constants broadcast)."""
    if type(node) is not tuple or node[0] != value_replay.ARRAY:
        return value_replay._source(node, it, cit, slot, ns)

    def const(value: Any) -> str:
        name = f"c{len(ns)}"
        ns[name] = value
        return name

    _, where, *ident = node[:-3]
    shape, strides, dtype = node[-3:]
    pad = rank - len(shape)
    lane_shape, lane_strides = (1,) * pad + tuple(shape), (0,) * pad + tuple(strides)
    dtype = np.dtype(dtype)
    largest[0] = max(largest[0], math.prod(shape) * dtype.itemsize)
    if where == value_replay.IN_STORAGE:
        base = next(cit)
        accesses.append(_Access(call, base, slot, tuple(shape), tuple(strides), dtype.itemsize, written,
                                written and accumulates))
        return (f"_nd((n,) + {lane_shape!r}, {const(dtype)}, buffer={const(base)}, offset=row[{slot}], "
                f"strides=(step[{slot}],) + {lane_strides!r})"), slot + 1
    reg = ident[0]
    uses[reg] = call
    # lane k's view starts k lanes' bytes further, plus k steps of its offset within the iteration's own array
    return (f"_nd((n,) + {lane_shape!r}, {const(dtype)}, buffer=regs[{reg}][0], offset=row[{slot}], "
            f"strides=(regs[{reg}][1] + step[{slot}],) + {lane_strides!r})"), slot + 1


# ---- the check ----------------------------------------------------------------------------------------
def _fits(p: Plan, first: np.ndarray, step: np.ndarray, n: int) -> bool:
    """Whether lanes are exact for iterations first, first + step, ... (``n`` of them)."""
    if p.fixed and step[p.fixed].any():
        return False
    return _independent(p.accesses, first, step, n)


def _independent(accesses: list[_Access], first: np.ndarray, step: np.ndarray, n: int) -> bool:
    """Whether no access of one lane meets one of another lane that lanes reorder it with, one of them a write.

    Lanes run call by call, so the pairs reordered are (call x at lane i, call y at lane j) with i < j and x at or
    after y in the iteration. Per tensor, each write against each access, by their byte spans first (the lane
    distances at which two spans moving by one step overlap form a range), then, for the pairs whose spans can
    overlap, exactly (:func:`_meet`). Steps must be non-negative (views are built from the first lane up). An
    accumulator that stays put (``Lane.accumulates``, step 0) is summed into lane after lane in the iterations'
    order, so it only must meet no other access at any lane."""
    by_base: dict[int, list[_Access]] = {}
    for a in accesses:
        if step[a.slot] < 0:
            return False
        if a.size:
            by_base.setdefault(id(a.base), []).append(a)
    exact = 0
    for group in by_base.values():
        staying = [a for a in group if a.accumulates and step[a.slot] == 0]
        if staying:
            # an accumulator that stays put is summed into lane after lane (_add_into): exact while no other
            # access meets it at any lane
            for acc in staying:
                lo_acc, hi_acc = first[acc.slot] + acc.lo, first[acc.slot] + acc.hi
                for b in group:
                    reach = (n - 1) * int(step[b.slot])
                    if b is not acc and first[b.slot] + b.lo + min(0, reach) < hi_acc and \
                            lo_acc < first[b.slot] + b.hi + max(0, reach):
                        return False
            group = [a for a in group if not any(a is acc for acc in staying)]
        writes = [a for a in group if a.written]
        if not writes:
            continue
        lo = np.array([first[a.slot] + a.lo for a in group], dtype=np.int64)
        hi = np.array([first[a.slot] + a.hi for a in group], dtype=np.int64)
        d = np.array([step[a.slot] for a in group], dtype=np.int64)
        w = np.array([k for k, a in enumerate(group) if a.written])
        # per (write, access): lane distances k (access at lane i, write at lane i + k) where their spans overlap
        lw, hw, dw = lo[w][:, None], hi[w][:, None], d[w][:, None]
        same = dw == d[None, :]
        step_ = np.where(same & (dw > 0), dw, 1)
        k_lo = np.floor_divide(lo[None, :] - hw, step_) + 1
        k_hi = -np.floor_divide(lw - hi[None, :], step_) - 1
        moving = same & (dw > 0)
        near = moving & (((k_lo <= -1) & (k_hi >= -(n - 1))) | ((k_lo <= n - 1) & (k_hi >= 1)))
        overlap = (lw < hi[None, :]) & (lo[None, :] < hw)
        still = same & (dw == 0) & overlap   # neither moves: they meet at every pair of lanes
        sweep = ~same & (lw + np.minimum(0, (n - 1) * dw) < hi[None, :] + np.maximum(0, (n - 1) * d[None, :])) & (
            lo[None, :] + np.minimum(0, (n - 1) * d[None, :]) < hw + np.maximum(0, (n - 1) * dw))
        if still.any():
            return False
        for i, j in zip(*np.nonzero(near | sweep)):
            x, y = group[w[i]], group[j]
            exact += 1
            if exact > MAX_EXACT:
                return False
            if (x.call >= y.call and _meet(x, y, first, step, n)) or (y.call >= x.call and _meet(y, x, first, step, n)):
                return False
    return True


def _meet(x: _Access, y: _Access, first: np.ndarray, step: np.ndarray, n: int) -> bool:
    """Whether x at some lane i meets y at a lane j > i (steps that differ: at any two lanes)."""
    if n < 2:
        return False
    dx, dy = int(step[x.slot]), int(step[y.slot])
    if dx == dy:   # meeting is invariant under moving both: x at the first lane against y's later ones
        xs, ys = _lanes(x, int(first[x.slot]), dx, 1), _lanes(y, int(first[y.slot]) + dy, dy, n - 1)
    else:
        xs, ys = _lanes(x, int(first[x.slot]), dx, n), _lanes(y, int(first[y.slot]), dy, n)
    try:
        return bool(np.shares_memory(xs, ys, max_work=SHARES_WORK))
    except Exception:  # noqa: BLE001 - TooHardError: not decided within the bound, so not proven apart
        return True


def _lanes(a: _Access, offset: int, step: int, n: int) -> np.ndarray:
    return np.ndarray((n,) + a.shape, np.uint8 if a.itemsize == 1 else np.dtype(f"V{a.itemsize}"), buffer=a.base,
                      offset=offset, strides=(step,) + a.strides)


# ---- the run ------------------------------------------------------------------------------------------
def replay(rt: Runtime, frame: LoopFrame, values: range, pos: int, program: value_replay.Program,
           count: int) -> int | None:
    """``values.replay`` as lanes: the number of iterations run, or None (nothing done) where lanes are not exact.

    Inside a loop that is probing with values, every call is recorded as ``values.replay`` records them (the lane
    calls with their lane views), and so is, per written tensor, :func:`values.same_step` of its accesses'
    offsets: the enclosing loop replays them only where they all move by one step, which keeps the distances
    proven apart here."""
    if count < 2:
        return None
    p = plan_of(program)
    first = program.last + program.delta
    if isinstance(p, str) or not _fits(p, first, program.delta, count):
        return None
    # the bookkeeping and the guards, iteration by iteration (recorded as values.replay records them)
    done = value_replay.replay(rt, frame, values, pos, program, count, only=p.books)
    probes = rt.observer.probes
    recorded = bool(probes)
    run = call if recorded else _direct
    logs = [q.logs[-1] for q in probes if q.logs]
    step = program.delta.tolist()
    with np.errstate(all="ignore"):   # as values.replay: NumPy's warnings are no kernel's
        for begin in range(0, done, p.chunk):
            n = min(p.chunk, done - begin)
            row = (first + begin * program.delta).tolist()
            regs: list[Any] = [None] * program.registers
            for log in logs:
                log.replayed += len(p.compute)
            for _, fn, tag, build, frees in p.compute:
                args, params = build(row, step, regs, n)
                result = run(fn, *args, **params)
                if tag is not None:
                    regs[tag[1]] = _register(result, n, tag, run)
                del result
                for k in frees:
                    regs[k] = None
            if recorded:
                for offsets in p.together(row):
                    note(same_step, *offsets)
    return done


def _direct(fn: Callable[..., Any], /, *args: Any, **params: Any) -> Any:
    return fn(*args, **params)


def _register(result: Any, n: int, tag: tuple, run: Callable[..., Any]) -> tuple[np.ndarray, int]:
    """A computing call's new memory over ``n`` lanes as (buffer, bytes per lane), each lane laid out as the
    iteration's own result was (``tag``: its shape, strides and dtype), so recorded offsets and strides hold."""
    shape, strides, dtype = tuple(tag[2]), tuple(tag[3]), np.dtype(tag[4])
    result = np.asarray(result)
    size = math.prod(shape) * dtype.itemsize
    if result.shape == shape:   # computed from constants only: the same in every lane
        result = np.broadcast_to(result, (n,) + shape)
    if result.shape != (n,) + shape or result.dtype != dtype:
        raise RuntimeError(f"lane replay: a result of shape {result.shape} {result.dtype}, expected {(n,) + shape} {dtype}")
    if result.flags.c_contiguous and result.strides[1:] == strides and (n == 1 or result.strides[0] == size):
        return result, size
    return run(_laid_out, result, n=n, shape=shape, strides=strides, dtype=dtype), size


@primitive(replay=REBUILD)
def _laid_out(result: np.ndarray, *, n: int, shape: tuple[int, ...], strides: tuple[int, ...],
              dtype: np.dtype) -> np.ndarray:
    """``result``'s lanes copied into a new buffer, each lane ``shape`` with ``strides`` (a recorded call, so an
    enclosing probing loop sees the buffer as a register)."""
    size = math.prod(shape) * dtype.itemsize
    buffer = np.empty(n * size, np.uint8)
    np.ndarray((n,) + shape, dtype, buffer=buffer, strides=(size,) + strides)[...] = result
    return buffer
