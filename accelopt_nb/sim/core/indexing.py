"""Index expressions: ``nl.arange``, ``nl.mgrid``, ``nl.ds`` and the masks built from them.

An :class:`IndexExpr` is an integer array that broadcasts like a NumPy advanced index.
Affine arithmetic with loop variables (plain ints) and other expressions stays an
``IndexExpr``; comparisons give a :class:`Mask`.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from accelopt_nb.sim.core.context import active
from accelopt_nb.sim.core.failures import SIM_DIR

_NUMPY_DIR = str(Path(np.__file__).parent)


def plain(x: int) -> int:
    """An int (a loop variable is an int subclass, maybe tainted by loop replay) as a plain int, for the simulator's
    own bookkeeping: no hook of the subclass runs, since no kernel code looked at the value."""
    return int.__index__(x)


def _const(x: Any) -> int | None:
    """``x`` as a plain int when it is an integer constant (for affine bookkeeping), else None."""
    if isinstance(x, int) and not isinstance(x, bool):
        return plain(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return None


def _arr(x: Any) -> Any:
    if isinstance(x, IndexExpr):
        return x.values
    if isinstance(x, Mask):
        return x.values
    if isinstance(x, int) and type(x) is not int and not isinstance(x, bool):
        return plain(x)   # a loop variable, converted here: NumPy would call a tainted one's escape hook
    return x


_ALL = slice(None)
_COLUMN, _ROW = (":", None), (None, ":")   # the signatures of [:, None] and [None, :] (IndexExpr._subs keys)


class IndexExpr:
    """An affine index expression evaluated to a broadcastable int64 array.

    ``aff`` = (start, step) when the values are known to be ``start + step * k`` along their only
    axis longer than 1 (``nl.arange`` and int arithmetic on it); None when unknown. It lets the
    data path address compiler-style accesses as slices without inspecting the values.

    ``deps``: what the values were computed from that must hear of non-affine use (the probes of loop replay,
    ``sim/replay/loops.py``): each has ``fail(reason)`` (:func:`combine_deps`, :func:`note_array`).
    """

    __slots__ = ("values", "aff", "_subs", "deps")
    __array_priority__ = 100  # make ndarray operators defer to ours

    def __init__(self, values: np.ndarray, aff: tuple[int, int] | None = None, deps: tuple = ()) -> None:
        self.values = np.asarray(values, dtype=np.int64)
        self.aff = aff
        self._subs: dict[tuple, IndexExpr] | None = None  # new axes taken of a shared (read-only) expression
        self.deps = deps

    # shape manipulation used as nl.arange(n)[:, None]
    def __getitem__(self, key: Any) -> "IndexExpr":
        subs = self._subs
        if subs is not None and type(key) is tuple and len(key) == 2:   # nl.arange(n)[:, None] and [None, :]
            a, b = key
            if b is None and type(a) is slice and a == _ALL:
                sub = subs.get(_COLUMN)
            elif a is None and type(b) is slice and b == _ALL:
                sub = subs.get(_ROW)
            else:
                sub = None
            if sub is not None:
                return sub
        # new axes and full slices keep the progression; anything else may reorder or drop values
        sig: list[Any] | None = []
        for k in key if type(key) is tuple else (key,):
            if k is None:
                sig.append(None)
            elif k is Ellipsis:
                sig.append("...")
            elif type(k) is slice and k.start is None and k.stop is None and k.step is None:
                sig.append(":")
            else:
                sig = None
                break
        if sig is None:
            return IndexExpr(self.values[key], None, self.deps)
        if self.values.flags.writeable:
            return IndexExpr(self.values[key], self.aff, self.deps)
        # a shared arange: its [:, None] / [None, :] are shared too (kernels write them on every access)
        if self._subs is None:
            self._subs = {}
        sub = self._subs.get(tuple(sig))
        if sub is None:
            sub = self._subs[tuple(sig)] = IndexExpr(self.values[key], self.aff)
        return sub

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    @property
    def ndim(self) -> int:
        return self.values.ndim

    def __len__(self) -> int:
        return len(self.values)

    def __repr__(self) -> str:
        return f"IndexExpr(shape={self.values.shape}, min={self.values.min() if self.values.size else 0}, " \
               f"max={self.values.max() if self.values.size else 0})"

    def __array__(self, dtype=None, copy=None):
        if self.deps:
            note_array(self.deps)
        return self.values if dtype is None else self.values.astype(dtype)

    def _bin(self, other: Any, fn, aff_fn=None, product: bool = False) -> "IndexExpr":
        if isinstance(other, int) and not isinstance(other, bool):
            # an int (a loop variable's multiple, the offset of every compiler-style access): nothing to convert
            c = other if type(other) is int else plain(other)
            aff = None if aff_fn is None or self.aff is None else aff_fn(self.aff, c)
        else:
            if isinstance(other, float) and not float(other).is_integer():
                raise TypeError("index expressions only support integer arithmetic")
            aff = None
            if aff_fn is not None and self.aff is not None:
                k = _const(other)
                if k is not None:
                    aff = aff_fn(self.aff, k)
            c = _arr(other)
        deps = self.deps
        other_deps = getattr(other, "deps", ())
        if deps or other_deps:
            deps = combine_deps(deps, other_deps, affine=aff_fn is not None, product=product)
        return IndexExpr(fn(self.values, c), aff, deps)

    def __add__(self, o): return self._bin(o, np.add, lambda a, c: (a[0] + c, a[1]))
    def __radd__(self, o): return self._bin(o, lambda a, b: b + a, lambda a, c: (a[0] + c, a[1]))
    def __sub__(self, o): return self._bin(o, np.subtract, lambda a, c: (a[0] - c, a[1]))
    def __rsub__(self, o): return self._bin(o, lambda a, b: b - a, lambda a, c: (c - a[0], -a[1]))
    def __mul__(self, o): return self._bin(o, np.multiply, lambda a, c: (a[0] * c, a[1] * c), True)
    def __rmul__(self, o): return self._bin(o, lambda a, b: b * a, lambda a, c: (a[0] * c, a[1] * c), True)
    def __floordiv__(self, o): return self._bin(o, np.floor_divide)
    def __rfloordiv__(self, o): return self._bin(o, lambda a, b: b // a)
    def __mod__(self, o): return self._bin(o, np.mod)
    def __rmod__(self, o): return self._bin(o, lambda a, b: b % a)
    def __neg__(self):
        return IndexExpr(-self.values, None if self.aff is None else (-self.aff[0], -self.aff[1]), self.deps)
    def __pos__(self): return self

    def _compare(self, o: Any, op) -> "Mask":
        rhs = _arr(o)
        out = Mask(op(self.values, rhs))
        rt = active()
        if rt is not None and rt.watching is not None:   # loop replay extrapolates mask outcomes (core.hooks)
            rt.watching.mask(op, self.values, rhs, out.values)
        return out

    def __lt__(self, o): return self._compare(o, np.less)
    def __le__(self, o): return self._compare(o, np.less_equal)
    def __gt__(self, o): return self._compare(o, np.greater)
    def __ge__(self, o): return self._compare(o, np.greater_equal)
    def __eq__(self, o): return self._compare(o, np.equal)  # type: ignore[override]
    def __ne__(self, o): return self._compare(o, np.not_equal)  # type: ignore[override]
    __hash__ = None  # type: ignore[assignment]


def combine_deps(a: tuple, b: tuple, affine: bool, product: bool) -> tuple:
    """The dependencies of an index expression computed from two operands (``IndexExpr.deps``).

    ``//`` and ``%`` (``affine`` False), or a product of two operands that depend on one loop variable, are
    not affine in it: extrapolation could not follow them, so each dependency hears why.
    """
    merged = a + tuple(p for p in b if p not in a)
    if not affine or (product and any(p in b for p in a)):
        for p in merged:
            p.fail("non-affine index arithmetic on the loop variable")
    return merged


def note_array(deps: tuple) -> None:
    """An index expression with dependencies became a NumPy array (``IndexExpr.__array__``): outside the
    simulator's own code, what happens to it next is not followed."""
    frame = sys._getframe(2)   # the caller of __array__, past NumPy's own Python code
    while frame is not None and frame.f_code.co_filename.startswith(_NUMPY_DIR):
        frame = frame.f_back
    if frame is None or not frame.f_code.co_filename.startswith(SIM_DIR):
        for p in deps:
            p.fail("an index expression computed from the loop variable was converted to a NumPy array")


