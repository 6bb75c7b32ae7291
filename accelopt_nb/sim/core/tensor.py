"""Tensors: one allocation each (an HBM tensor, an on-chip buffer, a fresh API result tile).

A tensor is a handle (see :mod:`accelopt_nb.sim.core.views`): its data lives in ``_data``, the validity of each
element (written, and not computed from unwritten memory) in ``_written`` (None = all valid); a new buffer keeps
its validity as the boxes written so far (``_cover``) until a question needs the per-element array. A fresh result
tile's values may be computed later (a :class:`~accelopt_nb.sim.core.memory.Thunk`, see ``memory.defer``).
"""
from __future__ import annotations

import math
from math import prod as _prod
from typing import Any

import numpy as np

from accelopt_nb.sim.core import dtypes as dt
from accelopt_nb.sim.core import onchip
from accelopt_nb.sim.core.boxes import Cover
from accelopt_nb.sim.core.context import active, current
from accelopt_nb.sim.core.memory import Thunk, boxed_into, copy_of, defer, materialize
from accelopt_nb.sim.core.prims import REBUILD, call, fail, primitive
from accelopt_nb.sim.core.runtime import Runtime
from accelopt_nb.sim.core.views import (API, DynamicIndex, View, _compiler_view, _dynamic_view, _indirect_view,
                                         _Opaque, _region, normalize_key)
from accelopt_nb.sim.trace import Region, TensorInfo


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
        if data is None and type(written) is bool and rt.recording is not None and kind != "result":
            # value replay: an allocation in a loop body is a recorded call (a new tensor each iteration)
            rt.recording.record(allocated, (), {"tid": tid, "name": name, "buffer": buffer, "kind": kind,
                                                "shape": self.shape, "dtype": self.dtype, "par_axis": par_axis,
                                                "raw": raw, "fill": fill, "written": written}, self)
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
        if rt.observer is not None and self._array is not None and kind != "result":   # value replay's roots
            rt.observer.storage(self._array)
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

    # The values, computed first if they were deferred (see ``memory.defer``).
    @property
    def _data(self) -> np.ndarray | None:
        if self._thunk is not None:
            self._compute()
        return self._array

    @_data.setter
    def _data(self, value: np.ndarray | None) -> None:
        self._array = value

    def _compute(self, out: np.ndarray | None = None, box: tuple[slice, ...] | None = None) -> None:
        """Compute deferred values (see ``memory.defer``), or compute them into ``out``, where the tile was assigned
        whole (or, with ``box``, into the destination of the box its boxed thunk computes): then the tile copies
        them from there before that memory changes or when it is read."""
        thunk, self._thunk = self._thunk, None
        rt = active()
        if rt is not None and rt.deferred is not None and rt.deferred() is self:
            rt.deferred = None
        with np.errstate(all="ignore"):
            if thunk.box is not None and box is None:   # computed whole: NaN outside its box (never written)
                values = call(boxed_into, out, *thunk.args, box_shape=self.shape, box=thunk.box, inner=thunk.fn,
                              **thunk.params)
            else:   # a whole tile, or a boxed one computed straight into its box's destination
                values = call(thunk.fn, out, *thunk.args, **thunk.params)
        if out is None:
            self._array = values
        else:
            defer(self, Thunk(copy_of, (out,), box=box))

    def own(self) -> None:
        """Copy borrowed data before it changes (kernel inputs are the caller's arrays until written)."""
        if self._borrowed:
            fail("a kernel input was first written inside the loop")
            self._data = self._data.copy()
            self._borrowed = False
            rt = active()
            if rt is not None and rt.observer is not None:
                rt.observer.storage(self._array)

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
        rt = active()
        if rt is not None and rt.watching is not None:   # loop replay: this key's ints and slices must stay in bounds
            rt.watching.key(view.key, self.shape)
        return view

    def _view(self, key: Any) -> "View":
        if self._fast and type(key) is tuple:
            view = _compiler_view(self, key)
            if view is not None:
                return view
        dynamic = opaque = False   # one loop, no generators: this runs for every tensor[key] of a kernel
        for k in (key if isinstance(key, tuple) else (key,)):
            if isinstance(k, DynamicIndex):
                dynamic = True
                break
            if isinstance(k, _Opaque):
                opaque = True
        if dynamic or (opaque and self.on_chip):
            return _dynamic_view(self, key)
        if opaque:
            return _indirect_view(self, key)
        affs: dict[int, Any] = {}
        return View(self, normalize_key(self, key, affs), affs)

    def __setitem__(self, key: Any, value: Any) -> None:
        API.assign(self[key], value)

    def __iadd__(self, other: Any) -> "Tensor":
        API.accumulate(self.full_view(), other)
        return self

    def reshape(self, shape):
        """A reshaped alias of the same memory (``tensor.reshape``)."""
        shape = tuple(int(s) for s in shape)
        if int(_prod(shape)) != int(_prod(self.shape)):
            raise current().rule_error("reshape", f"cannot reshape {self.shape} into {shape}", "reshape keeps size")
        return _Alias(self, shape)


@primitive(replay=REBUILD)
def allocated(*, tid: int, name: str, buffer: str, kind: str, shape: tuple[int, ...], dtype: Any, par_axis: int,
              raw: bool, fill: Any, written: bool) -> Tensor:
    """A tensor allocated in a replayed loop iteration (value replay): memory and validity as ``Tensor()`` sets
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
        materialize(base)  # the alias shares the per-element validity
        self._cover = None
        self._written = None if base._written is None else base._written.reshape(shape)


def reinterpreted(base: Tensor, dtype: Any) -> Tensor:
    """``base``'s memory read as ``dtype`` (no data is copied): an alias that shares data and identity for the
    trace, as a reshape does. Another element size scales the last dim (float32 (P, F) as an 8-bit type is
    (P, 4F)); the caller checks that it divides. Validity is per element: an alias of the same element size shares
    it; one of another size is made only of a fully written tensor (``fully_written``), whose elements stay valid."""
    new = dt.canonical(dtype)
    old_size, new_size = dt.itemsize(base.dtype), dt.itemsize(new)
    shape = base.shape if old_size == new_size else (*base.shape[:-1], base.shape[-1] * old_size // new_size)
    alias = _Alias(base, base.shape)
    alias.dtype, alias.shape = new, shape
    if alias._array is not None:
        alias._array = alias._array.view(dt.storage(new))   # storage is C-contiguous: any element size views it
    if shape != base.shape:
        alias._written = None     # fully written (checked by the caller): every byte of it is valid
    return alias


def fully_written(t: Tensor) -> bool:
    """Whether every element of ``t`` has been written."""
    materialize(t)
    return t._written is None or bool(np.all(t._written))


def _positive_zero(fill: Any) -> bool:
    """Whether every element filled with ``fill`` is all zero bits (not -0.0, whose sign bit is set)."""
    return isinstance(fill, (int, float, np.number)) and fill == 0 and math.copysign(1.0, float(fill)) > 0
