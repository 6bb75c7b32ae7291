"""The program a kernel runs, as a hash: what every NKI call, tile operator, assignment and loop did, exactly.

Two kernels whose launches make the same calls with the same arguments, in the same order, over the same loop
iterations, compute the same outputs for every input of those shapes: every change to simulator memory happens
inside such a call, and a call is a fixed function of its arguments and the memory it reads. This module records
those calls during a trace-only launch, as an observer of its runtime (``Runtime.calls``, core/hooks.py): every
call of every iteration, the iterations loop replay extrapolates included (they are hashed from their probes'
records and step, :meth:`Recorder.agree` / :meth:`Recorder.replayed`, the same hash as running them), each
argument in an exact form: a tensor by its launch id, a view by its tensor and normalized index key (slices and
the index arrays element by element, not a box), an index expression or mask by its values, a number by its
value, a function by its qualified name. Anything it cannot write down exactly refuses the hash (``None``):

* an argument of a type not listed in :func:`_canon` (a kernel's own function or class, an access pattern
  view, an indirect view, a register, a dynamic offset read from a tile);
* value-dependent addressing or control (registers, dynamic loops, dynamic offsets, indirect DMA, vector or
  scalar offsets);
* kernel code whose path could differ between the trace-only launch and one with values, or between two
  processes: exception handlers (a value run may raise where a trace-only run does not), ``__exit__``
  methods, sets (their order follows the process's string hash seed), ``hash``/``id`` and ``random``.

Equal hashes may still miss (two programs written in different orders): missing a share only costs an
evaluation; a false share would be a wrong verdict, so every doubt refuses.
"""
from __future__ import annotations

import ast
import dataclasses
import enum
import hashlib
import marshal
import types
from typing import Any

import numpy as np

from accelopt_nb.sim.core.context import active
from accelopt_nb.sim.core.hooks import Observer

FORMAT = 3                     # part of every hash: a change of encoding never meets an old hash

# APIs whose effect depends on values read from memory (addresses, loop bounds): refused by name
_REFUSED_APIS = ("register_", "dynamic_range", "fori_loop", "while_loop", "tensor_copy_dynamic")
# keyword arguments that address memory through values read from memory
_VALUE_ADDRESSING = ("vector_offset", "scalar_offset", "dynamic_offset")
# keyword arguments that cannot change what a call computes
_IGNORED_KWARGS = frozenset({"name"})
_NUMBER = Ellipsis             # where a number stood in a record's structure (no canonical form contains Ellipsis)
_EMPTY = np.zeros(0, dtype=np.int64)


class Refused(Exception):
    """The program cannot be written down exactly."""


class _Block:
    """The records of one loop iteration as they arrive: their structure (numbers replaced by :data:`_NUMBER`)
    and their numbers, as ints and int arrays in order."""

    __slots__ = ("struct", "ints", "arrays")

    def __init__(self) -> None:
        self.struct: list[Any] = []
        self.ints: list[int] = []
        self.arrays: list[np.ndarray] = []

    def add(self, struct: Any, ints: list[int], arrays: list[np.ndarray]) -> None:
        self.struct.append(struct)
        self.ints += ints
        self.arrays += arrays

    def close(self) -> tuple[tuple, np.ndarray]:
        return tuple(self.struct), np.concatenate([np.array(self.ints, dtype=np.int64), *self.arrays])


class _Loop:
    """One running loop instance: its iterations, as a run-length code of the blocks seen so far (a block is
    written out, then ``("run", L, step)`` for the L following blocks that each add ``step`` to its numbers)."""

    __slots__ = ("cur", "prev", "length", "step", "recent")

    def __init__(self) -> None:
        self.cur: _Block | None = None          # the running iteration's records
        self.prev: tuple[tuple, np.ndarray] | None = None   # the last block (run, or extrapolated by replay)
        self.length = 0                         # blocks in the open run after the one written out
        self.step: np.ndarray | None = None     # the open run's step
        self.recent: list[tuple[tuple, np.ndarray]] = []    # the last blocks that ran, for replay's check


