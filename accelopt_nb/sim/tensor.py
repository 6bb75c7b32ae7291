"""Opaque tensors and tile views.

Inside a kernel, tensors are handles: indexing gives a :class:`View` (a region, no data),
NKI APIs read and write through views, and any attempt to turn a handle into a NumPy array
raises :class:`OpaqueTensorError`. The data lives in ``_data``; validity of each element
(written, and not computed from unwritten memory) in ``_written`` (None = all valid); a new buffer keeps it
as the boxes written so far (``_cover``) until a question needs the per-element array.
"""
from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np
from math import prod as _prod

from accelopt_nb.errors import LoopCarriedDependencyError, OpaqueTensorError
from accelopt_nb.sim import dtypes as dt
from accelopt_nb.sim import effects, onchip
from accelopt_nb.sim import replay as _replay
from accelopt_nb.sim.conflicts import EMPTY, Box, Cover, WriteLog, box_of, mask_spans, masked_box
from accelopt_nb.sim.indexing import IndexExpr, Mask, basic_key, broadcast, compact, mask_all, mask_count
from accelopt_nb.sim.runtime import PMAX, Runtime, active, current
from accelopt_nb.sim.taint import plain
from accelopt_nb.sim.trace import Region, TensorInfo

_OPAQUE_RULE = OpaqueTensorError.rule


def _opaque(api: str):
    def method(self, *args, **kwargs):
        rt = current()
        raise rt.rule_error(api, f"cannot read tensor '{self_name(self)}' as host data inside a kernel",
                            _OPAQUE_RULE, OpaqueTensorError)
    return method


def self_name(x: Any) -> str:
    t = x.tensor if isinstance(x, View) else x
    return getattr(t, "name", "?")


class _Opaque:
    """Blocks every implicit conversion to host data."""

    __slots__ = ()
    __array_priority__ = 1000
    __array__ = _opaque("numpy conversion (__array__)")
    __array_interface__ = property(_opaque("numpy conversion (__array_interface__)"))
    __float__ = _opaque("float()")
    __int__ = _opaque("int()")
    __index__ = _opaque("index()")
    __bool__ = _opaque("bool()")
    __iter__ = _opaque("iteration")
    __len__ = _opaque("len()")
    tolist = _opaque("tolist()")
    item = _opaque("item()")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        rt = current()
        raise rt.rule_error(f"numpy.{ufunc.__name__}", f"NumPy ufunc {ufunc.__name__} cannot operate on NKI tensors "
                            "inside a kernel (use the nl/nisa equivalent)", _OPAQUE_RULE, OpaqueTensorError)

    def __array_function__(self, func, types, args, kwargs):
        rt = current()
        raise rt.rule_error(f"numpy.{func.__name__}",
                            f"NumPy function {func.__name__} cannot operate on NKI tensors inside a kernel",
                            _OPAQUE_RULE, OpaqueTensorError)

    # arithmetic operators map to nl element-wise ops (imported lazily: language imports us)
    def _binop(self, other, name, reverse=False):
        from accelopt_nb.sim import language as nl
        other_shape = getattr(other, "shape", None)
        if other_shape is not None and len(other_shape) >= 1 and len(self.shape) >= 1 and \
                1 in (self.shape[0], other_shape[0]) and self.shape[0] != other_shape[0]:
            raise current().rule_error(f"operator ({name})", f"operators do not broadcast along the partition axis "
                                       f"({tuple(self.shape)} with {tuple(other_shape)}); use nl.{name}(...) or "
                                       "nl.broadcast_to", "operator overloads do not broadcast over partitions")
        fn = getattr(nl, name)
        return fn(other, self) if reverse else fn(self, other)

    def __add__(self, o): return self._binop(o, "add")
    def __radd__(self, o): return self._binop(o, "add", True)
    def __sub__(self, o): return self._binop(o, "subtract")
    def __rsub__(self, o): return self._binop(o, "subtract", True)
    def __mul__(self, o): return self._binop(o, "multiply")
    def __rmul__(self, o): return self._binop(o, "multiply", True)
    def __truediv__(self, o): return self._binop(o, "divide")
    def __rtruediv__(self, o): return self._binop(o, "divide", True)
    def __pow__(self, o): return self._binop(o, "power")
    def __rpow__(self, o): return self._binop(o, "power", True)
    def __lt__(self, o): return self._binop(o, "less")
    def __le__(self, o): return self._binop(o, "less_equal")
    def __gt__(self, o): return self._binop(o, "greater")
    def __ge__(self, o): return self._binop(o, "greater_equal")
    def __and__(self, o): return self._binop(o, "bitwise_and")
    def __or__(self, o): return self._binop(o, "bitwise_or")
    def __xor__(self, o): return self._binop(o, "bitwise_xor")
    def __lshift__(self, o): return self._binop(o, "left_shift")
    def __rshift__(self, o): return self._binop(o, "right_shift")
    def __neg__(self):
        from accelopt_nb.sim import language as nl
        return nl.negative(self)

    def __invert__(self):
        from accelopt_nb.sim import language as nl
        return nl.invert(self)

    # tile methods
    def astype(self, dtype):
        from accelopt_nb.sim import language as nl
        return nl.copy(self, dtype=dtype)

    def broadcast_to(self, shape):
        from accelopt_nb.sim import language as nl
        return nl.broadcast_to(self, shape=shape)

    def expand_dims(self, axis):
        from accelopt_nb.sim import language as nl
        return nl.expand_dims(self, axis)

    def assert_shape(self, shape):
        if tuple(self.shape) != tuple(shape):
            raise current().rule_error("assert_shape", f"shape {tuple(self.shape)} != expected {tuple(shape)}",
                                       "tile shape assertion")
        return self

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return dt.itemsize(self.dtype)


