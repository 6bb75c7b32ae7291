"""Virtual registers and the loops they bound: ``nisa.register_alloc/move/load/store``, ``nl.dynamic_range``,
``nl.fori_loop``, ``nl.while_loop`` (the standalone ``nki`` front end).

A register holds one 32-bit integer on an engine's sequencer (Neuron docs: ``nki.isa.register_alloc``; 64 per
sequencer on NeuronCore-v2..v4; the compiler maps virtual registers to physical ones). Kernels use registers as
runtime loop bounds and as runtime DMA offsets (``tensor.ap(scalar_offset=register)``). The simulator runs a
dynamic loop as a sequential loop over the register's value at the moment the loop starts, which is what the
sequencer's branch does.

Trace-only, memory holds no values: a register loaded from memory has no value, so a loop it bounds cannot be
unrolled and the loop is refused, naming the line of the load (profile such a kernel with values). A register
read as a DMA offset reads as 0 there, like the runtime offsets of ``api/access.py``.

Trace: ``register_load`` and ``register_store`` are instructions (they read or write memory, so they order against
the DMA or compute that produced or consumes the value; one element, MIN_II on the sequencer's engine);
``register_alloc`` and ``register_move`` touch no memory and record nothing.
"""
from __future__ import annotations

from math import prod
from typing import Any, Callable, Iterator

import numpy as np

from accelopt_nb.sim.api.language_nki import NKIObject
from accelopt_nb.sim.core import dtypes as dt
from accelopt_nb.sim.core.context import current
from accelopt_nb.sim.core.memory import read, write
from accelopt_nb.sim.core.operands import as_view

_INT32 = (-(2 ** 31), 2 ** 31 - 1)
RULE = "a virtual register holds one 32-bit integer (nisa.register_alloc)"


class VirtualRegister(NKIObject):
    """``nisa.VirtualRegister``: what ``register_alloc`` returns.

    ``value`` is the register's integer, or None while it is unset (allocated without a value) or unknown (loaded
    from memory in trace-only mode; ``unknown_since`` then names the load).
    """

    def __init__(self, value: int | None = None, name: str = "") -> None:
        self.value = value
        self.name = name
        self.unknown_since: tuple[str | None, int | None] | None = None

    def __repr__(self) -> str:
        return f"VirtualRegister({'?' if self.value is None else self.value})"

    def __nki_register__(self) -> int:
        """The value a runtime DMA offset reads (``api/access.py``): 0 when unknown, trace-only."""
        return 0 if self.value is None else self.value

    def __bool__(self) -> bool:
        # ``while reg:`` (the docs' parser front end): the condition is the register's value
        return _value(self, "while <register>") != 0


def _fresh(rt: Any) -> None:
    # a register changes outside simulator memory: loop replay must run every iteration that touches one
    if rt.watching is not None:
        rt.watching.fail("a virtual register changes in the loop body")


def _register(rt: Any, x: Any, api: str, what: str) -> VirtualRegister:
    if not isinstance(x, VirtualRegister):
        raise rt.rule_error(api, f"{what} must be a register from nisa.register_alloc, got {type(x).__name__}", RULE)
    return x


def _immediate(rt: Any, x: Any, api: str) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise rt.rule_error(api, f"a register takes an int (or another register), got {x!r}", RULE)
    if not _INT32[0] <= int(x) <= _INT32[1]:
        raise rt.rule_error(api, f"{int(x)} does not fit a 32-bit register", RULE)
    return int(x)


def _value(reg: VirtualRegister, api: str) -> int:
    rt = current()
    if reg.value is not None:
        return reg.value
    if reg.unknown_since is not None:
        file, line = reg.unknown_since
        where = f"{file}:{line}" if file else "the kernel"
        raise rt.rule_error(api, f"the register loaded from memory at {where} has no value in trace-only mode, and "
                            "a loop it bounds cannot be unrolled without it: simulate with values",
                            "trace-only simulation has shapes, not values; a runtime loop bound is a value")
    raise rt.rule_error(api, f"register {reg.name or '(unnamed)'} is read before any value was put in it",
                        "a register is set (register_alloc(x), register_move, register_load) before it is read")


# ---- nisa ---------------------------------------------------------------------------------------------
def register_alloc(x: int | None = None) -> VirtualRegister:
    """A new register, holding ``x`` (an int) or unset."""
    rt = current()
    return VirtualRegister(None if x is None else _immediate(rt, x, "nisa.register_alloc"))


def register_move(dst, src) -> None:
    """``dst = src``: an int or another register."""
    rt = current()
    api = "nisa.register_move"
    reg = _register(rt, dst, api, "dst")
    _fresh(rt)
    if isinstance(src, VirtualRegister):
        reg.value, reg.unknown_since = src.value, src.unknown_since
        if src.value is None and src.unknown_since is None:
            _value(src, api)     # an unset register: the kernel's error
    else:
        reg.value, reg.unknown_since = _immediate(rt, src, api), None