class Mask:
    """A compile-time predicate over index expressions (``mask=`` argument)."""

    __slots__ = ("values",)
    __array_priority__ = 100

    def __init__(self, values: Any, value: tuple | None = None) -> None:
        values = np.asarray(values, dtype=bool)
        if values.flags.writeable:  # a value: read-only, so its summaries (see memo) stay true
            values = values.view()
            values.flags.writeable = False
        self.values = keep(values, value)

    def _combine(self, other: Any, fn: Any) -> "Mask":
        """``fn(self, other)`` for a commutative ``fn`` (so also the reflected operator)."""
        a, b = self.values, _arr(other)
        out = fn(a, b)
        value = None
        if type(b) is np.ndarray and out.size > a.size + b.size:
            # an outer combination (rows < n) & (cols < m): named by its operands' values, far smaller than it
            ka, kb = value_of(a), value_of(b)
            if ka is not None and kb is not None:
                value = (fn.__name__, ka, kb)
        return Mask(out, value)

    def __and__(self, o): return self._combine(o, np.bitwise_and)
    def __or__(self, o): return self._combine(o, np.bitwise_or)
    def __xor__(self, o): return self._combine(o, np.bitwise_xor)
    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__
    def __invert__(self): return Mask(~self.values)

    def __bool__(self) -> bool:
        raise TypeError("a mask is an element-wise predicate; pass it as mask=..., do not use it in an if")

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    def __repr__(self) -> str:
        return f"Mask(shape={self.values.shape}, true={int(self.values.sum())})"


