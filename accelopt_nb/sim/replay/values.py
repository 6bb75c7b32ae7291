"""Loop replay with values: a probe iteration's effects on simulator memory, re-run at a later iteration's offsets.

Trace replay (:mod:`accelopt_nb.sim.replay.loops`) skips the Python body of a loop's later iterations and
extrapolates their trace records. With values, the skipped iterations must still change memory as
running them would. While a loop probes, every change the simulator makes to memory, validity, the
loop-carried write log and the loop frames is a primitive call (``core.prims.call``, or ``note``), which
:func:`record` records: its function, and its arguments (positional arrays, keyword parameters) with every integer
and every array's byte offset as a number. Arrays are recorded as views of a *root*: a tensor's storage (``Runtime.roots``), a *register*
(an array or a tensor an earlier call of the same iteration returned: a tensor allocated in the body is the
recorded call ``tensor.allocated``), or other memory by identity (a tile computed before the loop); bool
arrays (masks) and read-only arrays are constants, by value. The probes' calls
must agree in everything but those numbers, and the numbers must move by a constant step; a later
iteration is then the same calls on views at extrapolated offsets: no index expressions, masks, keys or
checks rebuilt. Registers are dropped after their last use, so temporaries are freed as running the body
frees them.

Anything else is refused for the loop, so values are exact or the loop runs every iteration: a call of a function
that declares no replay rule (``core.prims.primitive``), a change of memory or validity outside these calls
(``core.prims.fail``: a gather or scatter, per-element validity, a first write into a kernel input), a temporary
computed outside a primitive call (a new object each iteration: the probes disagree). Validity decided by a check
(``Cover.covers``, ``Cover.local``) is recorded as a guard; before each replayed iteration its guards are
evaluated against the cover as it will be at their point, and replay stops before an iteration whose
guard would come out differently. A loop-carried write found in a replayed iteration raises with the
line of the instruction, as running it would. Where no replayed write can meet another write (each call's
box moves rigidly past its extent, the ranges the calls sweep are disjoint, and none meets a write logged
before the replay), those checks are decided once per replay and each write is only logged.
"""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from accelopt_nb.sim.core.boxes import Cover, _contains, _meets, paint
from accelopt_nb.sim.core.context import active
from accelopt_nb.sim.core.memory import cover_add, guard_covered, guard_local
from accelopt_nb.sim.core.prims import BOOKS, GUARD, PRIMS, call, primitive
from accelopt_nb.sim.core.runtime import LoopFrame, Runtime
from accelopt_nb.sim.core.runtime import loop_iteration

if TYPE_CHECKING:
    from accelopt_nb.sim.replay.state import ReplayState

_PLAIN = (str, bool, float, type(None), np.floating, np.bool_, np.dtype)

# The nodes of a recorded call's signature (its function, its parameters' names, a node per argument, nested for
# tuples and slices, and its result's register tag); every number is a slot of the iteration's numbers. Named apart
# from the trace records' nodes (replay.records), which flatten other things.
INT = 0                            # an int
INTS, BOX = "ints", "box"          # a tuple of ints; of (first, last + 1, step) triples: flat numbers
TUPLE, SLICE = "tuple", "slice"    # a container: its items' nodes follow
ARRAY = "array"                    # a view: (ARRAY, IN_REGISTER, register, 0 | IN_STORAGE, id, generation, shape,
IN_REGISTER, IN_STORAGE = "in register", "in storage"   # strides, dtype); its byte offset is a number
CONST = "const"                    # an array that does not change (a mask, read-only memory): by value
VALUE = "value"                    # a plain value (str, float, bool, None, dtype): by value
OWN = "own"                        # a loop frame or a tensor an earlier call of the iteration made
OBJECT = "object"                  # any other object: by identity
# past this many calls in one iteration, most of them repeated by nested loops' replays, the iteration is not
# recorded: its nested loops already replay, and recording and compiling it cost more than replaying it saved
# (measured: the paper's matmul, 10.5 -> 15.5 s had its 12-iteration outer loop been replayed). Calls the
# iteration ran in Python are recorded up to MAX_CALLS_PYTHON: replaying them saves far more than recording
# costs (the paper's bmm, whose inner loops are too short to replay: 2.0-2.1 -> 1.4-1.5 s)
MAX_CALLS = 2048
MAX_CALLS_PYTHON = 8192    # beyond it (the paper's lora: 17k+) what a failing probe records is mostly waste
PROGRAMS_KEPT = 512        # compiled programs a launch keeps for the next instances of its loops (Program)


