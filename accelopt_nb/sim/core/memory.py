"""Simulator memory: reading views, the write path, validity, deferred results and the loop-carried write check.

Every change of a tensor's memory or validity goes through this module, each as a primitive call
(:mod:`accelopt_nb.sim.core.prims`): the copies and casts a read makes, the assignments, accumulations and masked
copies a write makes, the cover and write-log updates. Validity: ``Tensor._written`` (None = all valid) or, for a
new buffer, the boxes written so far (``Tensor._cover``); unwritten elements of a lazily allocated tensor read as
the fill value (NaN, or 4 for integers).
"""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from accelopt_nb.errors import LoopCarriedDependencyError
from accelopt_nb.sim.core import dtypes as dt
from accelopt_nb.sim.core.boxes import EMPTY, Box, WriteLog, box_of, mask_spans, masked_box
from accelopt_nb.sim.core.context import current
from accelopt_nb.sim.core.indexing import basic_key, broadcast, broadcast_shapes, mask_all
from accelopt_nb.sim.core.prims import BOOKS, GUARD, REBUILD, Lane, call, fail, note, primitive
from accelopt_nb.sim.core.runtime import Runtime

if TYPE_CHECKING:
    from accelopt_nb.sim.core.tensor import Tensor
    from accelopt_nb.sim.core.views import View


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
            data = call(_kept_copy, fill, data[local], shape=data.shape, dtype=data.dtype, sub=local)
        else:
            data = call(_masked_copy, data, fill, keep)
    if written is not None:
        written = written.copy()  # the general path's gather never aliased the tensor's validity
    return data, written


@primitive(replay=REBUILD, lane=Lane())
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
        return call(_filled, fill, shape=adv_shape, dtype=t._data.dtype), None
    w = _validity(t, basic)
    data = call(_kept_copy, fill, _fill_unwritten(t, t._data[basic], w), shape=adv_shape, dtype=t._data.dtype, sub=sub)
    if w is None or w.all():
        return data, None
    written = np.ones(adv_shape, dtype=bool)
    part = written[sub]
    part[...] = w.reshape(part.shape)
    return data, written


