"""Tile handles and views: what a kernel holds instead of arrays, and how its index keys address a tensor.

Inside a kernel, tensors are handles: indexing gives a :class:`View` (a region, no data), NKI APIs read and
write through views (:mod:`accelopt_nb.sim.core.memory`), and any attempt to turn a handle into a NumPy array
raises :class:`OpaqueTensorError`. This module holds the handles' common base, the views, the normalization of
index keys, the plans that address compiler-style keys as slices, and the trace region of a view.
"""
from __future__ import annotations

from math import prod as _prod
from typing import Any, Callable

import numpy as np

from accelopt_nb.errors import OpaqueTensorError, UninitializedReadError
from accelopt_nb.sim.core import dtypes as dt
from accelopt_nb.sim.core.context import active, current
from accelopt_nb.sim.core.indexing import IndexExpr, basic_key, broadcast_shapes, compact, mask_count, plain
from accelopt_nb.sim.core.memory import read
from accelopt_nb.sim.core.limits import PMAX
from accelopt_nb.sim.core.prims import fail as _fail_recording
from accelopt_nb.sim.trace import Region


def _calls() -> Any:
    """The observer of the running launch's program (``Runtime.calls``), if one records it."""
    rt = active()
    return None if rt is None else rt.calls


class _API:
    """What tile operators and assignments mean: NKI calls, bound by the API wing when it loads (``api.ops``,
    ``api.language``), so the core never imports the API."""

    language: Any = None                     # nl: operators and tile methods map to its functions
    assign: Callable[[Any, Any], None] | None = None       # dst[...] = value
    accumulate: Callable[[Any, Any], None] | None = None   # dst += value
    access_pattern: Callable[..., Any] | None = None       # tensor.ap(...)
    missing_attribute: Callable[[Any, str], Exception] | None = None   # the error for tensor.<unknown name>
    view_methods: dict[str, Callable[..., Any]] | None = None        # today's NkiTensor view API, by name
    index_pattern: Callable[[Any, Any], Any] | None = None           # view[key] of an access-pattern view


API = _API()


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

    # arithmetic operators map to nl element-wise ops (the API wing binds them: API.language)
    def _binop(self, other, name, reverse=False):
        calls = _calls()
        if calls is not None:
            calls.op(name, self, other, reverse)
        if name == "add" and isinstance(other, IndexExpr):   # sbuf[ix, offsets[0, i] + iy]: a dynamic offset
            return DynamicIndex(self, other)
        nl = API.language
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
        calls = _calls()
        if calls is not None:
            calls.op("negative", self)
        return API.language.negative(self)

    def __invert__(self):
        calls = _calls()
        if calls is not None:
            calls.op("invert", self)
        return API.language.invert(self)

    # tile methods
    def ap(self, pattern, offset=None, scalar_offset=None, vector_offset=None, indirect_dim=0, dtype=None):
        """An access pattern over this tensor's storage (see ``api/access.py``)."""
        return API.access_pattern(self, pattern, offset, scalar_offset, vector_offset, indirect_dim, dtype)

    # today's NkiTensor view API (nki front end): each a view of the same storage, made in api/access.py
    def permute(self, dims): return API.view_methods["permute"](self, dims)
    def broadcast(self, dim, size): return API.view_methods["broadcast"](self, dim, size)
    def expand_dim(self, dim): return API.view_methods["expand_dim"](self, dim)
    def squeeze_dim(self, dim): return API.view_methods["squeeze_dim"](self, dim)
    def reshape_dim(self, dim, shape): return API.view_methods["reshape_dim"](self, dim, shape)
    def flatten_dims(self, start_dim, end_dim): return API.view_methods["flatten_dims"](self, start_dim, end_dim)
    def slice(self, dim, start, end, step=1): return API.view_methods["slice"](self, dim, start, end, step)
    def select(self, dim, index): return API.view_methods["select"](self, dim, index)
    def vector_select(self, dim, vector_offset): return API.view_methods["vector_select"](self, dim, vector_offset)
    def view(self, dtype): return API.view_methods["view"](self, dtype)
    def rearrange(self, src_pattern, dst_pattern, fixed_sizes=None):
        return API.view_methods["rearrange"](self, src_pattern, dst_pattern, fixed_sizes)

    def reinterpret_cast(self, dtype): return API.view_methods["reinterpret_cast"](self, dtype)
    def get_pattern(self): return API.view_methods["get_pattern"](self)
    def is_contiguous(self): return API.view_methods["is_contiguous"](self)
    def is_indirect(self): return API.view_methods["is_indirect"](self)

    @property
    def strides(self): return API.view_methods["strides"](self)

    @property
    def offset(self): return API.view_methods["offset"](self)

    @property
    def size(self): return API.view_methods["size"](self)

    def astype(self, dtype):
        calls = _calls()
        if calls is not None:
            calls.op("astype", self, dtype)
        return API.language.copy(self, dtype=dtype)

    def broadcast_to(self, shape):
        calls = _calls()
        if calls is not None:
            calls.op("broadcast_to", self, shape)
        return API.language.broadcast_to(self, shape=shape)

    def expand_dims(self, axis):
        calls = _calls()
        if calls is not None:
            calls.op("expand_dims", self, axis)
        return API.language.expand_dims(self, axis)

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