def _one_element(rt: Any, x: Any, api: str, what: str):
    view = as_view(x)
    if view is None or int(prod(view.shape)) != 1:
        got = type(x).__name__ if view is None else f"a {view.shape} tile"
        raise rt.rule_error(api, f"{what} must be a tensor of one element ([1] or [1, 1]), got {got}",
                            "registers move one 32-bit scalar to or from memory")
    if view.tensor.buffer == "psum":
        raise rt.rule_error(api, f"{what} '{view.tensor.name}' is in PSUM", "registers load from and store to HBM or "
                            "SBUF")
    if dt.itemsize(view.tensor.dtype) > 4:
        raise rt.rule_error(api, f"{what} is {dt.name(view.tensor.dtype)}", RULE)
    return view


def _emit(rt: Any, op: str, api: str, reads: tuple, writes: tuple, dtype: str) -> None:
    rt.emit("scalar", op, api, reads, writes, 1, 1, (dtype,), dtype, attrs={"register": True})


def register_load(dst, src) -> None:
    """``dst = src[0]``: one integer (up to 32 bits) from HBM or SBUF."""
    rt = current()
    api = "nisa.register_load"
    reg = _register(rt, dst, api, "dst")
    view = _one_element(rt, src, api, "src")
    _fresh(rt)
    data, written = read(view, None, api)
    if data is None:
        reg.value, reg.unknown_since = None, rt.location()
    else:
        if written is not None and rt.options.check_uninitialized and not np.asarray(written).all():
            from accelopt_nb.errors import UninitializedReadError
            raise rt.rule_error(api, f"src '{view.tensor.name}' was never written", UninitializedReadError.rule,
                                UninitializedReadError)
        value = np.asarray(data).reshape(-1)[0]
        reg.value = int(np.int64(value)) if dt.is_float(view.tensor.dtype) else int(value)
        reg.value = max(_INT32[0], min(_INT32[1], reg.value))
        reg.unknown_since = None
    _emit(rt, "register_load", api, (view.region(),), (), dt.name(view.tensor.dtype))


def register_store(dst, src) -> None:
    """``dst[0] = src``: the register's integer into a one-element HBM or SBUF tensor (cast to its dtype)."""
    rt = current()
    api = "nisa.register_store"
    reg = _register(rt, src, api, "src")
    view = _one_element(rt, dst, api, "dst")
    _fresh(rt)
    if rt.options.trace_only:
        data = None
    else:
        data = dt.cast(np.full(view.shape, _value(reg, api), np.int64), view.tensor.dtype)
    write(view, data, None, None, api)
    _emit(rt, "register_store", api, (), (view.region(),), dt.name(view.tensor.dtype))


# ---- nl: loops bounded by registers --------------------------------------------------------------------
def _bound(x: Any, api: str) -> int:
    rt = current()
    if isinstance(x, VirtualRegister):
        return _value(x, api)
    return _immediate(rt, x, api)


def _step(rt: Any, step: Any, api: str) -> int:
    if isinstance(step, VirtualRegister) or _immediate(rt, step, api) <= 0:
        raise rt.rule_error(api, f"step must be a positive compile-time int, got {step!r}",
                            "a dynamic loop's step is a positive constant")
    return int(step)


def _not_in_no_reorder(rt: Any, api: str) -> None:
    if getattr(rt, "no_reorder_depth", 0):
        raise rt.rule_error(api, "a register-bounded loop inside a `with nl.no_reorder():` block",
                            "nl.no_reorder blocks take static loops only (affine, sequential, static ranges)")


def dynamic_range(start, stop=None, step=1) -> Iterator[int]:
    """``for i in nl.dynamic_range(reg)``: a loop run on the device with bounds from registers (or ints)."""
    api = "nl.dynamic_range"
    rt = current()
    _not_in_no_reorder(rt, api)
    s = _step(rt, step, api)
    lo, hi = (0, _bound(start, api)) if stop is None else (_bound(start, api), _bound(stop, api))
    if rt.watching is not None:
        rt.watching.fail("a loop bounded by a register")
    return rt.loop("sequential", range(lo, hi, s))


def fori_loop(lower, upper, body_fun: Callable[[VirtualRegister], Any], step=1) -> None:
    """``body_fun(i)`` for ``i`` in ``range(lower, upper, step)``; ``i`` is a register holding the value."""
    _not_in_no_reorder(current(), "nl.fori_loop")
    for i in dynamic_range(lower, upper, step):
        body_fun(VirtualRegister(int(i)))


def while_loop(init, body_fun: Callable[[VirtualRegister], VirtualRegister]) -> None:
    """``r = init; while r != 0: r = body_fun(r)`` with registers; each body gets a copy of the condition."""
    api = "nl.while_loop"
    rt = current()
    _not_in_no_reorder(rt, api)
    reg = _register(rt, init, api, "init")
    if rt.watching is not None:
        rt.watching.fail("a loop bounded by a register")
    while _value(reg, api) != 0:
        for _ in rt.loop("sequential", range(1)):   # one frame per iteration: a trace loop of one step
            result = body_fun(VirtualRegister(reg.value))
        reg = _register(rt, result, api, "the body's result")


__all__ = ["VirtualRegister", "register_alloc", "register_move", "register_load", "register_store"]
LANGUAGE = ["dynamic_range", "fori_loop", "while_loop"]