class Log:
    """One probe iteration's calls: per call a signature (everything but the numbers) and its numbers."""

    __slots__ = ("sigs", "ints", "consts", "regs", "count", "keep", "broken", "replayed", "together")

    def release(self) -> None:
        """Drop what only rebuilding this iteration's calls needs (a later probe's log replaces it)."""
        self.consts = []

    def __init__(self) -> None:
        self.sigs: list[tuple] = []
        self.ints: list[int] = []
        self.consts: list[list[Any]] = []    # per call: its non-numeric arguments, for rebuilding
        self.regs: dict[int, int] = {}       # id(root array or frame) -> register number, while alive
        self.count = 0                       # registers so far
        self.keep: list[Any] = []            # named by identity without a weak reference: kept alive
        self.broken: str | None = None       # why a call of this iteration cannot be recorded
        self.replayed = 0                    # calls a nested loop's replay made (not run in Python)
        self.together: list[tuple[int, int]] = []   # spans of ints that must move by one step (same_step)


class Unsupported(Exception):
    """A call's argument that replay cannot re-derive at another iteration."""


def record(st: ReplayState, fn: Callable[..., Any], args: tuple, params: dict[str, Any], result: Any) -> None:
    """Record the primitive call ``fn(*args, **params)`` (which returned ``result``) in the probing loops' logs."""
    prim = PRIMS.get(fn)
    for p in st.probes:
        log = p.logs[-1] if p.logs else None
        if log is None or log.broken is not None or p.reason is not None:
            continue
        if prim is None or prim.replay is None:
            p.fail(f"values: {getattr(fn, '__qualname__', fn)} declares no replay rule (core.prims.primitive)")
            continue
        calls = len(log.sigs)
        if calls >= MAX_CALLS and (2 * log.replayed >= calls or calls >= MAX_CALLS_PYTHON):
            # structural: stop probing this loop at once
            why = "" if calls >= MAX_CALLS_PYTHON else ", most of them nested loops' replays"
            p.fail(f"values: more than {calls} calls in one iteration{why} (recording would cost more than it saves)")
            continue
        names = tuple(params)
        sig: list[Any] = [fn, names]
        consts: list[Any] = []
        start = len(log.ints)
        try:
            for a in args:
                _flatten(st, log, a, sig, consts)
            for a in params.values():
                _flatten(st, log, a, sig, consts)
        except Unsupported as exc:
            # this iteration cannot be repeated; later ones may (a tile computed before the loop and first
            # read in its first iteration): the probes compared must all be whole. Past the first probe
            # iteration, the loop stops probing (what it would record costs without paying back)
            reason = f"values: {exc} (in {getattr(fn, '__qualname__', fn)})"
            if len(p.logs) > 1:
                p.fail(reason)
            else:
                log.broken = reason
            continue
        reg = _register(st, log, result)
        sig.append(reg)
        log.sigs.append(tuple(sig))
        log.consts.append(consts)
        if fn is same_step:
            log.together.append((start, len(log.ints)))


def _register(st: ReplayState, log: Log, result: Any) -> Any:
    """A result that is new memory, a loop frame or a tensor allocated in the iteration (with its storage)
    becomes the next register(s); returns its tag."""
    if isinstance(result, np.ndarray):
        base = root(result)
        if id(base) in log.regs or id(base) in st.roots:
            return None
        log.regs[id(base)] = n = log.count
        log.count += 1
        # not kept alive (dead temporaries are freed, as running the body frees them): forgotten when freed,
        # so a new array at the same address is not taken for it
        weakref.finalize(base, log.regs.pop, id(base), None)
        return ("reg", n, base.shape, base.strides, base.dtype)   # its layout: see lanes._register
    if isinstance(result, LoopFrame):
        log.regs[id(result)] = n = log.count
        log.count += 1
        log.keep.append(result)
        return ("frame", n)
    if getattr(result, "_setup", None) is not None:   # a tensor allocated in the iteration: it and its storage
        base = root(result._array)
        log.regs[id(result)] = n = log.count
        log.regs[id(base)] = n + 1
        log.count += 2
        weakref.finalize(result, log.regs.pop, id(result), None)
        weakref.finalize(base, log.regs.pop, id(base), None)
        return ("tensor", n)
    return None