class Recorder(Observer):
    """The running hash of one launch's program, an observer of its runtime (``Runtime.calls``, see
    :mod:`accelopt_nb.sim.core.hooks`); ``reason`` is set once something refused it.

    Each loop's iterations are hashed as a run-length code: an iteration's records are written out, and a stretch
    of following iterations whose records have the same structure and whose numbers (ints, and the elements of int
    arrays: indices, tensor ids, loop variables) each move by one constant step as ``("run", length, step)``. The
    code is a function of the records alone, so it is the same whether the launch ran every iteration or loop
    replay extrapolated some (:meth:`agree`, :meth:`replayed`): the hash is the same with replay as without."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256(f"program-v{FORMAT}".encode())
        self.reason: str | None = None
        self.calls = 0
        self.loops: list[_Loop] = []
        self.statements: dict[tuple, int] = {}

    def put(self, record: tuple) -> None:
        if self.reason is not None:
            return
        try:
            ints: list[int] = []
            arrays: list[np.ndarray] = []
            struct = _split(_canon(record), ints, arrays)
        except Refused as why:
            self.reason = str(why)
            return
        self.calls += 1
        self._out(struct, ints, arrays)

    def _out(self, struct: Any, ints: list[int], arrays: list[np.ndarray]) -> None:
        """One item into the running iteration of the innermost loop, or into the hash outside loops."""
        loops = self.loops
        if loops:
            loop = loops[-1]
            target = loop.cur
            if target is not None:
                target.add(struct, ints, arrays)
                return
            if len(loops) > 1 and loops[-2].cur is not None:   # before the loop's first iteration
                loops[-2].cur.add(struct, ints, arrays)
                return
        try:
            self.digest.update(marshal.dumps(struct, 2))
        except ValueError as why:   # marshal met a type _canon let through
            self.reason = f"cannot encode {why}"
            return
        self.digest.update(np.array(ints, dtype=np.int64).tobytes())
        for a in arrays:
            self.digest.update(a.tobytes())

    def refuse(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason

    # ---- loops: the run-length code ------------------------------------------------------------------
    def _close(self, loop: _Loop) -> None:
        """The running iteration ends: its block joins the open run or is written out."""
        block = loop.cur
        if block is None:
            return
        loop.cur = None
        struct, nums = block.close()
        loop.recent.append((struct, nums))
        del loop.recent[:-4]
        prev = loop.prev
        if prev is not None and prev[0] == struct and prev[1].shape == nums.shape:
            step = nums - prev[1]
            if loop.length == 0 or np.array_equal(step, loop.step):
                loop.step, loop.length, loop.prev = step, loop.length + 1, (struct, nums)
                return
        self._write(loop, struct, nums)

    def _write(self, loop: _Loop, struct: tuple, nums: np.ndarray) -> None:
        """Close the open run and write ``(struct, nums)`` out, the start of the next."""
        self._flush(loop)
        loop.prev = (struct, nums)
        self._out(("block", struct), [], [nums])

    def _flush(self, loop: _Loop) -> None:
        if loop.length:
            self._out(("run", loop.length, loop.step.tobytes()), [], [])
        loop.length, loop.step = 0, None

    def agree(self, probes: int, known: Any) -> tuple[str | None, Any]:
        """Loop replay would extrapolate the innermost loop from the iterations just run: whether their records
        (the last ``probes``) have one structure and numbers that move by one step (with ``known``, the structure
        and step an earlier instance of the loop showed), and that (structure, step)."""
        if self.reason is not None or not self.loops:
            return None, None
        loop = self.loops[-1]
        self._close(loop)
        blocks = loop.recent[-probes:]
        if len(blocks) < probes or probes < 2:
            return "the program's records of the probes were not all seen", None
        struct, first = blocks[0]
        if any(b[0] != struct or b[1].shape != first.shape for b in blocks):
            return "iterations differ in the program's records", None
        steps = np.diff(np.stack([b[1] for b in blocks]), axis=0)
        if (steps != steps[0]).any() or (known is not None and (known[0] != struct
                                                                or not np.array_equal(known[1], steps[0]))):
            return "a number in the program's records does not change by a constant step", None
        return None, (struct, steps[0])

    def replayed(self, count: int, step: Any) -> None:
        """Loop replay extrapolated ``count`` iterations of the innermost loop past the last one run, each adding
        ``step`` (from :meth:`agree`) to its records' numbers: they join the code as if they had run."""
        if self.reason is not None or not self.loops or count <= 0:
            return
        loop = self.loops[-1]
        struct, step = step
        prev = loop.prev
        if loop.length and not np.array_equal(step, loop.step):   # the run breaks at the first extrapolated one
            first = (struct, prev[1] + step)
            self._write(loop, *first)
            prev, count = first, count - 1
        if count:
            loop.step, loop.length = step, loop.length + count
            loop.prev = (struct, prev[1] + count * step)
        loop.recent.clear()

    # ---- the observer --------------------------------------------------------------------------------
    def call(self, api: str, args: tuple, kwargs: dict[str, Any]) -> None:
        short = api.rsplit(".", 1)[-1]
        if short.startswith(_REFUSED_APIS):
            self.refuse(f"{api} depends on values read from memory")
            return
        for k in _VALUE_ADDRESSING:
            if kwargs.get(k) is not None:
                self.refuse(f"{api}({k}=...) addresses memory through values")
                return
        self.put(("call", api, self._statement(), args,
                  tuple((k, v) for k, v in kwargs.items() if k not in _IGNORED_KWARGS)))

    def op(self, name: str, *operands: Any) -> None:
        self.put(("op", name, self._statement(), *operands))

    def store(self, kind: str, dest: Any, value: Any) -> None:
        self.put((kind, self._statement(), dest, value))

    def setting(self, name: str, value: Any) -> None:
        self.put(("setting", name, value))

    def _statement(self) -> int:
        """The kernel statement making the call, as the ordinal of its first appearance: the performance model
        groups instructions by statement (DMA queues, reuse, scheduling), so two kernels that make the same calls
        from differently grouped statements may differ in latency (the trace fingerprint counts them the same
        way, ``evaluation.backends.simulator.trace_fingerprint``)."""
        rt = active()
        where = rt.location() if rt is not None else (None, None)
        return self.statements.setdefault(where, len(self.statements))

    def begin(self, kind: str, start: int, step: int, count: int, no_reorder: bool) -> None:
        self.put(("loop", kind, start, step, count, no_reorder))
        self.loops.append(_Loop())

    def iteration(self, i: int) -> None:
        if self.loops:
            loop = self.loops[-1]
            self._close(loop)
            loop.cur = _Block()
        self.put(("iteration", int.__int__(i)))

    def end(self) -> None:
        if self.loops:
            loop = self.loops[-1]
            self._close(loop)
            self._flush(loop)
            self.loops.pop()
        self.put(("end",))

    def outputs(self, outputs: Any) -> None:
        self.put(("outputs", outputs))

    def unrecordable(self, reason: str) -> None:
        self.refuse(reason)