class Tensor(_Opaque):
    """One allocation: an HBM tensor, an on-chip buffer, or a fresh API result tile."""

    __slots__ = ("id", "name", "buffer", "on_chip", "kind", "shape", "dtype", "par_axis", "_array", "_thunk", "_written",
                 "_stamps", "_raw", "_mask", "_producer", "_consumed", "_alloc_epoch", "_fast", "_lazy",
                 "_full", "_cover", "_borrowed", "__weakref__")

    def __init__(self, rt: Runtime, shape: tuple[int, ...], dtype: Any, buffer: str, kind: str,
                 name: str = "", par_axis: int = 0, data: np.ndarray | None = None,
                 written: np.ndarray | None | bool = False, raw: bool = False, borrowed: bool = False,
                 fill: Any = None) -> None:
        """``borrowed``: ``data`` is the caller's (read-only) array, copied before the first write into it;
        ``fill``: the value every element starts with (``data`` None), written."""
        tid = rt.new_tensor_id()
        self._setup(rt, tid, name, buffer, kind, shape, dtype, par_axis, raw, data, fill, written, borrowed)
        if data is None and type(written) is bool and rt.probes and rt.value_replay and kind != "result":
            # value replay: an allocation in a loop body is a recorded call (a new tensor each iteration)
            effects.note(allocated, tid, name, buffer, kind, self.shape, self.dtype, par_axis, raw, fill, written,
                         result=self)
        file, line = rt.location()
        rt.register_tensor(TensorInfo(id=self.id, name=self.name, buffer=buffer, kind=kind, shape=self.shape,
                                      dtype=dt.name(self.dtype), itemsize=dt.itemsize(self.dtype),
                                      par_axis=par_axis, alloc_index=len(rt.trace.instructions),
                                      loops=rt.loop_key, line=line))

    def _setup(self, rt: Runtime, tid: int, name: str, buffer: str, kind: str, shape: tuple[int, ...], dtype: Any,
               par_axis: int, raw: bool, data: np.ndarray | None, fill: Any, written: np.ndarray | None | bool,
               borrowed: bool) -> None:
        """Identity, memory and validity (everything but the trace record)."""
        self._thunk = None
        self.id = tid
        self.name = name or f"{kind}{tid}"
        self.buffer = buffer
        self.on_chip = buffer != "hbm"   # asked for every access: an attribute, set with the buffer
        self.kind = kind
        self.shape = tuple(map(int, shape))
        self.dtype = dt.canonical(dtype)
        self.par_axis = par_axis
        self._raw = raw
        self._mask = None
        self._producer = None
        self._consumed = False
        self._alloc_epoch = rt.epoch
        self._stamps = None
        self._fast = rt.options.fast_indexing
        self._lazy = False
        self._full: Region | None = None   # the whole view's region (buffers only, see full_view)
        self._borrowed = borrowed and data is not None
        trace_only = rt.options.trace_only
        if trace_only:
            self._data = None
        elif data is not None:
            self._data = data
        elif fill is not None and _positive_zero(fill):
            # nl.zeros (PSUM accumulators at full logical size): calloc'd pages read as zero, no pass over them
            self._data = np.zeros(self.shape, dtype=dt.storage(self.dtype))
        elif fill is not None:
            self._data = np.full(self.shape, fill, dtype=dt.storage(self.dtype))
        elif written is False and buffer != "hbm" and self._fast:
            # an on-chip buffer is written before it is read: unwritten elements read as the fill value
            # (see _fill_unwritten) instead of being filled up front, a pass over all of its memory
            # memory a finished launch used; a buffer of a loop body dies with its iteration (frees its own)
            self._data = onchip.take(self.shape, dt.storage(self.dtype), None if rt.loops else rt.onchip)
            self._lazy = True
        elif written is False and self._fast:
            # an HBM tensor: likewise, and what stays unwritten in an output is painted at the end (``paint_unwritten``)
            self._data = np.empty(self.shape, dtype=dt.storage(self.dtype))
            self._lazy = True
        else:
            self._data = np.full(self.shape, dt.nan_fill(self.dtype), dtype=dt.storage(self.dtype))
        if rt.value_replay and self._array is not None and kind != "result":   # value replay's roots
            root = effects.root(self._array)
            rt.roots[id(root)] = root
        self._cover: Cover | None = None
        if written is True or trace_only:
            self._written = None
        elif written is False and self._fast:
            self._written, self._cover = None, Cover()
        elif written is False:
            self._written = np.zeros(self.shape, dtype=bool)
        else:
            self._written = written

    def __repr__(self) -> str:
        return f"<nki tensor {self.name} {self.shape} {dt.name(self.dtype)} in {self.buffer}>"

    # The values, computed first if they were deferred (see ``defer``).
    @property
    def _data(self) -> np.ndarray | None:
        if self._thunk is not None:
            self._compute()
        return self._array

    @_data.setter
    def _data(self, value: np.ndarray | None) -> None:
        self._array = value

    def _compute(self, out: np.ndarray | None = None, box: tuple[slice, ...] | None = None) -> None:
        """Compute deferred values (see ``defer``), or compute them into ``out``, where the tile was assigned
        whole (or, with ``box``, into the destination of the box its ``boxed_into`` thunk computes): then the
        tile copies them from there before that memory changes or when it is read."""
        (fn, *args), self._thunk = self._thunk, None
        if box is not None:   # boxed_into's own thunk, computed straight into the box's destination
            fn, args = args[2], args[3:]
        rt = active()
        if rt is not None and rt.deferred is not None and rt.deferred() is self:
            rt.deferred = None
        with np.errstate(all="ignore"):
            values = effects.run(fn, out, *args)
        if out is None:
            self._array = values
        else:
            defer(self, (copy_of, out) if box is None else (boxed_into, self.shape, box, copy_of, out))

    def own(self) -> None:
        """Copy borrowed data before it changes (kernel inputs are the caller's arrays until written)."""
        if self._borrowed:
            effects.fail("a kernel input was first written inside the loop")
            self._data = self._data.copy()
            self._borrowed = False
            rt = active()
            if rt is not None and rt.value_replay:
                rt.roots[id(self._array)] = self._array

    def full_view(self) -> "View":
        shape = (self.shape[0], 1) if self.on_chip and len(self.shape) == 1 else self.shape  # as View() shapes it
        view = View.known(self, tuple([slice(0, s, 1) for s in self.shape]), shape)
        # a buffer keeps its whole region (the simulator reads it often and it never changes), not the view:
        # a tensor <-> view reference cycle would keep the data alive until the garbage collector runs
        if self.kind != "result":
            if self._full is None:
                self._full = view.region()
            view._region = self._full
        return view

    def tile_region(self, mask: Any = None) -> Region:
        """``full_view().region(mask)`` of a result tile, without making the view: the write region of the
        instruction that produces the tile (fresh, so never hidden from the trace: see ``View.region``)."""
        if self.kind != "result" or len(self.shape) < 2:
            return self.full_view().region(mask)
        return _region(self, (0,) * len(self.shape), self.shape, self.shape, mask, None)

    def __getitem__(self, key: Any) -> "View":
        view = self._view(key)
        rt = _replay.probing()
        if rt is not None:  # trace-only loop replay: this key's ints and slices must stay in bounds
            _replay.note_key(rt, view.key, self.shape)
        return view

    def _view(self, key: Any) -> "View":
        if self._fast and type(key) is tuple:
            view = _compiler_view(self, key)
            if view is not None:
                return view
        if isinstance(key, (Tensor, View)) or (isinstance(key, tuple) and any(isinstance(k, (Tensor, View)) for k in key)):
            return _indirect_view(self, key)
        affs: dict[int, Any] = {}
        return View(self, normalize_key(self, key, affs), affs)

    def __setitem__(self, key: Any, value: Any) -> None:
        assign(self[key], value)

    def __iadd__(self, other: Any) -> "Tensor":
        accumulate(self.full_view(), other)
        return self

    def reshape(self, shape):
        """A reshaped alias of the same memory (``tensor.reshape``)."""
        shape = tuple(int(s) for s in shape)
        if int(_prod(shape)) != int(_prod(self.shape)):
            raise current().rule_error("reshape", f"cannot reshape {self.shape} into {shape}", "reshape keeps size")
        return _Alias(self, shape)


def allocated(tid: int, name: str, buffer: str, kind: str, shape: tuple[int, ...], dtype: Any, par_axis: int,
              raw: bool, fill: Any, written: bool) -> Tensor:
    """A tensor allocated in a replayed loop iteration (``effects``): memory and validity as ``Tensor()`` sets
    them up; its trace record and id counter are extrapolated with the trace."""
    t = Tensor.__new__(Tensor)
    t._setup(current(), tid, name, buffer, kind, shape, dtype, par_axis, raw, None, fill, written, False)
    return t


class _Alias(Tensor):
    """A reshape of an existing tensor: shares data, validity and identity for the trace."""

    __slots__ = ()

    def __init__(self, base: Tensor, shape: tuple[int, ...]) -> None:  # noqa: D401 - no super().__init__
        self._thunk = None
        self.id = base.id
        self.name = base.name
        self.buffer = base.buffer
        self.on_chip = base.on_chip
        self.kind = base.kind
        self.shape = shape
        self.dtype = base.dtype
        self.par_axis = base.par_axis if base.on_chip else 0
        self._raw = base._raw
        self._mask = None
        self._producer = None
        self._consumed = True
        self._alloc_epoch = base._alloc_epoch
        self._stamps = None
        self._fast = base._fast
        self._lazy = base._lazy
        self._full = None
        base.own()  # writes through the alias reach the base's memory
        self._borrowed = False
        self._data = None if base._data is None else base._data.reshape(shape)
        _materialize(base)  # the alias shares the per-element validity
        self._cover = None
        self._written = None if base._written is None else base._written.reshape(shape)


# ---- keys ------------------------------------------------------------------------------
def normalize_key(t: Tensor, key: Any, affs: dict[int, Any] | None = None) -> tuple:
    """The key as ints, in-bounds slices and int64 arrays; ``affs`` collects each array's ``IndexExpr.aff``."""
    if not isinstance(key, tuple):
        key = (key,)
    ndim = len(t.shape)
    out: list[Any] = []
    n_ellipsis = sum(1 for k in key if k is Ellipsis)
    for k in key:
        if k is Ellipsis:
            out.extend([slice(None)] * (ndim - (len(key) - n_ellipsis)))
            continue
        out.append(k)
    if len(out) > ndim:
        raise current().rule_error("indexing", f"too many indices ({len(out)}) for tensor '{t.name}' of shape {t.shape}",
                                   "index count must not exceed tensor rank")
    out.extend([slice(None)] * (ndim - len(out)))
    norm: list[Any] = []
    has_array = False
    for axis, k in enumerate(out):
        size = t.shape[axis]
        if isinstance(k, IndexExpr):
            norm.append(k.values)
            has_array = True
            if affs is not None:
                affs[axis] = k.aff
        elif isinstance(k, slice):
            start, stop, step = k.start, k.stop, k.step
            start = 0 if start is None else int(start)
            stop = size if stop is None else int(stop)
            step = 1 if step is None else int(step)
            if start < 0 or stop > size or start > stop:
                raise current().rule_error("indexing", f"slice {start}:{stop} out of bounds for axis {axis} "
                                           f"of '{t.name}' with size {size}", "indices must be within bounds")
            norm.append(slice(start, stop, step))
        elif isinstance(k, (int, np.integer)):
            k = int(k)
            if k < 0 or k >= size:
                raise current().rule_error("indexing", f"index {k} out of bounds for axis {axis} of '{t.name}' "
                                           f"with size {size}", "indices must be within bounds")
            norm.append(k)
        elif isinstance(k, Tensor) or isinstance(k, View):
            raise current().rule_error("indexing", f"a tile cannot index on-chip tensor '{t.name}'; indirect "
                                       "(tile-valued) indices address HBM tensors in nl.load/nl.store/dma_copy",
                                       "indirect indexing is a DMA feature")
        elif k is None:
            raise current().rule_error("indexing", "None (newaxis) cannot index an NKI tensor",
                                       "supported indices: ints, slices, nl.arange expressions")
        else:
            raise current().rule_error("indexing", f"unsupported index {k!r} of type {type(k).__name__}",
                                       "supported indices: ints, slices, nl.arange expressions")
    if has_array and any(isinstance(k, slice) and not (k.start == 0 and k.stop == t.shape[i] and k.step == 1)
                         for i, k in enumerate(norm)):
        raise current().rule_error("indexing", "mixing basic (slice) and advanced (nl.arange) indexing in one index",
                                   "do not mix slices with arange index expressions")
    if has_array and any(isinstance(k, slice) for k in norm):
        if affs is not None:
            affs.update((i, (0, 1)) for i, k in enumerate(norm) if isinstance(k, slice))
        norm = _full_slices_to_arrays(t, norm)
    return tuple(norm)