def root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _box_ints(a: tuple) -> list[int] | tuple | None:
    """The ints of a tuple of ints (the tuple itself) or of (int, int, int) tuples (a list); None otherwise."""
    if not a:
        return None
    if type(a[0]) is int:
        for x in a:
            if type(x) is not int:
                return None
        return a
    out: list[int] = []
    for b in a:
        if type(b) is not tuple or len(b) != 3:
            return None
        x, y, z = b
        if type(x) is not int or type(y) is not int or type(z) is not int:
            return None
        out += b
    return out


def _flatten(st: ReplayState, log: Log, a: Any, sig: list, consts: list) -> None:
    t = type(a)
    if t is int or (isinstance(a, np.integer) and t is not np.bool_):
        sig.append(INT)
        log.ints.append(int(a))
    elif t is tuple:
        ints = _box_ints(a)
        if ints is not None:   # a box (per axis first, last + 1, step) or a shape: the common tuples, flat
            sig.append((BOX if ints is not a else INTS, len(a)))
            log.ints += ints
            return
        sig.append((TUPLE, len(a)))
        for x in a:
            _flatten(st, log, x, sig, consts)
    elif t is slice:
        sig.append((SLICE,))
        for x in (a.start, a.stop, a.step):
            _flatten(st, log, x, sig, consts)
    elif t is np.ndarray:
        base = root(a)
        reg = log.regs.get(id(base))
        if reg is not None:
            where = (IN_REGISTER, reg, 0)
        elif id(base) in st.roots:
            where = (IN_STORAGE,) + _identity(st, log, base)
            consts.append(base)
        elif not base.flags.writeable or a.dtype == np.bool_:
            # a constant: a kept array, or a mask (bool arrays reaching these calls are masks and what
            # combines them; replay checks that the mask comparisons come out the same): by value
            sig.append((CONST, a.shape, a.dtype, a.tobytes()))
            consts.append(a)
            return
        else:
            # memory from before the iteration (a tile computed before the loop): by identity, so the
            # probes agree only if every iteration reads that same memory
            where = (IN_STORAGE,) + _identity(st, log, base)
            consts.append(base)
        if not base.flags.c_contiguous:
            raise Unsupported("an array whose storage is not contiguous")
        # the dtype itself: an ml_dtypes type's .str is a bare '<V2' (bfloat16) or '<V1' (fp8), which rebuilds as void
        sig.append((ARRAY,) + where + (a.shape, a.strides, a.dtype))
        log.ints.append(_address(a) - _address(base))
    elif isinstance(a, _PLAIN):
        sig.append((VALUE, t, a))
    elif t is LoopFrame:
        reg = log.regs.get(id(a))
        if reg is None:
            raise Unsupported("a loop frame from outside the iteration")
        sig.append((OWN, reg))
    else:
        reg = log.regs.get(id(a))
        if reg is not None:   # a tensor allocated earlier in the iteration
            sig.append((OWN, reg))
            return
        sig.append((OBJECT,) + _identity(st, log, a))
        consts.append(a)


def _identity(st: ReplayState, log: Log, obj: Any) -> tuple[int, int]:
    """``obj`` by identity: its id and how many objects had that id before it in this run, so an object
    freed and another allocated at its address never look the same (objects that take no weak reference
    are kept alive instead)."""
    key = id(obj)
    live = st.identities
    if live.get(key) is not obj:
        try:
            live[key] = obj
        except TypeError:   # no weak reference (a ufunc): kept alive while probing, so its id stays its own
            log.keep.append(obj)
            return key, -1
        st.generations[key] = st.generations.get(key, -1) + 1
    return key, st.generations[key]