# ---- keys ------------------------------------------------------------------------------
def normalize_key(t: Any, key: Any, affs: dict[int, Any] | None = None) -> tuple:
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
        elif isinstance(k, _Opaque):   # a tensor or a view
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


def _full_slices_to_arrays(t: Any, norm: list[Any]) -> list[Any]:
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


_PLANS: dict[tuple, tuple | None] = {}   # (tensor shape, on chip, key structure) -> (sizes, view shape) | None


def _plan(shape: tuple[int, ...], on_chip: bool, sig: tuple) -> tuple | None:
    """Per axis None (an int) or the expression's element count; and the view shape. None: no plan."""
    arrays = [s for s in sig if s is not None]
    nd = max(len(s) for s in arrays)
    try:
        bshape = broadcast_shapes(arrays)
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


def _compiler_view(t: Any, key: tuple) -> "View | None":
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


def _selects_first(k: Any) -> bool:
    """Whether an index picks exactly element 0 of a size-1 axis."""
    if isinstance(k, (int, np.integer)):
        return int(k) == 0
    if isinstance(k, slice):
        return (k.start in (None, 0)) and (k.stop is None or int(k.stop) >= 1) and k.step in (None, 1)
    if isinstance(k, IndexExpr):
        return bool(k.values.size) and not k.values.any()
    return False


def unknown_attribute(exc: BaseException) -> Exception | None:
    """The error for ``tensor.<name>`` that a kernel asked of a tensor lacking it (``API.missing_attribute``), from
    the plain AttributeError that Python raised; None for any other error. Made where the launch catches errors, not
    by ``_Opaque.__getattr__``: a class with ``__getattr__`` sends every attribute read of its instances through a
    slower lookup (CPython 3.11 does not specialize them), 10% more instructions per simulated instruction."""
    obj, name = getattr(exc, "obj", None), getattr(exc, "name", None)
    if type(exc) is not AttributeError or not isinstance(obj, _Opaque) or not isinstance(name, str) \
            or name.startswith("_") or API.missing_attribute is None:
        return None
    return API.missing_attribute(obj, name)


class DynamicIndex:
    """``tile + expr`` (NKI 0.1, ``t[ix, offsets[0, i] + iy]``): an index of an on-chip tensor whose value is read
    from a one-element SBUF tile when the view is made (the dynamic offset of ``tensor_copy_dynamic_src/_dst``)."""

    __slots__ = ("tile", "expr")

    def __init__(self, tile: Any, expr: Any = None) -> None:
        self.tile, self.expr = tile, expr

    def __add__(self, o: Any) -> "DynamicIndex":
        if isinstance(o, (IndexExpr, int, np.integer)) and not isinstance(o, bool):
            return DynamicIndex(self.tile, o if self.expr is None else self.expr + o)
        return NotImplemented

    __radd__ = __add__