# ---- exact forms of arguments -----------------------------------------------------------------------------
_SCALARS = frozenset({type(None), bool, int, float, complex, str, bytes})


def _canon(x: Any) -> Any:
    """``x`` as nested tuples of plain values that marshal encodes, exact; raises :class:`Refused`.
    One dict lookup per value on the hot path (a matmul at the paper's shape records 650k calls)."""
    t = type(x)
    if t in _SCALARS:
        return x
    form = _FORMS.get(t)
    if form is not None:
        return form(x)
    return _other(x, t)


def _split(x: Any, ints: list[int], arrays: list[np.ndarray]) -> Any:
    """The canonical form ``x`` with every int replaced by :data:`_NUMBER` (appended to ``ints``) and the elements
    of every int array moved to ``arrays``: what may move by a step from one loop iteration to the next."""
    t = type(x)
    if t is int:
        if -2**62 < x < 2**62:
            ints.append(x)
            return _NUMBER
        return x
    if t is not tuple:
        return x
    if len(x) == 5 and x[0] == "nd" and (x[2][1] == "i" or (x[2][1] == "u" and x[2][2:] != "8")):
        arrays.append(np.frombuffer(x[4], dtype=np.dtype(x[2])).astype(np.int64))
        return x[:4] + (_NUMBER,)
    return tuple([_split(v, ints, arrays) for v in x])


def _seq(x: Any) -> tuple:
    return (type(x).__name__, tuple(map(_canon, x)))


def _array(x: np.ndarray) -> tuple:
    if x.dtype.kind not in "biufc":
        raise Refused(f"an array of dtype {x.dtype}")
    return ("nd", str(x.dtype), x.dtype.str, x.shape, x.tobytes())


def _view(v: Any) -> tuple:
    if v.indirect:
        raise Refused("an indirect (gather/scatter) view: addresses read from memory")
    try:   # the slot read directly: getattr on an unset slot would build the kernel-facing error message
        pattern = _PATTERN_SLOT(v)
    except AttributeError:
        pattern = False
    if pattern:
        raise Refused("an access-pattern view")
    return ("view", v.tensor.id, tuple(map(_canon, v.key)), v.shape)