# ---- the check and the replay ------------------------------------------------------------------------
class Program:
    """The calls of one loop iteration, each compiled into a function that rebuilds its arguments from an
    iteration's numbers (``row``) and registers."""

    def __init__(self, log: Log, last: np.ndarray, delta: np.ndarray) -> None:
        self.last, self.delta = last, delta
        # every instance of a loop records the same calls (only the numbers move): compiled once per launch
        rt = active()
        st = None if rt is None else rt.observer
        key: tuple | None = tuple(log.sigs)
        compiled = None
        if st is not None:
            try:
                compiled = st.programs.get(key)
            except TypeError:   # a constant that is not hashable
                key = None
        if compiled is None:
            compiled = self._compile(log)
            if st is not None and key is not None:
                if len(st.programs) >= PROGRAMS_KEPT:
                    st.programs.clear()
                st.programs[key] = compiled
        self.calls, self.checks, guards = compiled[:3]
        self.guards = _needed_guards(guards, last, delta)
        self._compiled, self._log = compiled, log
        self.registers = log.count

    @staticmethod
    def _compile(log: Log) -> list:
        """The calls, checks and guards of an iteration's log (the guards before :func:`_needed_guards`), and a
        place for its lane plan (``lanes.plan_of``: made once per launch, on first use).

        Calls: (fn, builder of its (arguments, parameters), register tag, registers freed after it), but for the
        guards' own calls, which do nothing (the guards are evaluated before each iteration instead). Guards: (fn,
        tensor key, tensor, box builder, local, box slots). Checks: the calls of a primitive with a ``provable``
        rule, as (index, fn, tensor, box slots)."""
        calls: list[tuple[Callable, Callable, Any, tuple[int, ...]]] = []
        guards: list[tuple] = []
        checks: list[tuple] = []
        ns: dict[str, Any] = {"_nd": np.ndarray}
        slot = 0
        last_use: dict[int, int] = {}
        for i, sig in enumerate(log.sigs):
            for node in sig[2:-1]:
                if type(node) is tuple and node and ((node[0] == ARRAY and node[1] == IN_REGISTER) or node[0] == OWN):
                    last_use[node[2] if node[0] == ARRAY else node[1]] = i
        frees: dict[int, list[int]] = {}
        for reg, i in last_use.items():
            frees.setdefault(i, []).append(reg)
        pending: list[int] = []   # registers freed after a call that is not replayed
        for i, (sig, consts) in enumerate(zip(log.sigs, log.consts)):
            fn, names = sig[0], sig[1]
            it, cit = iter(sig[2:-1]), iter(consts)
            exprs = []
            tops = []    # per argument: its top node
            spans = []   # per argument: its slots, if a box of ints
            while (node := next(it, _END)) is not _END:
                first = slot
                expr, slot = _source(node, it, cit, slot, ns)
                exprs.append(expr)
                tops.append(node)
                spans.append((first, slot) if type(node) is tuple and node[0] == BOX else None)
            if PRIMS[fn].replay == GUARD:
                # checked before each replayed iteration (self.guards), and nothing to run
                pending += frees.get(i, ())
            else:
                if PRIMS[fn].provable is not None and spans[1] is not None and type(tops[0]) is tuple and \
                        tops[0][0] == OBJECT:
                    checks.append((len(calls), fn, consts[0], spans[1]))
                # registers are dropped after their last use, so temporaries are freed when running the body frees them
                calls.append((fn, _compiled(f"lambda row, regs: {_call_source(exprs, names)}", ns), sig[-1],
                              tuple(pending + frees.get(i, []))))
                pending = []
            if fn is cover_add or fn is guard_covered or fn is guard_local:
                # the tensor: a constant, or (None) one allocated in the iteration, whose cover starts empty
                fresh = type(tops[0]) is tuple and tops[0][0] == OWN
                guards.append((fn, ("reg", tops[0][1]) if fresh else id(consts[0]), None if fresh else consts[0],
                               _compiled(f"lambda row: {exprs[1]}", ns),
                               consts[-1] if fn is guard_local else None, spans[1]))
        return [calls, checks, guards, None]   # the last: the lane plan, made on first use (lanes)

    def calls_for(self, count: int) -> list[tuple[Callable, Callable, Any, tuple[int, ...]]]:
        """The calls for iterations 1..``count``, each check of a tensor's writes replaced by its bookkeeping
        where it provably passes in all of them (:func:`_proven`)."""
        proven = _proven(self.checks, self.last, self.delta, count)
        if not proven:
            return self.calls
        return [(PRIMS[c[0]].provable[0],) + c[1:] if i in proven else c for i, c in enumerate(self.calls)]