def _full_slices_to_arrays(t: Tensor, norm: list[Any]) -> list[Any]:
    """Full slices next to arange indices address whole axes: give each its own trailing axis."""
    nd = max(k.ndim for k in norm if isinstance(k, np.ndarray))
    n_sl = sum(isinstance(k, slice) for k in norm)
    total = nd + n_sl
    out: list[Any] = []
    j = 0
    for axis, k in enumerate(norm):
        if isinstance(k, slice):
            shape = [1] * total
            shape[nd + j] = t.shape[axis]
            j += 1
            out.append(np.arange(t.shape[axis], dtype=np.int64).reshape(shape))
        elif isinstance(k, np.ndarray):
            out.append(k.reshape((1,) * (nd - k.ndim) + k.shape + (1,) * n_sl))
        else:
            out.append(k)
    return out


_UNSET = object()


# ---- compiler-style keys ---------------------------------------------------------------
# Compiler-style kernels index every axis with an int (a loop variable) or an affine nl.arange expression
# (``t[i, j, nl.arange(128)[:, None], 512 * k + nl.arange(512)[None, :]]``), thousands of times from one
# source line. The key's structure (which axes take ints, the shapes of the expressions) fixes the view's
# shape and the layout of its basic key; only the ints and each expression's (start, step) change between
# iterations. A plan per structure turns such a key into the View the general path builds (same key, shape
# and basic key) with a bounds check per axis; anything else (slices, gathers, out-of-bounds indices that
# a mask may excuse, errors) takes the general path.

_PLANS: dict[tuple, tuple | None] = {}   # (tensor shape, on chip, key structure) -> (sizes, view shape) | None


def _plan(shape: tuple[int, ...], on_chip: bool, sig: tuple) -> tuple | None:
    """Per axis None (an int) or the expression's element count; and the view shape. None: no plan."""
    arrays = [s for s in sig if s is not None]
    nd = max(len(s) for s in arrays)
    try:
        bshape = _broadcast_shapes(arrays)
    except ValueError:
        return None
    sizes: list[int | None] = []
    last_axis = -1
    for s in sig:
        if s is None:
            sizes.append(None)
            continue
        n = int(_prod(s))
        varying = [d for d, m in enumerate(s) if m > 1]
        if n == 0 or len(varying) > 1:
            return None
        if n > 1:  # one varying axis, in the order of the tensor's axes (else a transposed access: no box)
            axis = nd - len(s) + varying[0]
            if axis <= last_axis:
                return None
            last_axis = axis
        sizes.append(n)
    vshape = tuple(map(int, bshape))
    if on_chip and len(vshape) == 1:
        vshape = (vshape[0], 1)
    return tuple(sizes), vshape


def _compiler_view(t: Tensor, key: tuple) -> "View | None":
    """``t[key]`` for a compiler-style key through its plan, or None (then the general path decides)."""
    shape = t.shape
    if len(key) != len(shape):
        return None
    sig = []
    for k in key:
        if type(k) is IndexExpr:
            if k.aff is None:
                return None
            sig.append(k.values.shape)
        elif isinstance(k, (int, np.integer)):
            sig.append(None)
        else:
            return None
    plan_key = (shape, t.buffer != "hbm", tuple(sig))
    try:
        plan = _PLANS[plan_key]
    except KeyError:
        if len(_PLANS) >= 4096:  # one entry per tensor shape and key structure: stays small in practice
            _PLANS.clear()
        has_array = any(s is not None for s in sig)
        plan = _PLANS[plan_key] = _plan(shape, t.buffer != "hbm", plan_key[2]) if has_array else None
    if plan is None:
        return None
    sizes, vshape = plan
    norm: list[Any] = []
    basic: list[Any] = []
    lo: list[int] = []   # the region's box, known here at no extra pass
    hi: list[int] = []
    affs: dict[int, Any] = {}
    axis = 0
    for k, size, n in zip(key, shape, sizes):
        if n is None:   # an int (a loop variable's plain value is the int itself)
            if type(k) is not int:
                k = plain(k) if isinstance(k, int) else int(k)
            if k < 0 or k >= size:
                return None
            norm.append(k)
            basic.append(k)
            lo.append(k)
            hi.append(k + 1)
        else:
            aff = affs[axis] = k.aff
            start, step = aff
            norm.append(k.values)
            if n == 1:
                if start < 0 or start >= size:
                    return None
                basic.append(start)
                lo.append(start)
                hi.append(start + 1)
            else:
                last = start + step * (n - 1)
                if step <= 0 or start < 0 or last >= size:
                    return None
                basic.append(slice(start, last + 1, step))
                lo.append(start)
                hi.append(last + 1)
        axis += 1
    return View.planned(t, tuple(norm), vshape, tuple(basic), affs, (lo, hi))