_ARANGES: dict[tuple[int, int], IndexExpr] = {}


def arange(start: int, stop: int | None = None) -> IndexExpr:
    """``nl.arange``: one shared, read-only expression per range (index expressions are values)."""
    if stop is None:
        start, stop = 0, start
    start, stop = int(start), int(stop)
    expr = _ARANGES.get((start, stop))
    if expr is None:
        if len(_ARANGES) >= 4096:  # ranges that move with a loop variable: keep the cache small
            _ARANGES.clear()
        values = np.arange(start, stop, dtype=np.int64)
        values.flags.writeable = False
        expr = _ARANGES[(start, stop)] = IndexExpr(values, (start, 1))
    return expr


class _Grid:
    """Result of ``nl.mgrid[...]``: unpackable, with ``.p`` / ``.x`` / ``.y`` / ``.z`` for its axes."""

    def __init__(self, exprs: list[IndexExpr]) -> None:
        self._exprs = exprs

    def __iter__(self):
        return iter(self._exprs)

    def __getitem__(self, i: int) -> IndexExpr:
        return self._exprs[i]

    def __len__(self) -> int:
        return len(self._exprs)

    @property
    def p(self) -> IndexExpr:
        return self._exprs[0]

    @property
    def x(self) -> IndexExpr:
        return self._exprs[1]

    @property
    def y(self) -> IndexExpr:
        return self._axis(2, "y")

    @property
    def z(self) -> IndexExpr:
        return self._axis(3, "z")

    def _axis(self, i: int, name: str) -> IndexExpr:
        if i >= len(self._exprs):
            raise AttributeError(f"a {len(self._exprs)}-D nl.mgrid has no .{name} (it needs {i + 1} dimensions)")
        return self._exprs[i]


class _MGrid:
    def __getitem__(self, key: Any) -> _Grid:
        if not isinstance(key, tuple):
            key = (key,)
        arrays = np.ogrid[key]  # open grid: broadcasts like the dense one, far cheaper
        if len(key) == 1:
            arrays = [arrays]
        return _Grid([IndexExpr(a) for a in arrays])


mgrid = _MGrid()


def ds(start: int, size: int) -> slice:
    """A dynamic slice ``[start, start + size)``."""
    start = int(start)
    return slice(start, start + int(size))


# ---- fast paths for compiler-style index expressions ---------------------------------------------
# Kernels written the way the NKI compiler prints them index every access with affine ``nl.arange``
# expressions (``t[i, 128 * j + nl.arange(128)[:, None], nl.arange(512)[None, :]]``) and pass masks
# built from them. NumPy advanced indexing of such keys copies and gathers element by element; the same
# elements form a (strided) box that basic indexing reaches as a view. These helpers recognise that
# form and summarise broadcast masks without expanding them; callers keep the general path for anything
# else, so both give identical values and trace regions.