def _proven(checks: list[tuple], last: np.ndarray, delta: np.ndarray, count: int) -> set[int]:
    """The checks (by call index) that cannot fail in iterations 1..``count``: per tensor, every box its
    checked writes assign in those iterations is disjoint from every other (each call's box moves rigidly,
    by at least its extent along some axis, and the ranges the calls sweep are disjoint), so no element is
    written twice, and no write logged before meets a swept range (the tensor's own test, the ``provable`` rule).
    Anything else keeps its checks: they then decide, as running every iteration does."""
    by_tensor: dict[int, tuple[Callable, Any, list[int], list[tuple | None]]] = {}
    for i, fn, t, span in checks:
        entry = by_tensor.setdefault(id(t), (fn, t, [], []))
        entry[2].append(i)
        entry[3].append(_sweep(_box_at(last, span), _box_at(delta, span), count))
    proven: set[int] = set()
    for fn, t, calls, ranges in by_tensor.values():
        # past 64 calls on one tensor, comparing their ranges pairwise would cost more than the checks
        if len(ranges) > 64 or any(r is None for r in ranges):
            continue
        if any(_meets(a, b) for k, a in enumerate(ranges) for b in ranges[k + 1:]):
            continue
        if PRIMS[fn].provable[1](t, ranges):
            proven.update(calls)
    return proven


def _box_at(numbers: np.ndarray, span: tuple[int, int]) -> tuple:
    """The box (or its step, from a program's ``delta``) a recorded box argument's number slots hold."""
    v = numbers[span[0]:span[1]].tolist()
    return tuple(tuple(v[k:k + 3]) for k in range(0, len(v), 3))


def _sweep(box: tuple, step: tuple, count: int) -> tuple | None:
    """The range (a box with unit steps) ``box``, moving by ``step`` per iteration, covers in iterations
    1..``count``; None unless it moves rigidly and far enough that no two of those iterations share an
    element."""
    out = []
    apart = count <= 1
    for (lo, hi, _), (d, d_hi, d_step) in zip(box, step):
        if d_hi != d or d_step:
            return None
        apart = apart or abs(d) >= hi - lo > 0
        ends = (lo + d, lo + count * d)
        out.append((min(ends), max(ends) + hi - lo, 1))
    return tuple(out) if apart else None


def _needed_guards(guards: list[tuple], last: np.ndarray, delta: np.ndarray) -> list[tuple]:
    """The guards that can come out otherwise, with the cover updates they are checked against.

    Validity only grows while replaying, so these hold at every iteration: a guard whose box the same
    iteration wrote earlier into the same tensor, with boxes that move with it (a compiler-style tile read
    after its write, maybe written in parts); a box found written (or all written) that stays put, in a
    tensor from before the loop (one allocated in the iteration starts empty each time). A cover update
    matters only to a later guard of its tensor whose box it can meet: one moving with it from a disjoint
    box never does.
    """
    added: dict[Any, list[tuple]] = {}
    kept = []   # (guard, its box and step, or None when unknown)
    for fn, key, t, build, local, span in guards:
        where = None
        if span is not None:
            where = box, step = _box_at(last, span), delta[span[0]:span[1]]
            if fn is cover_add:
                added.setdefault(key, []).append((box, step))
            elif (fn is guard_covered or local.all()) and (
                    (t is not None and not step.any()) or _written_by(box, step, added.get(key, ()))):
                continue
        kept.append(((fn, key, t, build, local), where))
    needed = []
    later: dict[Any, list] = {}   # per tensor: the kept guards after this point
    for guard, where in reversed(kept):
        fn, key = guard[0], guard[1]
        if fn is not cover_add:
            later.setdefault(key, []).append(where)
        elif not any(w is None or where is None or not (w[1] == where[1]).all() or _meets(w[0], where[0])
                     for w in later.get(key, ())):
            continue
        needed.append(guard)
    return needed[::-1]