def _broadcast_shapes(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
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


def _selects_first(k: Any) -> bool:
    """Whether an index picks exactly element 0 of a size-1 axis."""
    if isinstance(k, (int, np.integer)):
        return int(k) == 0
    if isinstance(k, slice):
        return (k.start in (None, 0)) and (k.stop is None or int(k.stop) >= 1) and k.step in (None, 1)
    if isinstance(k, IndexExpr):
        return bool(k.values.size) and not k.values.any()
    return False


def _indirect_view(t: Tensor, key: Any) -> "View":
    """``hbm[idx_tile, iy]``: the index tile's values (read when the view is made, as the DMA engine
    reads them) address the HBM tensor; the view remembers the index tiles for the trace."""
    from accelopt_nb.errors import UninitializedReadError
    rt = current()
    key = key if isinstance(key, tuple) else (key,)
    if t.on_chip:
        normalize_key(t, key)   # raises the on-chip message
    with_exprs = any(isinstance(k, IndexExpr) for k in key)
    resolved, tiles = [], []
    for k in key:
        if not isinstance(k, (Tensor, View)):
            resolved.append(k)
            continue
        v = k.full_view() if isinstance(k, Tensor) else k
        if not v.tensor.on_chip or dt.is_float(v.tensor.dtype):
            raise rt.rule_error("indirect DMA", f"index tile '{v.tensor.name}' must be an integer SBUF tile, got "
                                f"{dt.name(v.tensor.dtype)} in {v.tensor.buffer.upper()}", "indirect indices are int SBUF tiles")
        data, written = read(v, None, "indirect DMA")
        if written is not None and rt.options.check_uninitialized and not written.all():
            raise rt.rule_error("indirect DMA", f"index tile '{v.tensor.name}' has never-written elements",
                                UninitializedReadError.rule, UninitializedReadError)
        vals = np.zeros(v.shape, np.int64) if data is None else np.asarray(data).astype(np.int64)
        if not with_exprs and vals.ndim == 2 and vals.shape[1] == 1:
            vals = vals[:, 0]       # next to slices: one index per partition, the slices keep their axes
        resolved.append(IndexExpr(vals))
        tiles.append(v)
    view = View(t, normalize_key(t, tuple(resolved)))
    view.indirect = tuple(tiles)
    return view


def _region(t: Tensor, lo: Any, hi: Any, shape: tuple[int, ...], mask: Any, spans: list | None) -> Region:
    """The trace region of the box [lo, hi) of ``t`` accessed by a view of ``shape`` (only where ``mask``);
    ``spans``: the (lo, hi, size) of its index arrays before they were clamped to the tensor, if any was."""
    elements = mask_count(mask, shape) if mask is not None else (int(_prod(shape)) if shape else 1)
    block = 0
    for i in range(t.par_axis):  # row-major flat index of the block, or -1 when it spans several
        if hi[i] - lo[i] != 1:
            block = -1
            break
        block = block * t.shape[i] + lo[i]
    reg = Region(t.id, t.buffer, tuple(lo), tuple(hi), elements, dt.itemsize(t.dtype), block)
    rt = _replay.probing()
    if rt is not None:  # trace-only loop replay checks extrapolated regions against this shape
        _replay.note_region(rt, reg, t.shape, spans)
    return reg


class View(_Opaque):
    """A region of a tensor, produced by indexing. Holds no data."""

    __slots__ = ("tensor", "key", "shape", "advanced", "_region", "_accum_pending", "_basic", "_affs", "indirect",
                 "_box")

    def __init__(self, tensor: Tensor, key: tuple, affs: dict[int, Any] | None = None) -> None:
        self.tensor = tensor
        self.key = key
        arrays = [k.shape for k in key if isinstance(k, np.ndarray)]
        self.indirect: tuple = ()    # index tiles of an indirect (gather/scatter) DMA view
        self.advanced = bool(arrays)
        self._region = None
        self._basic: Any = _UNSET
        self._affs = affs
        self._accum_pending = False
        self._box: tuple[list[int], list[int]] | None = None   # the region's (lo, hi) when a key plan knew it
        if self.advanced:
            shape = _broadcast_shapes(arrays)
        else:
            shape = []
            for k, size in zip(key, tensor.shape):
                if isinstance(k, slice):
                    shape.append(len(range(k.start, k.stop, k.step)))
            shape = tuple(shape)
        if tensor.on_chip and len(shape) == 1:
            shape = (shape[0], 1)  # a 1-D on-chip access keeps its partition axis: treat as [P, 1]
        self.shape = tuple(int(s) for s in shape)

    @classmethod
    def planned(cls, tensor: Tensor, key: tuple, shape: tuple[int, ...], basic: tuple, affs: dict[int, Any],
                box: tuple[list[int], list[int]]) -> "View":
        """An advanced view whose shape, basic key and region box a key plan already knows (``_compiler_view``)."""
        return cls.known(tensor, key, shape, True, basic, affs, box)

    @classmethod
    def known(cls, tensor: Tensor, key: tuple, shape: tuple[int, ...], advanced: bool = False, basic: Any = None,
              affs: dict[int, Any] | None = None, box: tuple[list[int], list[int]] | None = None) -> "View":
        """A view whose shape (and, for an advanced key, basic key and box) the caller knows: ``View()``
        would derive the same from ``key``, one pass per view, many views per instruction."""
        self = cls.__new__(cls)
        self.tensor = tensor
        self.key = key
        self.indirect = ()
        self.advanced = advanced
        self._region = None
        self._basic = basic
        self._affs = affs
        self._accum_pending = False
        self._box = box
        self.shape = shape
        return self

    @property
    def basic(self) -> tuple | None:
        """For an advanced view, the basic key reaching the same elements as a NumPy view (or None).

        Only the data path uses it; shape, regions and indexing rules stay those of ``key``.
        """
        if self._basic is _UNSET:
            self._basic = (basic_key(self.key, self.tensor.shape, self._affs)
                           if self.advanced and self.tensor._fast else None)
        return self._basic

    @property
    def dtype(self):
        return self.tensor.dtype

    @property
    def buffer(self) -> str:
        return self.tensor.buffer

    @property
    def name(self) -> str:
        return self.tensor.name

    def __repr__(self) -> str:
        return f"<nki view of {self.tensor.name} {self.shape}>"

    def __getitem__(self, key: Any) -> "View":
        if self.advanced:
            raise current().rule_error("indexing", "cannot index again a view that was indexed with nl.arange",
                                       "nested indexing only on slice/int views")
        if not isinstance(key, tuple):
            key = (key,)
        # map the new key onto the remaining (sliced) axes of the base tensor
        sliced_axes = [i for i, k in enumerate(self.key) if isinstance(k, slice)]
        if any(self.key[i].step != 1 for i in sliced_axes):
            raise current().rule_error("indexing", "cannot index again a strided view", "nested indexing")
        base_key: list[Any] = list(self.key)
        expanded = list(key)
        if any(k is Ellipsis for k in expanded):
            i = expanded.index(Ellipsis)
            expanded[i:i + 1] = [slice(None)] * (len(sliced_axes) - (len(expanded) - 1))
        if len(expanded) == len(sliced_axes) + 1 and self.tensor.on_chip and self.shape[1:] == (1,) \
                and _selects_first(expanded[-1]):
            expanded.pop()   # t[:, i] is a [P, 1] tile: its free axis may be indexed with 0
        if len(expanded) > len(sliced_axes):
            raise current().rule_error("indexing", f"too many indices for view of shape {self.shape}",
                                       "index count must not exceed tile rank")
        rt = _replay.probing()
        if rt is not None:  # trace-only loop replay: the view-relative bounds checked below
            _replay.note_view_key(rt, expanded, [self.key[a].stop - self.key[a].start for a in sliced_axes])
        for axis, k in zip(sliced_axes, expanded):
            base = self.key[axis]
            length = base.stop - base.start
            if isinstance(k, slice):
                s0 = 0 if k.start is None else int(k.start)
                s1 = length if k.stop is None else int(k.stop)
                if s0 < 0 or s1 > length or s0 > s1:
                    raise current().rule_error("indexing", f"slice {s0}:{s1} out of bounds for view axis of size {length}",
                                               "indices must be within bounds")
                base_key[axis] = slice(base.start + s0, base.start + s1, 1 if k.step is None else int(k.step))
            elif isinstance(k, (int, np.integer)):
                if not 0 <= int(k) < length:
                    raise current().rule_error("indexing", f"index {k} out of bounds for view axis of size {length}",
                                               "indices must be within bounds")
                base_key[axis] = base.start + int(k)
            elif isinstance(k, IndexExpr):
                base_key[axis] = k + base.start
            else:
                raise current().rule_error("indexing", f"unsupported index {k!r}", "supported indices")
        return self.tensor[tuple(IndexExpr(k) if isinstance(k, np.ndarray) else k for k in base_key)]

    def __setitem__(self, key: Any, value: Any) -> None:
        assign(self[key], value)

    def __iadd__(self, other: Any) -> "View":
        accumulate(self, other)
        self._accum_pending = True  # the trailing __setitem__ of `t[i] += x` must not copy again
        return self

    def reshape(self, shape):
        raise current().rule_error("reshape", "reshape a whole tensor, not an indexed view", "reshape on tensors")

    # ---- trace region ----------------------------------------------------------------
    def region(self, mask: Any = None) -> Region:
        t = self.tensor
        if t.kind == "result":   # an instruction reads or writes the tile after all: back in the trace
            rt = current()
            if rt.hidden:
                rt.unhide(t.id)
        if mask is None and self._region is not None:
            return self._region
        clamped = False   # a key plan's box is in bounds by construction
        spans: list[tuple[int, int, int]] = []   # (lo, hi, size) of the index arrays before clamping
        if self._box is not None:
            lo, hi = self._box
            key: tuple = ()
        else:
            lo, hi = [], []
            # an affine arange key spans the same box as its basic equivalent
            key = self.key
            if self.advanced:
                basic = self.basic
                if basic is not None:
                    key = basic
        for k, size in zip(key, t.shape):
            kind = type(k)
            if kind is int:
                lo.append(k)
                hi.append(k + 1)
            elif kind is slice:
                lo.append(k.start)
                hi.append(max(k.start, k.stop))
            elif isinstance(k, np.ndarray):
                a0 = int(k.min()) if k.size else 0
                a1 = int(k.max()) + 1 if k.size else 0
                lo.append(min(max(a0, 0), size))
                hi.append(min(max(a1, 0), size))
                clamped = clamped or not 0 <= a0 <= a1 <= size
                spans.append((a0, a1, size))
            else:
                lo.append(k)
                hi.append(k + 1)
        reg = _region(t, lo, hi, self.shape, mask, spans if clamped else None)
        if mask is None:
            self._region = reg
        return reg

    def contiguous_bytes(self) -> int:
        """Length of the innermost contiguous run in memory (for DMA efficiency)."""
        t = self.tensor
        run = dt.itemsize(t.dtype)
        # an affine arange key has the runs of its basic equivalent (a single index reads as an int)
        key = self.basic if self.advanced and self.basic is not None else self.key
        for axis in range(len(t.shape) - 1, -1, -1):
            k = key[axis]
            if isinstance(k, slice):
                if k.step != 1:
                    break
                n = k.stop - k.start
                run *= n
                if n != t.shape[axis]:
                    break
            elif isinstance(k, np.ndarray):
                aff = self._affs.get(axis) if self._affs else None
                if aff is not None:  # start + step * i along its only long axis: no need to sort the values
                    n = k.size if aff[1] != 0 else min(k.size, 1)
                    adjacent = abs(aff[1]) == 1
                else:
                    flat = np.unique(compact(k))   # a broadcast index array's distinct values, without repeats
                    n = flat.size
                    adjacent = bool(np.all(np.diff(flat) == 1))
                if n > 1 and adjacent:
                    run *= n
                    if n != t.shape[axis]:
                        break
                else:
                    break
            else:
                break
        return run

    # ---- block structure ---------------------------------------------------------------
    def check_tile(self, api: str) -> None:
        """On-chip operands must be tiles: block dims indexed by scalars, P <= 128."""
        t = self.tensor
        if t.on_chip and t.par_axis:
            for i in range(t.par_axis):
                k = self.key[i]
                if isinstance(k, slice) and k.stop - k.start != 1:
                    raise current().rule_error(api, f"operand '{t.name}' still has block dimensions {self.shape}; "
                                               "index the block dimensions with loop variables to get a tile",
                                               "compute APIs take tiles (partition axis first)")
        if self.shape and self.shape[0] > PMAX:
            raise current().rule_error(api, f"partition dimension {self.shape[0]} of '{t.name}' exceeds the "
                                       f"architecture limit of {PMAX}", "partition dim <= 128")


# ---- data access -------------------------------------------------------------------------
def _full_arrays(view: View, shape: tuple[int, ...]) -> list[np.ndarray]:
    return [broadcast(k, shape) if isinstance(k, np.ndarray) else np.full(shape, k, dtype=np.int64)
            for k in view.key]


def _check_bounds(view: View, arrays: list[np.ndarray] | None = None, api: str = "indexing") -> None:
    t = view.tensor
    keys = arrays if arrays is not None else view.key
    for axis, k in enumerate(keys):
        if isinstance(k, np.ndarray) and k.size:
            lo, hi = int(k.min()), int(k.max())
            if lo < 0 or hi >= t.shape[axis]:
                raise current().rule_error(api, f"index {hi if hi >= t.shape[axis] else lo} out of bounds for axis "
                                           f"{axis} of '{t.name}' with size {t.shape[axis]} (mask the ragged tile)",
                                           "indices must be within bounds")


def _np_key(view: View) -> tuple:
    return tuple(view.key)


def read(view: View, mask: np.ndarray | None, api: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Gather a view's data (rounded to its dtype) and validity. Returns (data, written)."""
    t = view.tensor
    if t._data is None:
        return None, None
    shape = view.shape
    basic = view.basic
    if basic is not None:
        data, written = _read_basic(t, basic, _adv_shape(view), mask)
    elif view.advanced and (kept := _kept_basic(view, mask)) is not None:
        data, written = _read_kept(t, kept, _adv_shape(view))
    elif view.advanced:
        if mask is not None:
            m = broadcast(mask, _adv_shape(view))
            arrays = [np.where(m, a, 0) for a in _full_arrays(view, m.shape)]
            _check_bounds(view, arrays, api)
            key = tuple(arrays)
        else:
            _check_bounds(view, None, api)
            key = _np_key(view)
        data = t._data[key]
        written = _validity(t, key)
        data = _fill_unwritten(t, data, written)
    else:
        key = _np_key(view)
        data = t._data[key]
        written = _validity(t, key)
        if written is not None and written.all():
            written = None
        data = _fill_unwritten(t, data, written)
    if data.shape != shape:
        data = data.reshape(shape)
        if written is not None:
            written = written.reshape(shape)
    if t._raw:
        data = dt.cast(data, t.dtype)
    if written is not None:
        if mask is not None:
            written = written | ~broadcast(mask, shape)
        if written.all():
            written = None
    return data, written


def _read_basic(t: Tensor, basic: tuple, adv_shape: tuple[int, ...],
                mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """``read`` of an advanced view through its equivalent basic key (a view instead of a gather)."""
    data = t._data[basic]
    written = _validity(t, basic)
    if written is not None and written.all():
        written = None  # all valid: nothing to fill, and no validity to carry (what read() would conclude)
    m = None if mask is None else broadcast(mask, adv_shape)
    if m is not None and mask_all(m):
        m = None
    if m is None or written is None or np.any(m.reshape(written.shape) & ~written):
        data = _fill_unwritten(t, data, written)
    # else every unwritten element is masked off, and so replaced next (a ragged tile read with its mask)
    if m is not None:
        # the general path reads masked-off elements at index 0 of every axis: same values here
        origin = (slice(0, 1, 1),) * t._data.ndim   # a view, so value replay reads it at each iteration
        fill = _fill_unwritten(t, t._data[origin], _validity(t, origin))
        keep = m if m.shape == data.shape else m.reshape(data.shape)   # the mask itself: its spans are kept
        local = _local_box(keep)
        if local is not None:   # a ragged tile's mask keeps a box: copy it, fill the rest, no pass over the mask
            data = effects.run(_kept_copy, data.shape, data.dtype, fill, local, data[local])
        else:
            data = effects.run(_masked_copy, data, fill, keep)
    if written is not None:
        written = written.copy()  # the general path's gather never aliased the tensor's validity
    return data, written


def _masked_copy(data: np.ndarray, fill: np.ndarray, keep: np.ndarray) -> np.ndarray:
    out = data.copy()
    np.copyto(out, fill.reshape(()), where=~keep)
    return out


def _local_box(keep: np.ndarray) -> tuple[slice, ...] | None:
    """The slices of the box a mask keeps (of its own shape); None when it keeps no box or nothing."""
    spans = mask_spans(keep)
    if spans is None or spans is EMPTY:
        return None
    return tuple(slice(first, last + 1) for first, last in spans)


def _fill_outside(out: np.ndarray, value: np.ndarray, local: tuple[slice, ...]) -> None:
    """Set every element of ``out`` outside the box ``local`` to ``value``: per axis, the slabs before
    and after the box's span, within the box's span on the axes before it."""
    inside: list[slice] = []
    for d, span in enumerate(local):
        if span.start > 0:
            out[(*inside, slice(0, span.start))] = value
        if span.stop < out.shape[d]:
            out[(*inside, slice(span.stop, None))] = value
        inside.append(span)


def _kept_basic(view: View, mask: np.ndarray | None) -> tuple[tuple, tuple[slice, ...]] | None:
    """For an advanced view with no basic key (a ragged tile's key runs past its tensor), the basic key of
    the box its mask keeps and that box's slices of the view; EMPTY's slices are empty. None: no such box.

    The general path gathers the kept elements (and checks they are in bounds); the box reaches the same
    elements in the same order as a NumPy view.
    """
    if mask is None or view.basic is not None or view.indirect or not view.tensor._fast:
        return None
    adv_shape = _adv_shape(view)
    box = masked_box(tuple(slice(0, n, 1) for n in adv_shape), broadcast(mask, adv_shape))
    if box is None:
        return None
    if box is EMPTY:
        return (), tuple(slice(0, 0) for _ in adv_shape)
    sub = tuple(slice(lo, hi) for lo, hi, _ in box)
    nd = len(adv_shape)
    keys = []
    for k in view.key:
        if isinstance(k, np.ndarray):  # right-aligned against the view: slice the axes it varies along
            k = k[tuple(sub[nd - k.ndim + d] if n > 1 else slice(None) for d, n in enumerate(k.shape))]
        keys.append(k)
    basic = basic_key(tuple(keys), view.tensor.shape)
    return None if basic is None else (basic, sub)


def _read_kept(t: Tensor, kept: tuple[tuple, tuple[slice, ...]],
               adv_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray | None]:
    """``read`` of a masked view through the kept box (see ``_kept_basic``); masked-off elements read as
    index 0 of every axis, as the general path's gather reads them."""
    basic, sub = kept
    origin = (slice(0, 1, 1),) * t._data.ndim   # a view, so value replay reads it at each iteration
    fill = _fill_unwritten(t, t._data[origin], _validity(t, origin))
    if not basic:
        return effects.run(_filled, adv_shape, t._data.dtype, fill), None
    w = _validity(t, basic)
    data = effects.run(_kept_copy, adv_shape, t._data.dtype, fill, sub, _fill_unwritten(t, t._data[basic], w))
    if w is None or w.all():
        return data, None
    written = np.ones(adv_shape, dtype=bool)
    part = written[sub]
    part[...] = w.reshape(part.shape)
    return data, written


def _filled(shape: tuple[int, ...], dtype: np.dtype, fill: np.ndarray) -> np.ndarray:
    out = np.empty(shape, dtype=dtype)
    out[...] = fill.reshape(())
    return out


def _kept_copy(shape: tuple[int, ...], dtype: np.dtype, fill: np.ndarray, sub: tuple[slice, ...],
               part: np.ndarray) -> np.ndarray:
    out = np.empty(shape, dtype=dtype)
    dst = out[sub]
    dst[...] = part.reshape(dst.shape)
    _fill_outside(out, fill.reshape(()), sub)
    return out


def _validity(t: Tensor, key: tuple) -> np.ndarray | None:
    """``t._written[key]``, or None when every element there is valid."""
    if t._cover is not None:
        box = _box(key)
        if box is not None:
            if t._cover.covers(box):
                effects.note(effects.guard_covered, t, box)
                return None
            local = t._cover.local(box)  # e.g. a ragged tile: painted for this box alone
            if local is not None:
                effects.note(effects.guard_local, t, box, local)
                return local.reshape(tuple(n for k, n in zip(key, local.shape) if type(k) is slice))
        _materialize(t)
    if t._written is None:
        return None
    effects.fail("validity kept per element")
    return t._written[key]


def _mark_written(t: Tensor, key: tuple, written: np.ndarray | None) -> None:
    """``t._written[key] = written`` (None: all valid)."""
    if t._cover is not None:
        if written is not None and written.all():
            written = None
        box = _box(key) if written is None else None
        if box is not None:
            effects.run(effects.cover_add, t, box)
            return
        _materialize(t)
    if t._written is not None:
        effects.fail("validity kept per element")
        t._written[key] = True if written is None else written


def _box(key: tuple) -> Box | None:
    """The box of a basic key of ints and slices; None for anything else (arrays, empty slices)."""
    for k in key:
        if type(k) is not int and type(k) is not slice:
            return None
    return box_of(key)


def _materialize(t: Tensor) -> None:
    """Switch a tensor's validity from written boxes to the per-element array."""
    if t._cover is not None:
        effects.fail("validity switched to per-element")
        t._written, t._cover = t._cover.mask(t.shape), None


def _fill_unwritten(t: Tensor, data: Any, written: Any) -> Any:
    """Data as a NaN-filled (ints: 4) buffer would hold it: a lazily allocated tensor's unwritten elements
    read as the fill value."""
    if not t._lazy or written is None or np.all(written):
        return data
    return effects.run(_where_written, written, data, dt.nan_fill(t.dtype))


def paint_unwritten(t: Tensor) -> None:
    """Give a lazily allocated tensor's never-written elements the fill value in memory (a kernel's outputs,
    handed back as arrays: unwritten elements must stand out there too)."""
    if not t._lazy or t._array is None:
        return
    if t._cover is not None:
        if t._cover.complete(t.shape):
            return
        written = t._cover.mask(t.shape)
    elif t._written is not None:
        written = t._written
    else:
        return
    np.copyto(t._array, dt.nan_fill(t.dtype), where=~written, casting="unsafe")


def _where_written(written: np.ndarray, data: np.ndarray, fill: Any) -> np.ndarray:
    return np.where(written, data, np.asarray(fill).astype(data.dtype))


def _adv_shape(view: View) -> tuple[int, ...]:
    return _broadcast_shapes([k.shape for k in view.key if isinstance(k, np.ndarray)])


def write(view: View, values: np.ndarray | None, written: np.ndarray | None, mask: np.ndarray | None,
          api: str, accumulate: bool = False, reduction: bool = False) -> None:
    """Scatter values into a view (rounding to the tensor dtype) and update validity.

    ``reduction`` marks a read-modify-write (``+=``) computed by the caller: legal across
    affine_range iterations, so it skips the loop-carried write check.
    """
    t = view.tensor
    rt = current()
    if rt.deferred is not None:   # its operands are views of memory this write may change
        _compute_deferred(rt)
    # a ragged tile whose key runs past its tensor: the box its mask keeps, for the check and the data path
    kept = _kept_basic(view, mask) if view.advanced and view.basic is None and not rt.options.trace_only else None
    _loop_conflict_check(rt, view, mask, api, accumulate or reduction, kept)
    if t._data is None or values is None:
        return
    t.own()
    shape = view.shape
    store_dtype = dt.storage(t.dtype)
    vals = broadcast(values, shape)
    if view.advanced:
        adv_shape = _adv_shape(view)
        vals = vals.reshape(adv_shape) if vals.shape != adv_shape else vals
        if view.basic is not None:
            _write_basic(t, view.basic, vals, written, shape, adv_shape, mask, store_dtype, accumulate)
            return
        if kept is not None:  # a ragged tile's kept box
            basic, sub = kept
            if basic:
                vals = vals[sub]
                w_src = None if written is None else broadcast(written, shape).reshape(adv_shape)[sub]
                _write_basic(t, basic, vals, w_src, vals.shape, vals.shape, None, store_dtype, accumulate)
            return
        effects.fail("a write through index arrays")
        if mask is not None:
            m = broadcast(mask, adv_shape)
            arrays = [a[m] for a in _full_arrays(view, adv_shape)]
            _check_bounds(view, arrays, api)
            key = tuple(arrays)
            vals = vals[m]
            w_src = None if written is None else broadcast(written, shape).reshape(adv_shape)[m]
        else:
            _check_bounds(view, None, api)
            key = _np_key(view)
            w_src = None if written is None else broadcast(written, shape).reshape(adv_shape)
        _store(t, key, vals, w_src, store_dtype, accumulate)
        return
    key = _np_key(view)
    target_shape = t._data[key].shape if len(shape) == 2 and shape[1] == 1 else None
    if target_shape is not None and target_shape != shape:
        vals = vals.reshape(target_shape)
        written = None if written is None else broadcast(written, shape).reshape(target_shape)
        mask = None if mask is None else broadcast(mask, shape).reshape(target_shape)
    if mask is not None:
        effects.fail("a masked write of a basic key")
        sub = t._data[key]
        m = broadcast(mask, sub.shape)
        if accumulate:
            prev = sub.astype(np.float32)
            prev_w = _validity(t, key)
            if prev_w is not None:
                prev = np.where(prev_w, prev, 0.0)
            new = dt.cast(prev + vals, t.dtype)
        else:
            new = dt.cast(np.asarray(vals), t.dtype)
        np.copyto(sub, broadcast(new, sub.shape).astype(store_dtype, copy=False), where=m)
        _materialize(t)  # a masked write is no box
        if t._written is not None:
            wsub = t._written[key]
            src = True if written is None else broadcast(written, sub.shape)
            np.copyto(wsub, src, where=m)
        return
    _store(t, key, vals, written, store_dtype, accumulate)


def _positive_zero(fill: Any) -> bool:
    """Whether every element filled with ``fill`` is all zero bits (not -0.0, whose sign bit is set)."""
    return isinstance(fill, (int, float, np.number)) and fill == 0 and math.copysign(1.0, float(fill)) > 0


def copy_of(dst: np.ndarray | None, src: np.ndarray) -> np.ndarray:
    """A deferred copy (see ``defer``): ``src`` into ``dst``, or a new array."""
    if dst is None:
        return src.copy()
    np.copyto(dst, src)
    return dst


def defer(t: Tensor, thunk: tuple) -> None:
    """Compute a fresh result tile's values later: ``thunk`` is ``(fn, *args)`` and ``fn(out, *args)``
    computes them into ``out`` (an array of the tile's shape) or, given None, returns them (a function and
    its arguments, not a closure: value replay re-runs the call at other offsets, see ``effects``). Assigned
    whole to a float32 box next (``dst[...] = nl.add(a, b)``, every compiler-style instruction), they are
    computed in place there (``write_deferred``) instead of into a tile that is then copied; anything else
    computes them first: reading the tile, and any write (the thunk's operands are views of memory)."""
    rt = current()
    if rt.deferred is not None:
        _compute_deferred(rt)
    t._thunk = thunk
    rt.deferred = weakref.ref(t)   # a tile that is gone needs no values


def _compute_deferred(rt: Runtime) -> None:
    t = rt.deferred()
    rt.deferred = None
    if t is not None and t._thunk is not None:
        t._compute()


def write_deferred(view: View, src: Tensor, written: np.ndarray | None, api: str, reduction: bool = False) -> bool:
    """``write(view, src's values, written)`` for a deferred ``src`` of the view's shape, computed into the
    destination; False (nothing done) unless the view is a box of a float32 tensor."""
    t = view.tensor
    if t._data is None or t.dtype != dt.float32 or t._raw:
        return False
    key = view.basic if view.advanced else view.key
    if key is None or _box(key) is None:
        return False
    sub = t._data[key]
    if sub.shape != src.shape:
        return False
    _loop_conflict_check(current(), view, None, api, reduction)
    t.own()
    src._compute(out=sub)
    _mark_written(t, key, None if written is None else broadcast(written, view.shape).reshape(sub.shape))
    return True


# ---- masked instructions computed on the box their mask keeps ------------------------------------------
# A masked instruction writes only the elements its mask keeps; the others are never written, so whatever
# the instruction would compute there is never seen. When the mask keeps a box of an elementwise
# instruction's tile (a ragged tile), its operands are read and its result computed on that box alone:
# views of memory instead of tile-sized copies, and the result straight into its destination's box.
def kept_box(mask: np.ndarray | None, shape: tuple[int, ...]) -> tuple[slice, ...] | None:
    """The box (slices of ``shape``) that ``mask`` keeps of a tile, when it keeps a box and not all of it."""
    if mask is None or len(shape) < 2 or mask_all(mask):
        return None
    try:
        spans = mask_spans(broadcast(mask, shape))
    except ValueError:
        return None
    if spans is None or spans is EMPTY:
        return None
    return tuple(slice(first, last + 1) for first, last in spans)


def _box_key(view: View, mask: np.ndarray, box: tuple[slice, ...]) -> tuple | None:
    """The basic key of the tensor elements that ``box`` of ``view`` holds, whose NumPy view has the box's
    shape; None for any other view (gathers, merged axes, a view shaped unlike its tensor's axes)."""
    if view.indirect:
        return None
    if view.advanced:
        if _adv_shape(view) != view.shape:
            return None
        if view.basic is None:
            kept = _kept_basic(view, mask)
            key = None if kept is None or not kept[0] else kept[0]
        else:
            key = _keep_in(view.basic, mask, view.shape)
    else:
        key = _keep_in(view.key, mask, view.shape)
    if key is None or _basic_shape(key) != _extent(box):
        return None
    return key


def _extent(box: tuple[slice, ...]) -> tuple[int, ...]:
    return tuple(s.stop - s.start for s in box)


def _keep_in(key: tuple, mask: np.ndarray, shape: tuple[int, ...]) -> tuple | None:
    """The part of a basic ``key`` (a view of ``shape``) that ``mask`` keeps, as a basic key."""
    if _basic_shape(key) != shape:
        return None
    kept = masked_box(key, broadcast(mask, shape))
    if kept is None or kept is EMPTY:
        return None
    return tuple(k if type(k) is not slice else slice(lo, hi, step) for k, (lo, hi, step) in zip(key, kept))


def _boxable(t: Tensor) -> bool:
    return t._data is not None and t.dtype == dt.float32 and t._data.dtype == np.float32


def box_writable(t: Tensor) -> bool:
    """Whether a box of ``t`` can take values written straight into its memory (``write_boxed``, ``store_boxed``):
    float32 memory that rounds as the tensor does."""
    return _boxable(t) and not t._raw


def _box_of_memory(t: Tensor, key: tuple, box: tuple[slice, ...]) -> np.ndarray:
    """``t._data[key]`` shaped as ``box`` (the key's int axes dropped: still a view)."""
    data = t._data[key]
    return data.reshape(_extent(box)) if data.ndim != len(box) else data


def boxed_read(view: View, mask: np.ndarray, box: tuple[slice, ...]) -> np.ndarray | None:
    """The values ``box`` of ``view`` holds, as a view of memory, when they are float32 and all written;
    None otherwise (then ``read`` it)."""
    t = view.tensor
    if not _boxable(t):
        return None
    key = _box_key(view, mask, box)
    if key is None or _validity(t, key) is not None:
        return None
    return _box_of_memory(t, key, box)


def boxed_into(dst: np.ndarray | None, shape: tuple[int, ...], box: tuple[slice, ...], fn: Any, *args: Any) -> np.ndarray:
    """The thunk of a result tile computed on its mask's box: ``fn(out, *args)`` computes the box's values
    into ``out``. Computed whole, the elements outside the box hold NaN (never written)."""
    if dst is None:
        dst = np.empty(shape, dtype=np.float32)
        _fill_outside(dst, np.float32(np.nan), box)
    fn(dst[box], *args)
    return dst


def _box_destination(view: View, mask: np.ndarray, box: tuple[slice, ...], api: str, reduction: bool,
                     src: Tensor | None = None) -> tuple[tuple, np.ndarray] | None:
    """For a write of ``box`` of ``view`` (the elements ``mask`` keeps): its key and the memory to write,
    after the checks ``write`` makes; None (nothing done) unless the view is a float32 box of memory.
    ``src``: the deferred tile the write computes (every other one is computed first, as ``write`` does)."""
    t = view.tensor
    if not box_writable(t):
        return None
    key = _box_key(view, mask, box)
    if key is None:
        return None
    rt = current()
    if rt.deferred is not None and rt.deferred() is not src:
        _compute_deferred(rt)   # its operands are views of memory this write may change
    kept = (key, box) if view.advanced and view.basic is None else None   # a ragged tile past the tensor's end
    _loop_conflict_check(rt, view, mask, api, reduction, kept)
    t.own()
    return key, _box_of_memory(t, key, box)


def write_boxed(view: View, src: Tensor, mask: np.ndarray, api: str, reduction: bool = False) -> bool:
    """``write(view, src's values, ..., mask)`` for a result ``src`` computed on its mask's box (``boxed_into``):
    its values computed straight into the destination's box. False (nothing done) for any other case."""
    thunk = src._thunk
    if thunk is None or thunk[0] is not boxed_into or thunk[1] != view.shape:
        return False
    box = thunk[2]
    dest = _box_destination(view, mask, box, api, reduction, src)
    if dest is None:
        return False
    key, sub = dest
    src._compute(sub, box)
    _mark_written(view.tensor, key, None)
    return True


def store_boxed(view: View, values: np.ndarray, mask: np.ndarray, box: tuple[slice, ...], api: str) -> bool:
    """``write(view, values, None, mask)`` for the values of ``mask``'s box alone (``boxed_read``); False
    (nothing done) unless the destination is a float32 box of the same shape."""
    dest = _box_destination(view, mask, box, api, False)
    if dest is None:
        return False
    key, sub = dest
    effects.run(_assign, sub, values, view.tensor.dtype, False)
    _mark_written(view.tensor, key, None)
    return True


def _write_basic(t: Tensor, basic: tuple, vals: np.ndarray, written: np.ndarray | None, shape: tuple[int, ...],
                 adv_shape: tuple[int, ...], mask: np.ndarray | None, store_dtype, accumulate: bool) -> None:
    """``write`` of an advanced view through its equivalent basic key; same stores as the gather/scatter path."""
    sub = t._data[basic]
    vals = vals.reshape(sub.shape)
    w_src = None if written is None else broadcast(written, shape).reshape(sub.shape)
    m = None if mask is None else broadcast(mask, adv_shape)
    if m is None or mask_all(m):
        _store(t, basic, vals, w_src, store_dtype, accumulate)
        return
    if m.shape != sub.shape:   # else the mask itself: its summaries (masked_box's spans) are kept
        m = m.reshape(sub.shape)
    if w_src is not None and not np.any(m & ~w_src):
        w_src = None  # every element the mask keeps is valid (a ragged tile computed from ragged inputs)
    if accumulate:
        effects.run(_accumulate_cast, sub, vals, _validity(t, basic), t.dtype, m)
    else:
        local = _local_box(m)
        if local is not None:   # a ragged tile's mask keeps a box: copy just it, no pass over the mask
            effects.run(_assign, sub[local], vals[local], t.dtype, t._raw)
        else:
            effects.run(_copy_where, sub, vals, m, t.dtype, t._raw)
    if t._cover is not None and w_src is None:
        kept = masked_box(basic, m)   # a ragged tile's mask keeps a box
        if kept is EMPTY:
            return
        if kept is not None:
            effects.run(effects.cover_add, t, kept)
            return
    _materialize(t)
    if t._written is not None:
        np.copyto(t._written[basic], True if w_src is None else w_src, where=m)


def _copy_where(dst: np.ndarray, vals: np.ndarray, keep: np.ndarray, dtype: Any, raw: bool) -> None:
    np.copyto(dst, vals if raw else dt.cast(np.asarray(vals), dtype), where=keep, casting="unsafe")


def _assign(dst: np.ndarray, vals: np.ndarray, dtype: Any, raw: bool) -> None:
    dst[...] = vals if raw else dt.cast(np.asarray(vals), dtype)


def _add_into(dst: np.ndarray, vals: np.ndarray) -> None:
    np.add(dst, vals, out=dst)


def _accumulate_cast(dst: np.ndarray, vals: np.ndarray, prev_written: np.ndarray | None, dtype: Any,
                     keep: np.ndarray | None = None) -> np.ndarray:
    """``dst = dst + vals`` rounded to ``dtype`` (only where ``keep``, if given), elements never written counting
    as 0; returns ``dst``."""
    prev = dst.astype(np.float32)
    if prev_written is not None:
        prev = np.where(prev_written, prev, 0.0)
    if keep is None:
        dst[...] = dt.cast(prev + vals, dtype)
    else:
        np.copyto(dst, dt.cast(prev + vals, dtype), where=keep, casting="unsafe")
    return dst


def _store(t: Tensor, key: tuple, vals: np.ndarray, written: np.ndarray | None, store_dtype, accumulate: bool) -> None:
    # a box with a slice: t._data[key] is a view to write through (ints alone would give a NumPy scalar)
    box = _box(key) if any(type(k) is slice for k in key) else None
    if box is None:
        effects.fail("a write that is not through a view")
    if accumulate:
        prev_w = _validity(t, key)
        if (prev_w is None or prev_w.all()) and t.dtype == dt.float32 and vals.dtype == np.float32 \
                and box is not None:
            effects.run(_add_into, t._data[key], vals)  # a view: fp32 + fp32 rounds the same in place
        elif box is not None:
            # PSUM accumulation onto never-written memory starts the group: overwrite
            effects.run(_accumulate_cast, t._data[key], vals, None if prev_w is None or prev_w.all() else prev_w,
                        t.dtype)
        else:
            t._data[key] = _accumulate_cast(np.array(t._data[key]), vals, prev_w, t.dtype)
    elif box is not None:
        effects.run(_assign, t._data[key], vals, t.dtype, t._raw)
    else:
        t._data[key] = dt.cast(np.asarray(vals), t.dtype) if not t._raw else vals
    _mark_written(t, key, written)


def _conflict_frames(rt: Runtime, t: Tensor) -> list:
    """The affine loops running now whose iterations may not write one location of ``t`` twice (those
    entered after ``t`` was allocated), outermost first."""
    return [f for f in rt.affine_frames() if f.inst_epoch > t._alloc_epoch]


def _loop_conflict_check(rt: Runtime, view: View, mask: np.ndarray | None, api: str, accumulate: bool,
                         kept: tuple[tuple, tuple[slice, ...]] | None = None) -> None:
    """Detect plain writes to one location from different iterations of an affine_range. ``kept``: the
    view's ragged-tile box (``_kept_basic``), as ``write`` found it."""
    if accumulate or rt.options.affine_write_conflicts == "ignore" or rt.options.trace_only:
        return
    frames = _conflict_frames(rt, view.tensor)
    if not frames:
        return
    t = view.tensor
    basic = view.basic if view.advanced else view.key
    partial = None  # the masked part of a basic-key box
    if basic is None and kept is not None:
        if not kept[0]:
            return   # the mask keeps nothing
        basic = kept[0]   # a ragged tile: its kept box (the general path checks the same elements)
    elif view.advanced and basic is not None and mask is not None:
        m = broadcast(mask, _adv_shape(view))
        if not mask_all(m):
            partial = m
    if not isinstance(t._stamps, np.ndarray):
        box = None if basic is None or not rt.options.fast_indexing else box_of(basic)
        if box is not None and partial is not None:
            bshape = _basic_shape(basic)   # the mask itself when the shapes agree: its spans are kept
            box = masked_box(basic, partial if partial.shape == bshape else partial.reshape(bshape))
            if box is EMPTY:
                return
        if box is not None and rt.options.affine_write_conflicts == "error":
            _box_conflict_check(rt, t, box, frames, api)
            if rt.probes and rt.value_replay:
                effects.note(_box_conflict_replayed, t, box, api, rt.location())
            return
        effects.fail("loop-carried writes checked per element")
        t._stamps = np.zeros(t.shape, dtype=np.int32) if t._stamps is None else t._stamps.stamps(t.shape)
    key = view.key
    where = None
    if basic is not None:
        key = basic
        if partial is not None:
            where = partial.reshape(t._stamps[key].shape)
    elif mask is not None:
        m = broadcast(mask, _adv_shape(view))
        key = tuple(a[m] for a in _full_arrays(view, m.shape))
    try:
        stamps = t._stamps[key]
    except IndexError:
        return  # out-of-bounds writes are reported by the data path
    if where is not None:
        stamps = stamps[where]
    if stamps.size and int(stamps.max()) >= frames[0].inst_epoch:
        for f in frames:
            hit = (stamps >= f.inst_epoch) & (stamps < f.iter_epoch)
            if hit.any():
                if rt.options.affine_write_conflicts == "warn":
                    rt.warn(f"{api}: {_conflict_message(t, f)}")
                    break
                raise rt.rule_error(api, _conflict_message(t, f), LoopCarriedDependencyError.rule,
                                    LoopCarriedDependencyError)
    if where is not None:
        np.copyto(t._stamps[key], rt.epoch, where=where)
    else:
        t._stamps[key] = rt.epoch


def _basic_shape(basic: tuple) -> tuple[int, ...]:
    return tuple(len(range(k.start, k.stop, k.step)) for k in basic if isinstance(k, slice))


def _box_conflict_check(rt: Runtime, t: Tensor, box: Box, frames: list, api: str) -> None:
    """The same check on a tensor whose writes so far were all boxes (see ``conflicts``)."""
    if t._stamps is None:
        t._stamps = WriteLog(len(t.shape), not t.on_chip)
    epochs = t._stamps.meeting_epochs(box, frames[0].inst_epoch)
    if epochs.size:
        for f in frames:
            if ((epochs >= f.inst_epoch) & (epochs < f.iter_epoch)).any():
                raise rt.rule_error(api, _conflict_message(t, f), LoopCarriedDependencyError.rule,
                                    LoopCarriedDependencyError)
    t._stamps.add(box, rt.epoch)


def _box_logged(t: Tensor, box: Box, api: str, where: tuple) -> None:
    """``_box_conflict_replayed`` where value replay proved the check passes: the write is only logged."""
    if t._stamps is None:
        t._stamps = WriteLog(len(t.shape), not t.on_chip)
    t._stamps.add(box, current().epoch)


def _logged_clear(t: Tensor, boxes: list[Box]) -> bool:
    """Whether no write logged for ``t`` inside the affine loops running now meets any of ``boxes`` (what
    ``_box_conflict_check`` tests against, for every loop at once)."""
    frames = _conflict_frames(current(), t)
    if not frames or t._stamps is None:
        return True
    return isinstance(t._stamps, WriteLog) and not any(
        t._stamps.meeting_epochs(box, frames[0].inst_epoch).size for box in boxes)


def _box_conflict_replayed(t: Tensor, box: Box, api: str, where: tuple) -> None:
    """``_loop_conflict_check``'s box check for a replayed iteration (``effects``); an error names the
    instruction's line, as running the iteration would."""
    rt = current()
    frames = _conflict_frames(rt, t)
    try:
        _box_conflict_check(rt, t, box, frames, api)
    except LoopCarriedDependencyError as exc:
        exc.file = exc.line = None
        raise exc.locate(*where)


effects.PROVABLE[_box_conflict_replayed] = (_box_logged, _logged_clear)


def _conflict_message(t: Tensor, f: Any) -> str:
    return (f"'{t.name}' is assigned at the same location in different iterations of an affine_range "
            f"(now iteration {f.iteration}); the hardware may run them in any order")


# ---- operands ------------------------------------------------------------------------------
class Operand:
    """An API argument resolved to data (fp32/int compute type), validity, and trace region."""

    __slots__ = ("view", "data", "written", "dtype", "shape", "scalar", "mask")

    def __init__(self, view: View | None, data: Any, written: np.ndarray | None, dtype: Any,
                 shape: tuple[int, ...], scalar: bool = False, mask: np.ndarray | None = None) -> None:
        self.mask = mask
        self.view = view
        self.data = data
        self.written = written
        self.dtype = dtype
        self.shape = shape
        self.scalar = scalar

    @property
    def buffer(self) -> str | None:
        return None if self.view is None else self.view.tensor.buffer

    @property
    def region(self) -> Region | None:
        if self.view is None:
            return None
        if self.mask is not None:
            try:
                _broadcast_shapes([self.mask.shape, self.view.shape])
                return self.view.region(self.mask)  # a masked instruction only touches the masked elements
            except ValueError:
                pass
        return self.view.region()


def as_view(x: Any) -> View | None:
    if isinstance(x, View):
        return x
    if isinstance(x, Tensor):
        return x.full_view()
    return None


def operand(x: Any, api: str, *, allow_scalar: bool = True, allow_hbm: bool = False, mask=None,
            compute: bool = True, box: tuple[slice, ...] | None = None) -> Operand | None:
    """``x`` resolved; with ``box`` (of a tile's mask, see ``kept_box``) its data is that box's values alone
    (``boxed_read``), or None is returned where they cannot be read so."""
    rt = current()
    view = as_view(x)
    if view is None:
        if isinstance(x, (IndexExpr, Mask)):
            raise rt.rule_error(api, "an index expression is not a tile; build index tiles with nisa.iota",
                                "compute APIs take tiles or scalars")
        if allow_scalar and isinstance(x, (int, float, bool, np.number)):
            is_int = isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))
            return Operand(None, x if is_int else np.float32(x), None, dt.scalar_dtype(x), (), scalar=True)
        raise rt.rule_error(api, f"expected a tile, got {type(x).__name__}", "compute APIs take tiles or scalars")
    t = view.tensor
    if not t.on_chip and not allow_hbm:
        raise rt.rule_error(api, f"operand '{t.name}' is in HBM; compute engines only access SBUF and PSUM "
                            "(load it with nl.load first)", "compute APIs operate on SBUF/PSUM tiles")
    if t.on_chip:
        view.check_tile(api)
    if t.kind == "result":
        t._consumed = True
    if box is not None:
        data = boxed_read(view, mask, box)
        return None if data is None else Operand(view, data, None, t.dtype, view.shape, mask=mask)
    data, written = read(view, mask, api)
    if data is not None and compute:
        cdt = dt.compute_dtype(t.dtype)
        if data.dtype != cdt:   # a bf16 / fp8 / int tile: the engines compute in fp32 (recorded: a new array)
            data = effects.run(_upcast, data, cdt)
    return Operand(view, data, written, t.dtype, view.shape, mask=mask)


def _upcast(data: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return data.astype(dtype)


def combine_written(*ws: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray | None:
    out = None
    for w in ws:
        if w is None:
            continue
        w = broadcast(w, shape) if w.shape != shape else w
        out = w if out is None else (out & w)
    return out


def assign(dest: View, value: Any) -> None:
    """``dest[...] = value``: write a result tile, copy a tile, or fill with a scalar."""
    from accelopt_nb.sim import ops
    rt = current()
    if isinstance(value, View) and value._accum_pending and value.tensor is dest.tensor:
        value._accum_pending = False
        return  # the second half of an augmented assignment (psum[i] += x)
    if not dest.tensor.on_chip:
        raise rt.rule_error("assignment", f"cannot assign to HBM tensor '{dest.tensor.name}' inside a kernel; "
                            "use nl.store (or nisa.dma_copy)", "HBM is written by DMA only")
    dest.check_tile("assignment")
    ops.copy_into(dest, value, api="assignment")


def accumulate(dest: View, value: Any) -> None:
    from accelopt_nb.sim import ops
    rt = current()
    if not dest.tensor.on_chip:
        raise rt.rule_error("+=", f"cannot accumulate into HBM tensor '{dest.tensor.name}'",
                            "HBM is written by DMA only")
    dest.check_tile("+=")
    ops.accumulate_into(dest, value)