def basic_key(key: tuple, shape: tuple[int, ...], affs: dict[int, tuple[int, int] | None] | None = None) -> tuple | None:
    """The basic (int/slice) key that selects the same elements as an advanced ``key``, or None.

    ``key`` is a normalized key (ints, slices, int64 arrays) with at least one array. The answer is
    not None when every array is, in row-major order, an in-bounds arithmetic progression (step > 0)
    along one broadcast axis or several adjacent ones, and the varying axes increase with the tensor
    axes: then ``t[basic]`` holds the
    elements of ``t[key]`` in the same order, and ``t[basic].reshape(adv_shape)`` equals ``t[key]``.
    Gathers, transposed or diagonal accesses and out-of-bounds indices (legal under a mask) give None.
    ``affs`` maps an axis to the known (start, step) of its array (``IndexExpr.aff``); other arrays are
    inspected.
    """
    nd = max(k.ndim for k in key if isinstance(k, np.ndarray))
    out: list[Any] = []
    last_axis = -1
    for axis_no, (k, size) in enumerate(zip(key, shape)):
        if not isinstance(k, np.ndarray):
            if isinstance(k, slice):
                return None  # normalize_key turns full slices next to arrays into arrays
            out.append(k)
            continue
        n = k.size
        if n == 0:
            return None
        aff = affs.get(axis_no) if affs else None
        flat = k.reshape(-1) if aff is None else None
        start = int(flat[0]) if aff is None else aff[0]
        if n == 1:
            if not 0 <= start < size:
                return None
            out.append(start)
            continue
        varying = [d for d, m in enumerate(k.shape) if m > 1]
        if varying[-1] - varying[0] != len(varying) - 1:
            return None  # varying axes with a broadcast axis between them
        axis = nd - k.ndim + varying[0]  # position in the right-aligned broadcast shape
        if axis <= last_axis:
            return None
        # several adjacent varying axes (``128 * nl.arange(8)[:, None] + nl.arange(128)[None, :]``) address one
        # tensor axis: a slice when their values, in row-major order, are one progression (checked below)
        last_axis = axis + len(varying) - 1
        step = int(flat[1]) - start if aff is None else aff[1]
        last = start + step * (n - 1)
        if step <= 0 or start < 0 or last >= size:
            return None
        if aff is None and (int(flat[-1]) != last or
                            (n > 2 and not np.array_equal(flat, np.arange(start, last + 1, step)))):
            return None
        out.append(slice(start, last + 1, step))
    return tuple(out)