def _dynamic_view(t: Any, key: Any) -> "View":
    """``sbuf[ix, offsets[0, i] + iy]``: each one-element tile in the key (alone or plus an index expression) is
    read now, as the engine reads its dynamic offset, and its value added; the view remembers the offset tiles for
    the trace. A loop whose offsets come from memory is not replayed (they need not move by a constant step)."""
    rt = current()
    if rt.calls is not None:
        rt.calls.unrecordable("a dynamic offset read from a tile")
    key = key if isinstance(key, tuple) else (key,)
    resolved, tiles = [], []
    for k in key:
        tile, expr = (k.tile, k.expr) if isinstance(k, DynamicIndex) else (k, None) if isinstance(k, _Opaque) \
            else (None, None)
        if tile is None:
            resolved.append(k)
            continue
        v = tile if isinstance(tile, View) else tile.full_view()
        if v.tensor.buffer != "sbuf" or dt.is_float(v.tensor.dtype) or int(_prod(v.shape)) != 1:
            raise rt.rule_error("indexing", f"a {dt.name(v.tensor.dtype)} {v.shape} tile in {v.tensor.buffer.upper()} "
                                f"cannot index on-chip tensor '{t.name}': a dynamic offset into an on-chip tensor is "
                                "one integer in SBUF; tile-valued (indirect) indices address HBM tensors in "
                                "nl.load/nl.store/dma_copy", "a dynamic offset is a scalar value resided in SBUF "
                                "(tensor_copy_dynamic_src/_dst); indirect indexing is a DMA feature")
        data, written = read(v, None, "dynamic offset")
        if written is not None and rt.options.check_uninitialized and not written.all():
            raise rt.rule_error("indexing", f"dynamic offset tile '{v.tensor.name}' was never written",
                                UninitializedReadError.rule, UninitializedReadError)
        value = 0 if data is None else int(np.asarray(data).reshape(-1)[0])
        resolved.append(value if expr is None else expr + value)
        tiles.append(v)
    if rt.watching is not None:
        rt.watching.fail("a dynamic offset read from memory moves an index")
    _fail_recording("a dynamic offset read from memory moves an index")
    view = View(t, normalize_key(t, tuple(resolved)))
    view.indirect = tuple(tiles)
    return view


def _indirect_view(t: Any, key: Any) -> "View":
    """``hbm[idx_tile, iy]``: the index tile's values (read when the view is made, as the DMA engine
    reads them) address the HBM tensor; the view remembers the index tiles for the trace."""
    rt = current()
    key = key if isinstance(key, tuple) else (key,)
    if t.on_chip:
        normalize_key(t, key)   # raises the on-chip message
    with_exprs = any(isinstance(k, IndexExpr) for k in key)
    resolved, tiles = [], []
    for k in key:
        if not isinstance(k, _Opaque):
            resolved.append(k)
            continue
        v = k if isinstance(k, View) else k.full_view()
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


def _region(t: Any, lo: Any, hi: Any, shape: tuple[int, ...], mask: Any, spans: list | None) -> Region:
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
    rt = active()
    if rt is not None and rt.watching is not None:   # loop replay checks extrapolated regions against this shape
        rt.watching.region(reg, t.shape, spans)
    return reg


class View(_Opaque):
    """A region of a tensor, produced by indexing. Holds no data."""

    __slots__ = ("tensor", "key", "shape", "advanced", "_region", "_accum_pending", "_basic", "_affs", "indirect",
                 "_box", "pattern")   # pattern: made by an access pattern (api/access.py), set only there

    def __init__(self, tensor: Any, key: tuple, affs: dict[int, Any] | None = None) -> None:
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
            shape = broadcast_shapes(arrays)
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
    def planned(cls, tensor: Any, key: tuple, shape: tuple[int, ...], basic: tuple, affs: dict[int, Any],
                box: tuple[list[int], list[int]]) -> "View":
        """An advanced view whose shape, basic key and region box a key plan already knows (``_compiler_view``)."""
        return cls.known(tensor, key, shape, True, basic, affs, box)

    @classmethod
    def known(cls, tensor: Any, key: tuple, shape: tuple[int, ...], advanced: bool = False, basic: Any = None,
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
        if getattr(self, "pattern", False) and API.index_pattern is not None:
            return API.index_pattern(self, key)   # a view of today's NkiTensor API: indexed as a pattern again
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
        rt = active()
        if rt is not None and rt.watching is not None:   # loop replay: the view-relative bounds checked below
            rt.watching.view_key(expanded, [self.key[a].stop - self.key[a].start for a in sliced_axes])
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
        API.assign(self[key], value)

    def __iadd__(self, other: Any) -> "View":
        API.accumulate(self, other)
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
