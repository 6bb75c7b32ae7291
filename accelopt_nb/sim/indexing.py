"""Index expressions: ``nl.arange``, ``nl.mgrid``, ``nl.ds`` and the masks built from them.

An :class:`IndexExpr` is an integer array that broadcasts like a NumPy advanced index.
Affine arithmetic with loop variables (plain ints) and other expressions stays an
``IndexExpr``; comparisons give a :class:`Mask`.
"""
from __future__ import annotations

from typing import Any

import numpy as np


def _arr(x: Any) -> Any:
    if isinstance(x, IndexExpr):
        return x.values
    if isinstance(x, Mask):
        return x.values
    return x


class IndexExpr:
    """An affine index expression evaluated to a broadcastable int64 array."""

    __slots__ = ("values",)
    __array_priority__ = 100  # make ndarray operators defer to ours

    def __init__(self, values: np.ndarray) -> None:
        self.values = np.asarray(values, dtype=np.int64)

    # shape manipulation used as nl.arange(n)[:, None]
    def __getitem__(self, key: Any) -> "IndexExpr":
        return IndexExpr(self.values[key])

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
        return self.values if dtype is None else self.values.astype(dtype)

    def _bin(self, other: Any, fn) -> "IndexExpr":
        if isinstance(other, float) and not float(other).is_integer():
            raise TypeError("index expressions only support integer arithmetic")
        return IndexExpr(fn(self.values, _arr(other)))

    def __add__(self, o): return self._bin(o, np.add)
    def __radd__(self, o): return self._bin(o, lambda a, b: b + a)
    def __sub__(self, o): return self._bin(o, np.subtract)
    def __rsub__(self, o): return self._bin(o, lambda a, b: b - a)
    def __mul__(self, o): return self._bin(o, np.multiply)
    def __rmul__(self, o): return self._bin(o, lambda a, b: b * a)
    def __floordiv__(self, o): return self._bin(o, np.floor_divide)
    def __rfloordiv__(self, o): return self._bin(o, lambda a, b: b // a)
    def __mod__(self, o): return self._bin(o, np.mod)
    def __rmod__(self, o): return self._bin(o, lambda a, b: b % a)
    def __neg__(self): return IndexExpr(-self.values)
    def __pos__(self): return self

    def __lt__(self, o): return Mask(self.values < _arr(o))
    def __le__(self, o): return Mask(self.values <= _arr(o))
    def __gt__(self, o): return Mask(self.values > _arr(o))
    def __ge__(self, o): return Mask(self.values >= _arr(o))
    def __eq__(self, o): return Mask(self.values == _arr(o))  # type: ignore[override]
    def __ne__(self, o): return Mask(self.values != _arr(o))  # type: ignore[override]
    __hash__ = None  # type: ignore[assignment]


class Mask:
    """A compile-time predicate over index expressions (``mask=`` argument)."""

    __slots__ = ("values",)
    __array_priority__ = 100

    def __init__(self, values: Any) -> None:
        self.values = np.asarray(values, dtype=bool)

    def __and__(self, o): return Mask(self.values & _arr(o))
    def __rand__(self, o): return Mask(_arr(o) & self.values)
    def __or__(self, o): return Mask(self.values | _arr(o))
    def __ror__(self, o): return Mask(_arr(o) | self.values)
    def __xor__(self, o): return Mask(self.values ^ _arr(o))
    def __invert__(self): return Mask(~self.values)

    def __bool__(self) -> bool:
        raise TypeError("a mask is an element-wise predicate; pass it as mask=..., do not use it in an if")

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    def __repr__(self) -> str:
        return f"Mask(shape={self.values.shape}, true={int(self.values.sum())})"


def arange(start: int, stop: int | None = None) -> IndexExpr:
    if stop is None:
        start, stop = 0, start
    return IndexExpr(np.arange(int(start), int(stop), dtype=np.int64))


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