def broadcast_shapes(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """``np.broadcast_shapes`` for the common case, falling back to it (and its error) otherwise."""
    nd = max(len(s) for s in shapes)
    out = [1] * nd
    for s in shapes:
        for i, n in enumerate(s, nd - len(s)):
            if n != out[i]:
                if out[i] == 1:
                    out[i] = n
                elif n != 1:
                    return np.broadcast_shapes(*shapes)
    return tuple(out)


def broadcast(a: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``np.broadcast_to(a, shape)`` (a read-only view); an array that has the shape already costs a view
    instead of ``broadcast_to``'s iterator setup (7 us, many times per instruction), or is itself when it
    is read-only (a mask keeps its summaries)."""
    if type(a) is np.ndarray and a.shape == shape:
        if not a.flags.writeable:
            return a
        view = a.view()
        view.flags.writeable = False
        return view
    # a kept mask's broadcast is kept with it (one per shape), so its own summaries are kept too: a mask
    # narrower than its tile is broadcast by every instruction that uses it
    return memo(a, ("broadcast", shape), _kept_broadcast, a, shape)


def _kept_broadcast(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return keep(np.broadcast_to(a, shape))


# One mask serves every instruction of a tile, and each asks the same questions of it (all true? how many?
# which rows and columns?): the answers are kept per mask value, by identity, while the mask is recent.
# Kernels that write the mask expression into every call make a new mask per instruction with the values of
# the previous one: the answers are shared by value (shape, dtype and the distinct part's bytes), as every
# question is a function of the values alone.
_SUMMARIES: dict[int, tuple[np.ndarray, dict, tuple]] = {}   # id -> (the mask, its summaries, its value key)
_BY_VALUE: dict[tuple, dict] = {}


def keep(m: np.ndarray, value: tuple | None = None) -> np.ndarray:
    """Keep the summaries of a read-only mask value (or a broadcast view of one) while it is recent.

    ``value``: a key that determines the values (equal keys, equal values), when the caller has one cheaper
    than the values' own bytes (:meth:`Mask._combine`)."""
    entry = _SUMMARIES.get(id(m))
    if entry is None or entry[0] is not m:
        if len(_SUMMARIES) >= 64:
            _SUMMARIES.clear()
        if value is None:
            c = compact(m)
            value = (m.shape, m.dtype.str, c.shape, c.tobytes())
        known = _BY_VALUE.get(value)
        if known is None:
            if len(_BY_VALUE) >= 256:
                _BY_VALUE.clear()
            known = _BY_VALUE[value] = {}
        _SUMMARIES[id(m)] = (m, known, value)
    return m


def value_of(m: np.ndarray) -> tuple | None:
    """The key of a kept mask's values (see :func:`keep`); None for any other array."""
    entry = _SUMMARIES.get(id(m))
    return entry[2] if entry is not None and entry[0] is m else None


def memo(m: Any, key: Any, fn: Any, *args: Any) -> Any:
    """``fn(*args)``, kept under ``key`` for a kept mask value ``m`` (computed each time for any other array).
    A function and its arguments, not a closure: asked several times per instruction, mostly answered here."""
    entry = _SUMMARIES.get(id(m))
    if entry is None or entry[0] is not m:
        return fn(*args)
    known = entry[1]
    hit = known.get(key, _MISSING)
    if hit is _MISSING:
        hit = known[key] = fn(*args)
    return hit


_MISSING = object()


def compact(m: np.ndarray) -> np.ndarray:
    """The distinct part of a broadcast array: one element along every zero-stride axis."""
    if 0 not in m.strides:
        return m
    if not any(s == 0 and n > 1 for s, n in zip(m.strides, m.shape)):
        return m
    return m[tuple(slice(0, 1) if s == 0 else slice(None) for s in m.strides)]


def mask_all(m: np.ndarray) -> bool:
    """``m.all()`` without expanding a broadcast mask."""
    return memo(m, "all", _all_of, m)


def _all_of(m: np.ndarray) -> bool:
    return bool(compact(m).all())


def broadcast_reps(small: tuple[int, ...], shape: tuple[int, ...]) -> int:
    """How many times broadcasting an array of shape ``small`` to ``shape`` repeats each element.

    Raises ValueError, as ``np.broadcast_to`` does, when it does not broadcast.
    """
    if len(small) > len(shape):
        raise ValueError(f"cannot broadcast shape {small} to {shape}")
    reps = 1
    for k, n in zip((1,) * (len(shape) - len(small)) + tuple(small), shape):
        if k != n:
            if k != 1:
                raise ValueError(f"cannot broadcast shape {small} to {shape}")
            reps *= n
    return reps


def mask_count(m: Any, shape: tuple[int, ...]) -> int:
    """``count_nonzero(broadcast_to(m, shape))`` without expanding the broadcast."""
    shape = tuple(shape)
    return memo(m, ("count", shape), _count, m, shape)


def _count(m: Any, shape: tuple[int, ...]) -> int:
    a = np.asarray(m)
    broadcast_reps(a.shape, shape)  # the expanded form's shape check
    c = compact(a)
    return int(np.count_nonzero(c)) * broadcast_reps(c.shape, shape)


def mask_rows_cols(m: Any, shape: tuple[int, ...]) -> tuple[int, int]:
    """Partitions (axis 0) and flattened free positions that a mask broadcast to ``shape`` keeps any of.

    Equals ``(count_nonzero(b.any(axis=1)), count_nonzero(b.any(axis=0)))`` for
    ``b = broadcast_to(m, shape).reshape(shape[0], -1)``.
    """
    shape = tuple(shape)
    return memo(m, ("rows_cols", shape), _rows_cols, m, shape)


def _rows_cols(m: Any, shape: tuple[int, ...]) -> tuple[int, int]:
    b = broadcast(m, shape)
    if not shape:
        return int(bool(b)), int(bool(b))
    c = compact(b)
    free = tuple(range(1, c.ndim))
    row_any = c.any(axis=free) if free else c
    rows = int(np.count_nonzero(row_any)) * (shape[0] // c.shape[0] if c.shape[0] else 1)
    col_any = c.any(axis=0)
    reps = 1
    for n, k in zip(shape[1:], col_any.shape):
        reps *= n // k if k else 1
    return rows, int(np.count_nonzero(col_any)) * reps