def _written_by(box: tuple, step: np.ndarray, added: list[tuple]) -> bool:
    """Whether the boxes ``added`` that move by ``step`` too cover ``box`` (inside one, or painted whole by
    several: a tile written in two halves, then read whole), as a cover of just those boxes answers."""
    cover = Cover()
    for b, s in added:
        if (s == step).all():
            cover.add(b)
    if cover.covers(box):
        return True
    painted = cover.local(box)
    return painted is not None and bool(painted.all())


_CODE: dict[str, Any] = {}


def _call_source(exprs: list[str], names: tuple[str, ...]) -> str:
    """Source of a call's (positional arguments, parameters) from its arguments' sources, the last ``names``
    of them parameters."""
    k = len(exprs) - len(names)
    params = ", ".join(f"{n!r}: {e}" for n, e in zip(names, exprs[k:]))
    return f"(({''.join(e + ', ' for e in exprs[:k])}), {{{params}}})"


def _compiled(source: str, ns: dict[str, Any]) -> Callable:
    """``eval(source, ns)``, compiled once per source (constants are names in ``ns``)."""
    code = _CODE.get(source)
    if code is None:
        code = _CODE[source] = compile(source, "<value replay>", "eval")
    return eval(code, ns)


_END = object()


def _source(node: Any, it: Any, cit: Any, slot: int, ns: dict[str, Any]) -> tuple[str, int]:
    """Python source rebuilding one flattened argument (``_flatten``), and the next number slot."""
    def const(value: Any) -> str:   # numbered in order, so equal programs have equal sources
        name = f"c{len(ns)}"
        ns[name] = value
        return name

    if node == INT:
        return f"row[{slot}]", slot + 1
    kind = node[0]
    if kind == INTS:
        return f"({''.join(f'row[{slot + i}], ' for i in range(node[1]))})", slot + node[1]
    if kind == BOX:
        axes = "".join(f"(row[{slot + 3 * i}], row[{slot + 3 * i + 1}], row[{slot + 3 * i + 2}]), "
                       for i in range(node[1]))
        return f"({axes})", slot + 3 * node[1]
    if kind in (TUPLE, SLICE):
        parts = []
        for _ in range(node[1] if kind == TUPLE else 3):
            expr, slot = _source(next(it), it, cit, slot, ns)
            parts.append(expr)
        return (f"({''.join(p + ', ' for p in parts)})" if kind == TUPLE else f"slice({', '.join(parts)})"), slot
    if kind == ARRAY:
        base = const(next(cit)) if node[1] == IN_STORAGE else f"regs[{node[2]}]"
        return (f"_nd({node[4]!r}, {const(np.dtype(node[6]))}, buffer={base}, offset=row[{slot}], "
                f"strides={node[5]!r})"), slot + 1
    if kind == VALUE:
        return const(node[2]), slot
    if kind == OWN:
        return f"regs[{node[1]}]", slot
    return const(next(cit)), slot   # CONST, OBJECT


def agreed(probe: Any, probes: int, established: tuple[list, np.ndarray] | None = None
           ) -> tuple[Log, np.ndarray, np.ndarray] | None:
    """The last probe iteration's log, its numbers and their step if the last ``probes`` agree and their
    numbers move by a constant step (then ``Program(*agreed)`` replays it); None (``probe.mismatch``
    says why) otherwise. ``established``: the signatures and step an earlier instance's probes agreed on
    (``replay.Evidence.effects``), which these must show too."""
    logs = probe.logs[-probes:]
    broken = next((log.broken for log in logs if log.broken is not None), None)
    if broken is not None:
        probe.mismatch = broken
        return None
    sigs = logs[-1].sigs
    others = [log.sigs for log in logs[:-1]] + ([established[0]] if established is not None else [])
    if any(len(log.sigs) != len(sigs) or len(log.ints) != len(logs[-1].ints) for log in logs):
        probe.mismatch = "values: iterations differ in their effects"
        return None
    try:
        same = all(other == sigs for other in others)
    except Exception:  # noqa: BLE001 - a constant whose == is not a truth value
        same = False
    if not same:
        probe.mismatch = "values: iterations differ in their effects"
        return None
    ints = np.array([log.ints for log in logs], dtype=np.int64)
    deltas = np.diff(ints, axis=0)
    if (deltas != deltas[0]).any() or (established is not None and not np.array_equal(deltas[0], established[1])):
        probe.mismatch = "values: an effect's number does not change by a constant step"
        return None
    if any((deltas[0][a:b] != deltas[0][a]).any() for a, b in logs[-1].together):
        probe.mismatch = "values: a nested loop's lanes would meet at another iteration (same_step)"
        return None
    return logs[-1], ints[-1], deltas[0]