@primitive(replay=REBUILD)
def _filled(fill: np.ndarray, *, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    out = np.empty(shape, dtype=dtype)
    out[...] = fill.reshape(())
    return out


@primitive(replay=REBUILD)
def _kept_copy(fill: np.ndarray, part: np.ndarray, *, shape: tuple[int, ...], dtype: np.dtype,
               sub: tuple[slice, ...]) -> np.ndarray:
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
                note(guard_covered, t, box)
                return None
            local = t._cover.local(box)  # e.g. a ragged tile: painted for this box alone
            if local is not None:
                note(guard_local, t, box, local)
                return local.reshape(tuple(n for k, n in zip(key, local.shape) if type(k) is slice))
        materialize(t)
    if t._written is None:
        return None
    fail("validity kept per element")
    return t._written[key]


def _mark_written(t: Tensor, key: tuple, written: np.ndarray | None) -> None:
    """``t._written[key] = written`` (None: all valid)."""
    if t._cover is not None:
        if written is not None and written.all():
            written = None
        box = _box(key) if written is None else None
        if box is not None:
            call(cover_add, t, box)
            return
        materialize(t)
    if t._written is not None:
        fail("validity kept per element")
        t._written[key] = True if written is None else written


def _box(key: tuple) -> Box | None:
    """The box of a basic key of ints and slices; None for anything else (arrays, empty slices)."""
    for k in key:
        if type(k) is not int and type(k) is not slice:
            return None
    return box_of(key)


def materialize(t: Tensor) -> None:
    """Switch a tensor's validity from written boxes to the per-element array."""
    if t._cover is not None:
        fail("validity switched to per-element")
        t._written, t._cover = t._cover.mask(t.shape), None


def _fill_unwritten(t: Tensor, data: Any, written: Any) -> Any:
    """Data as a NaN-filled (ints: 4) buffer would hold it: a lazily allocated tensor's unwritten elements
    read as the fill value."""
    if not t._lazy or written is None or np.all(written):
        return data
    return call(_where_written, written, data, dt.nan_fill(t.dtype))


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


@primitive(replay=REBUILD, lane=Lane())
def _where_written(written: np.ndarray, data: np.ndarray, fill: Any) -> np.ndarray:
    return np.where(written, data, np.asarray(fill).astype(data.dtype))


def _adv_shape(view: View) -> tuple[int, ...]:
    return broadcast_shapes([k.shape for k in view.key if isinstance(k, np.ndarray)])


# ---- the write path -------------------------------------------------------------------------------------
def write(view: View, values: np.ndarray | None, written: np.ndarray | None, mask: np.ndarray | None, api: str, *,
          accumulate: bool = False, reduction: bool = False, tile: Tensor | None = None,
          box: tuple[slice, ...] | None = None) -> None:
    """Write into a view: the one way a tensor's memory and validity change (values rounded to its dtype).

    ``values``: an array broadcast to the view (None in a trace-only run: only the checks run); ``written``: its
    validity (None: all valid); ``mask``: the elements written. ``tile``: a result tile whose values are written
    (``values`` None): deferred ones are computed straight into the destination when it is float32 memory of their
    shape (or, for a tile computed on its mask's box, into that box: :func:`_in_place`), else computed first.
    ``box``: ``values`` hold only that box of the view, the box ``mask`` keeps (callers ask :func:`takes_box`).
    ``accumulate``: add into the destination (PSUM accumulation); ``reduction``: a read-modify-write the caller
    computed (``+=``). Both are legal across affine_range iterations: the loop-carried write check skips them.

    Every write makes the same checks once, in this order: any other pending result is computed (its operands are
    views of memory this write may change), the loop-carried write check, a borrowed kernel input is copied; then
    the values land and the elements written are marked valid.
    """
    t = view.tensor
    rt = current()
    target = None   # (key, memory, box): where the values land directly
    if tile is not None:
        if tile._thunk is not None and tile.shape == view.shape:
            target = _in_place(view, tile, mask)
        if target is None:   # the tile's values, computed first if they were deferred
            values = tile._data
            if values is not None and tile.shape != view.shape:
                values = values.reshape(view.shape)
    elif box is not None:
        target = _box_target(view, mask, box)
        if target is None:
            raise RuntimeError(f"{api}: a box's values written where the box cannot go (ask takes_box first)")
    if rt.deferred is not None and (tile is None or rt.deferred() is not tile):
        _compute_deferred(rt)   # its operands are views of memory this write may change
    # a ragged tile whose key runs past its tensor: the box its mask keeps, for the check and the data path
    if target is not None:
        kept = (target[0], target[2]) if target[2] is not None and view.advanced and view.basic is None else None
    else:
        kept = _kept_basic(view, mask) if view.advanced and view.basic is None and not rt.options.trace_only else None
    _loop_conflict_check(rt, view, mask, api, accumulate or reduction, kept)
    if target is None and (t._data is None or values is None):
        return
    t.own()
    if target is not None:
        key, sub, at = target
        if tile is not None:   # computed straight into the destination (whole, or the box the tile computes)
            tile._compute(sub, at)
            if at is None and written is not None:
                written = broadcast(written, view.shape).reshape(sub.shape)
            _mark_written(t, key, None if at is not None else written)
        else:   # the values of the mask's box alone, copied into its destination
            call(_assign, sub, values, dtype=t.dtype, raw=False)
            _mark_written(t, key, None)
        return
    _scatter(view, values, written, mask, api, accumulate, kept)


def _scatter(view: View, values: np.ndarray, written: np.ndarray | None, mask: np.ndarray | None, api: str,
             accumulate: bool, kept: tuple | None) -> None:
    """``write``'s values landing through the view's key (after its checks): a box of memory where the key is one
    (an affine nl.arange key's basic equivalent, a ragged tile's kept box), else a scatter through index arrays."""
    t = view.tensor
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
        fail("a write through index arrays")
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
        fail("a masked write of a basic key")
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
        materialize(t)  # a masked write is no box
        if t._written is not None:
            wsub = t._written[key]
            src = True if written is None else broadcast(written, sub.shape)
            np.copyto(wsub, src, where=m)
        return
    _store(t, key, vals, written, store_dtype, accumulate)


@primitive(replay=REBUILD, lane=Lane(), writes=0)
def copy_of(dst: np.ndarray | None, src: np.ndarray) -> np.ndarray:
    """A deferred copy (see ``defer``): ``src`` into ``dst``, or a new array."""
    if dst is None:
        return src.copy()
    np.copyto(dst, src)
    return dst


class Thunk:
    """A deferred result's values: the primitive call ``fn(out, *args, **params)`` computes them into ``out`` (an
    array of the tile's shape) or, given None, returns them (a function and its arguments, not a closure: value
    replay re-runs the call at other offsets). With ``box`` (slices of the tile), only that box is computed
    (:func:`boxed_into` around ``fn``): the rest of the tile is never written."""

    __slots__ = ("fn", "args", "params", "box")

    def __init__(self, fn: Callable[..., Any], args: tuple, params: dict[str, Any] | None = None,
                 box: tuple[slice, ...] | None = None) -> None:
        self.fn, self.args, self.params, self.box = fn, args, params or {}, box


def defer(t: Tensor, thunk: Thunk) -> None:
    """Compute a fresh result tile's values later (``thunk``). Assigned whole to a float32 box next
    (``dst[...] = nl.add(a, b)``, every compiler-style instruction), they are computed in place there
    (``write(..., tile=t)``) instead of into a tile that is then copied; anything else computes them first: reading
    the tile, and any write (the thunk's operands are views of memory)."""
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
    """Whether a box of ``t`` can take values written straight into its memory (``write(..., tile=...)`` of a
    boxed result, ``write(..., box=...)``): float32 memory that rounds as the tensor does."""
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


@primitive(replay=REBUILD, writes=0)
def boxed_into(dst: np.ndarray | None, *args: Any, box_shape: tuple[int, ...], box: tuple[slice, ...],
               inner: Callable[..., Any], **params: Any) -> np.ndarray:
    """A result tile computed on its mask's box (a :class:`Thunk` with a box): ``inner(out, *args, **params)``
    computes the box's values into ``out``. Computed whole, the elements outside the box hold NaN (never
    written)."""
    if dst is None:
        dst = np.empty(box_shape, dtype=np.float32)
        _fill_outside(dst, np.float32(np.nan), box)
    inner(dst[box], *args, **params)
    return dst


def takes_box(view: View, mask: np.ndarray, box: tuple[slice, ...]) -> bool:
    """Whether a write of ``box``'s values alone (the box ``mask`` keeps of ``view``) can land straight in the
    view's memory: a float32 box of memory (``write(..., box=box)``)."""
    return box_writable(view.tensor) and _box_key(view, mask, box) is not None


def _box_target(view: View, mask: np.ndarray, box: tuple[slice, ...]) -> tuple | None:
    """(key, memory, box) for values of ``box`` of ``view`` written straight into its memory, or None."""
    t = view.tensor
    if not box_writable(t):
        return None
    key = _box_key(view, mask, box)
    return None if key is None else (key, _box_of_memory(t, key, box), box)


def _in_place(view: View, tile: Tensor, mask: np.ndarray | None) -> tuple | None:
    """Where a deferred result tile of the view's shape is computed straight into the destination: (key, memory,
    None) for a whole tile into a float32 box of memory; (key, memory, box) for a tile computed on its mask's box
    (``Thunk.box``) into the destination's box; None where it must be computed first."""
    t = view.tensor
    if mask is not None and not mask_all(mask):
        return None if tile._thunk.box is None else _box_target(view, mask, tile._thunk.box)
    if t._data is None or t.dtype != dt.float32 or t._raw:
        return None
    key = view.basic if view.advanced else view.key
    if key is None or _box(key) is None:
        return None
    sub = t._data[key]
    return (key, sub, None) if sub.shape == tile.shape else None


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
        call(_accumulate_cast, sub, vals, _validity(t, basic), m, dtype=t.dtype)
    else:
        local = _local_box(m)
        if local is not None:   # a ragged tile's mask keeps a box: copy just it, no pass over the mask
            call(_assign, sub[local], vals[local], dtype=t.dtype, raw=t._raw)
        else:
            call(_copy_where, sub, vals, m, dtype=t.dtype, raw=t._raw)
    if t._cover is not None and w_src is None:
        kept = masked_box(basic, m)   # a ragged tile's mask keeps a box
        if kept is EMPTY:
            return
        if kept is not None:
            call(cover_add, t, kept)
            return
    materialize(t)
    if t._written is not None:
        np.copyto(t._written[basic], True if w_src is None else w_src, where=m)


@primitive(replay=REBUILD, lane=Lane(), writes=0)
def _copy_where(dst: np.ndarray, vals: np.ndarray, keep: np.ndarray, *, dtype: Any, raw: bool) -> None:
    np.copyto(dst, vals if raw else dt.cast(np.asarray(vals), dtype), where=keep, casting="unsafe")


@primitive(replay=REBUILD, lane=Lane(), writes=0)
def _assign(dst: np.ndarray, vals: np.ndarray, *, dtype: Any, raw: bool) -> None:
    dst[...] = vals if raw else dt.cast(np.asarray(vals), dtype)


@primitive(replay=REBUILD)
def _add_into_lanes(dst: np.ndarray, vals: np.ndarray) -> None:
    """``_add_into`` over lanes: lane after lane where the destination stays put (a PSUM accumulator over a
    contraction loop: each lane adds in the order its iteration did, so the sums round as they did), else all
    lanes at once."""
    if dst.strides[0] == 0:
        for lane in np.broadcast_to(vals, dst.shape):
            np.add(dst[0], lane, out=dst[0])
    else:
        np.add(dst, vals, out=dst)


@primitive(replay=REBUILD, lane=Lane(impl=_add_into_lanes, accumulates=True), writes=0)
def _add_into(dst: np.ndarray, vals: np.ndarray) -> None:
    np.add(dst, vals, out=dst)


@primitive(replay=REBUILD, lane=Lane(), writes=0)
def _accumulate_cast(dst: np.ndarray, vals: np.ndarray, prev_written: np.ndarray | None, keep: np.ndarray | None,
                     *, dtype: Any) -> np.ndarray:
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
        fail("a write that is not through a view")
    if accumulate:
        prev_w = _validity(t, key)
        if (prev_w is None or prev_w.all()) and t.dtype == dt.float32 and vals.dtype == np.float32 \
                and box is not None:
            call(_add_into, t._data[key], vals)  # a view: fp32 + fp32 rounds the same in place
        elif box is not None:
            # PSUM accumulation onto never-written memory starts the group: overwrite
            call(_accumulate_cast, t._data[key], vals, None if prev_w is None or prev_w.all() else prev_w, None,
                 dtype=t.dtype)
        else:
            t._data[key] = _accumulate_cast(np.array(t._data[key]), vals, prev_w, None, dtype=t.dtype)
    elif box is not None:
        call(_assign, t._data[key], vals, dtype=t.dtype, raw=t._raw)
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
            if rt.recording is not None:
                note(_box_conflict_replayed, t, box, api=api, where=rt.location())
            return
        fail("loop-carried writes checked per element")
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


@primitive(replay=BOOKS)
def _box_logged(t: Tensor, box: Box, *, api: str, where: tuple) -> None:
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


@primitive(replay=BOOKS, provable=(_box_logged, _logged_clear))
def _box_conflict_replayed(t: Tensor, box: Box, *, api: str, where: tuple) -> None:
    """``_loop_conflict_check``'s box check for a replayed iteration (value replay); an error names the
    instruction's line, as running the iteration would."""
    rt = current()
    frames = _conflict_frames(rt, t)
    try:
        _box_conflict_check(rt, t, box, frames, api)
    except LoopCarriedDependencyError as exc:
        exc.file = exc.line = None
        raise exc.locate(*where)



def _conflict_message(t: Tensor, f: Any) -> str:
    return (f"'{t.name}' is assigned at the same location in different iterations of an affine_range "
            f"(now iteration {f.iteration}); the hardware may run them in any order")


# ---- validity's books, as value replay sees them -------------------------------------------------------
@primitive(replay=GUARD)
def guard_covered(t: Any, box: tuple) -> None:
    """A read found ``box`` of ``t`` written (``Cover.covers``); checked before replaying an iteration."""


@primitive(replay=GUARD)
def guard_local(t: Any, box: tuple, local: np.ndarray) -> None:
    """A read found ``box`` of ``t`` written where ``local`` is true (``Cover.local``); checked likewise."""


@primitive(replay=BOOKS)
def cover_add(t: Any, box: tuple) -> None:
    t._cover.add(box)