def _other(x: Any, t: type) -> Any:
    """The forms looked up once per type (then kept in :data:`_FORMS`) or per object (functions)."""
    if isinstance(x, np.generic):
        if x.dtype.kind not in "biufc":
            raise Refused(f"a NumPy scalar of dtype {x.dtype}")
        _FORMS[t] = lambda v: ("np", str(v.dtype), v.dtype.str, v.tobytes())
        return _FORMS[t](x)
    if isinstance(x, np.dtype):
        _FORMS[t] = lambda v: ("dtype", str(v), v.str)
        return _FORMS[t](x)
    if isinstance(x, int) and t.__module__.startswith("accelopt_nb.sim."):   # a loop variable, plain or probing
        _FORMS[t] = int.__int__
        return int.__int__(x)
    if isinstance(x, type) and issubclass(x, np.generic):
        return ("dtype", str(np.dtype(x)), np.dtype(x).str)
    spec = getattr(x, "__nki_spec__", None) if isinstance(x, types.FunctionType) else None
    if spec is not None:          # a guarded NKI function (an op= argument)
        return ("api", spec.api)
    if isinstance(x, (types.FunctionType, types.BuiltinFunctionType)):
        module = getattr(x, "__module__", None) or ""
        if module == "numpy" or module.startswith(("numpy.", "accelopt_nb.sim.", "math", "builtins")):
            return ("fn", module, x.__qualname__)
        raise Refused(f"a function argument {getattr(x, '__qualname__', x)!r} defined outside NKI and NumPy")
    if t.__module__.startswith("accelopt_nb.sim."):
        if isinstance(x, enum.Enum):
            return ("enum", t.__module__, t.__qualname__, x.name)
        if dataclasses.is_dataclass(x):   # nl.sbuf, nl.par_dim(n), ...: plain data of the simulator's
            return ("data", t.__module__, t.__qualname__,
                    tuple(_canon(getattr(x, f.name)) for f in dataclasses.fields(x)))
    raise Refused(f"an argument of type {t.__module__}.{t.__qualname__}")


def register(*, tensor: type, view: type, index: type, mask: type, grid: type, loop_index: type) -> None:
    """Give the core's types their forms (called once by whoever loads the simulator: the core's modules
    import this one, so it cannot import them). Until then a tensor argument refuses the hash."""
    global _PATTERN_SLOT
    _PATTERN_SLOT = view.pattern.__get__
    _FORMS.update(_base_forms(tensor, view, index, mask, grid, loop_index))


def _base_forms(Tensor: type, View: type, IndexExpr: type, Mask: type, _Grid: type, LoopIndex: type) -> dict:
    return {tuple: _seq, list: _seq, np.ndarray: _array, np.ufunc: lambda f: ("ufunc", f.__name__),
            dict: lambda d: ("dict", tuple((_canon(k), _canon(v)) for k, v in d.items())),
            slice: lambda s: ("slice", _canon(s.start), _canon(s.stop), _canon(s.step)),
            type(Ellipsis): lambda e: ("...",),
            Tensor: lambda t: ("tensor", t.id), View: _view,
            IndexExpr: lambda e: ("index", _array(e.values)), Mask: lambda m: ("mask", _array(m.values)),
            _Grid: lambda g: ("grid", tuple(map(_canon, g))), LoopIndex: int}


_PATTERN_SLOT: Any = None
_FORMS: dict[type, Any] = {}   # forms by exact type; the core's forms are added on first use (they import this module)


# ---- the kernel's source ----------------------------------------------------------------------------------
_REFUSED_CALLS = frozenset({"hash", "id", "set", "frozenset"})


def source_refusal(sources: dict[str, str]) -> str | None:
    """Why the kernel's own code could take another path with values, or in another process (None: it cannot)."""
    for path, text in sources.items():
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return f"{path} does not parse"
        for node in ast.walk(tree):
            where = f"{path}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
                return f"{where}: an exception handler (a run with values may raise where a trace-only run does not)"
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in ("__exit__", "__aexit__"):
                return f"{where}: an __exit__ method (it may swallow exceptions)"
            if isinstance(node, (ast.Set, ast.SetComp)):
                return f"{where}: a set (its order follows the process's hash seed)"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _REFUSED_CALLS:
                return f"{where}: {node.func.id}() (not the same in every process)"
            if isinstance(node, (ast.Name, ast.Attribute)) and "random" in (
                    node.id if isinstance(node, ast.Name) else node.attr).lower():
                return f"{where}: random numbers"
    return None


__all__ = ["FORMAT", "Recorder", "Refused", "register", "source_refusal"]