def replay(rt: Runtime, frame: LoopFrame, values: range, pos: int, program: Program, count: int,
           only: list[int] | None = None) -> int:
    """Run iterations ``values[pos:pos+count]`` as the program's calls (``only``: just the calls at these indices,
    as lanes runs the bookkeeping); stops before the first iteration whose guards would not hold. Returns the
    number run. The runtime's counters and the frame come back as they were (trace replay advances them)."""
    saved = (rt.epoch, frame.iteration, frame.iter_epoch, frame.inst_epoch, len(rt.loops), rt.loop_key)
    done = 0
    # an enclosing probing loop records these calls too (and proves its own program's checks, if it can), counted
    # as calls not run in Python (see MAX_CALLS)
    probes = rt.observer.probes
    recorded = bool(probes)
    calls = program.calls if probes else program.calls_for(count)
    if only is not None:
        calls = [calls[i] for i in only]
    logs = [p.logs[-1] for p in probes if p.logs]
    try:
        with np.errstate(all="ignore"):   # NumPy's warnings are no kernel's (deferred results computed under it)
            for m in range(1, count + 1):
                row = (program.last + m * program.delta).tolist()
                if program.guards and not _guards_hold(program, row):
                    break
                for log in logs:
                    log.replayed += len(calls) + 1
                if recorded:
                    call(loop_iteration, frame, i=values[pos + m - 1])
                else:
                    loop_iteration(frame, i=values[pos + m - 1])
                regs: list[Any] = [None] * program.registers
                for fn, build, reg, frees in calls:
                    args, params = build(row, regs)
                    result = call(fn, *args, **params) if recorded else fn(*args, **params)
                    if reg is not None:
                        regs[reg[1]] = root(result) if reg[0] == "reg" else result
                        if reg[0] == "tensor":
                            regs[reg[1] + 1] = root(result._array)
                    del result
                    for k in frees:
                        regs[k] = None
                done = m
    finally:
        rt.epoch, frame.iteration, frame.iter_epoch, frame.inst_epoch = saved[:4]
        del rt.loops[saved[4]:]
        rt.loop_key = saved[5]
    return done


_NOTHING_WRITTEN = Cover()   # the cover of a tensor allocated in the iteration, at its start (never added to)


def _guards_hold(program: Program, row: list[int]) -> bool:
    """Whether every guard of the iteration at ``row`` comes out as in the probes where it stands: the
    cover there is the cover now plus the boxes the iteration added before it (a tensor allocated in the
    iteration starts from an empty cover)."""
    added: dict[Any, list] = {}
    for fn, key, t, build_box, local in program.guards:
        box = build_box(row)
        mine = added.setdefault(key, [])
        if fn is cover_add:
            mine.append(box)
            continue
        cover = _NOTHING_WRITTEN if t is None else t._cover
        if cover is None:
            return False
        if fn is guard_covered:
            if not cover.covers(box) and not any(_contains(b, box) for b in mine):
                return False
            continue
        painted = cover.local(box)
        if painted is None:
            return False
        for b in mine:
            paint(painted, b, box)
        if not np.array_equal(painted, local):
            return False
    return True


# ---- recorded calls ------------------------------------------------------------------------------------
@primitive(replay=BOOKS)
def same_step(*offsets: int) -> None:
    """Recorded by a nested loop that ran as lanes (``lanes``): the byte offsets of its accesses to one written
    tensor, which an enclosing loop's iterations must all move by one step (:func:`agreed`), so that its lanes'
    accesses keep the distances that were proven apart."""
