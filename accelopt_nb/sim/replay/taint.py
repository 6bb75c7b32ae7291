"""Tainted ints for trace-only loop replay: a probing loop's variable, and what is computed from it.

Arithmetic that keeps a value affine in the loop variables (``+``, ``-``, ``*`` by a constant or by another
loop's variable) returns a tainted int; anything else done with it outside the simulator's own code
(comparisons, ``bool``, ``hash``, ``//``, ``%``, ``int()``, formatting, NumPy conversion, ``.real``) marks
the loops it depends on as not replayable (``Probe.fail``), since the loop's records may then depend on the
variable in a way extrapolation cannot follow.
"""
from __future__ import annotations

import sys
from typing import Any

from accelopt_nb.sim.core.failures import SIM_DIR
from accelopt_nb.sim.core.runtime import LoopIndex


def _outside_simulator(depth: int) -> bool:
    """Whether the code ``depth`` frames up (the caller of a dunder method) is not the simulator's own."""
    return not sys._getframe(depth).f_code.co_filename.startswith(SIM_DIR)


class _TaintOps:
    """Methods of the tainted ints: ``deps`` are the :class:`Probe` s of the loop variables they depend on."""

    __slots__ = ()
    deps: tuple[Any, ...]   # the replay probes of the loops

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
