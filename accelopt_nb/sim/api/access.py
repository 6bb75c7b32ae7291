"""Access patterns: ``tensor.ap(pattern, offset, scalar_offset, vector_offset, indirect_dim, dtype)``.

An access pattern addresses a tensor's storage directly, as a row-major flat array of elements: the view's
element ``[i0, i1, ...]`` is element ``base + offset + sum(i_k * stride_k)`` of that array, for a pattern
``[[stride_0, count_0], [stride_1, count_1], ...]`` (outermost first; like ``numpy.lib.stride_tricks.as_strided``
with element strides). The view's shape is the counts; on chip, the first pair is the partition axis. ``base`` is
where the tensor or view ``.ap`` is called on starts (``offset`` adds to it). A runtime offset moves the start:
``scalar_offset`` (a ``[1, 1]`` SBUF tile, or a register) by its value times the stride of dimension
``indirect_dim`` of the tensor; ``vector_offset`` (a ``[P, 1]`` SBUF tile of an HBM tensor's view) gives each
partition its own start, replacing the partition pair's stride. (Neuron docs: ``NkiTensor.ap`` in
``nki/api/nki/language``, indirect addressing in ``nki.isa.dma_copy``.)

The result is an ordinary simulator view. When every pattern axis walks one tensor axis without wrapping into the
next (the usual case), the view's index is one arithmetic progression per axis and it reads and writes as a NumPy
slice; any other pattern is a gather/scatter through index arrays. Runtime offsets are read when the view is made,
as the DMA engine's descriptor generator reads them; trace-only, with no values, they read as 0.
"""
from __future__ import annotations

from math import prod
from typing import Any

import numpy as np

from accelopt_nb.errors import UninitializedReadError, UnsupportedAPIError
from accelopt_nb.sim.core import dtypes as dt
from accelopt_nb.sim.core.context import current
from accelopt_nb.sim.core.indexing import IndexExpr, plain
from accelopt_nb.sim.core.memory import read
from accelopt_nb.sim.core.tensor import Tensor, fully_written, reinterpreted
from accelopt_nb.sim.core.views import API as _API
from accelopt_nb.sim.core.views import View

API = "nki.language.NkiTensor.ap"
RULE = "an access pattern addresses the tensor's own storage: [[stride, count], ...], counts >= 1"


def ap(self: Tensor | View, pattern: Any, offset: Any = None, scalar_offset: Any = None, vector_offset: Any = None,
       indirect_dim: int = 0, dtype: Any = None) -> View:
    """``self.ap(...)`` (see the module docstring)."""
    rt = current()
    tensor, base, strides = _origin(self)
    pairs = _pattern(rt, pattern)
    if dtype is not None and dt.name(dtype) != dt.name(tensor.dtype):
        # the pattern counts elements of the new dtype; the view's own offset and strides are rescaled to them
        tensor, (base, *strides) = _as_dtype(rt, API, tensor, dtype, [base, *strides])
    if scalar_offset is not None and vector_offset is not None:
        raise rt.rule_error(API, "scalar_offset and vector_offset are exclusive", "one runtime offset per view")
    if not 0 <= int(indirect_dim) < len(strides):
        raise rt.rule_error(API, f"indirect_dim {indirect_dim} out of range for a view of rank {len(strides)}", RULE)
    tainted = [x for x in (offset, *[v for pair in pairs for v in pair]) if getattr(x, "deps", ())]
    start = base + (0 if offset is None else plain(offset) if isinstance(offset, int) else _int(rt, offset, "offset"))
    pairs = [(plain(s) if isinstance(s, int) else s, plain(c) if isinstance(c, int) else c) for s, c in pairs]
    tiles: tuple[View, ...] = ()
    per_partition = None
    if scalar_offset is not None:
        value, tiles = _runtime_value(rt, scalar_offset, "scalar_offset")
        start += value * strides[int(indirect_dim)]
    elif vector_offset is not None:
        if tensor.on_chip:
            raise rt.rule_error(API, "vector_offset addresses an HBM tensor, not an on-chip one",
                                "per-partition indirect addressing is a DMA feature of HBM tensors")
        per_partition, tiles = _vector(rt, vector_offset, pairs)
        per_partition = per_partition * strides[int(indirect_dim)]
    return _build(rt, tensor, start, pairs, tiles, per_partition, tainted)


def _build(rt: Any, tensor: Tensor, start: int, pairs: list[tuple[Any, Any]], tiles: tuple[View, ...] = (),
           per_partition: np.ndarray | None = None, tainted: list[Any] = ()) -> View:
    """The view of ``tensor``'s storage from flat element ``start`` along ``pairs`` ([stride, count], outermost
    first); ``tiles``: the index tiles a runtime offset was read from; ``per_partition``: each partition's own
    start, added to ``start`` (a vector offset)."""
    if tiles and rt.watching is not None:
        rt.watching.fail("a runtime offset read from memory moves an access pattern")
    key, box = (None, None) if per_partition is not None else _progressions(tensor.shape, start, pairs)
    if key is None:
        key = _gather(tensor.shape, start, pairs, per_partition)
        for x in tainted:
            for probe in x.deps:
                probe.fail("an access pattern whose offset moves with the loop variable wraps across tensor axes")
    view = tensor[key]
    if box is not None and rt.watching is not None:   # loop replay: the box each axis walks must stay in bounds
        rt.watching.key(box, tensor.shape)
    if tiles:
        view.indirect = tiles
    view.pattern = True
    return view


def index_pattern(self: View, key: Any) -> View:
    """``view[key]`` of a view an access pattern made: ints and slices (any step) of its dims, as NumPy would;
    an on-chip view keeps its partition dim (an int there leaves a dim of 1), as the NkiTensor docs say."""
    rt, tensor, base, st, sh = _layout(self, "__getitem__")
    api = f"{VIEW_API}.__getitem__"
    items = list(key) if isinstance(key, tuple) else [key]
    if any(k is Ellipsis for k in items):
        i = items.index(Ellipsis)
        items[i:i + 1] = [slice(None)] * (len(sh) - len(items) + 1)
    if len(items) > len(sh):
        raise rt.rule_error(api, f"{len(items)} indices for a view of shape {tuple(sh)}", "one index per dim at most")
    items += [slice(None)] * (len(sh) - len(items))
    pairs: list[tuple[int, int]] = []
    for d, (k, stride, n) in enumerate(zip(items, st, sh)):
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            if step < 1:
                raise rt.rule_error(api, f"slice {k} of dim {d} steps backwards", "slices step forwards")
            pairs.append((stride * step, len(range(start, stop, step))))
            base += start * stride
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            i = int(k) + (n if int(k) < 0 else 0)
            if not 0 <= i < n:
                raise rt.rule_error(api, f"index {int(k)} out of range for dim {d} of size {n}", "0 <= index < size")
            base += i * stride
            if tensor.on_chip and d == 0:
                pairs.append((stride, 1))
        else:
            raise rt.rule_error(api, f"index {k!r} of a view made by an access pattern (ints and slices only; "
                                "use select / vector_select for runtime indices)", "indices of a view are static")
        if pairs and pairs[-1][1] == 0:
            raise rt.rule_error(api, f"slice {k} of dim {d} (size {n}) is empty", "a view has no empty dim")
    return _build(rt, tensor, base, pairs or [(1, 1)])


# ---- the origin of a view: its tensor, first element and strides --------------------------------------
def _row_major(shape: tuple[int, ...]) -> list[int]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return out[::-1]


def _origin(x: Tensor | View) -> tuple[Tensor, int, list[int]]:
    """The tensor ``x`` addresses, the flat index of its first element and the stride of each of its axes."""
    rt = current()
    if isinstance(x, Tensor):
        return x, 0, _row_major(x.shape)
    t = x.tensor
    rows = _row_major(t.shape)
    if x.indirect:
        raise rt.rule_error(API, f"'{t.name}' is viewed through a runtime index already", "no chained indirection")
    if not x.advanced:
        base, strides = 0, []
        for k, r in zip(x.key, rows):
            if isinstance(k, slice):
                base += k.start * r
                strides.append(k.step * r)
            else:
                base += int(k) * r
        if t.on_chip and len(strides) == 1:
            strides.append(1)      # a 1-D on-chip view is a [P, 1] tile
        return t, base, strides
    arrays = [np.broadcast_to(k, x.shape) if isinstance(k, np.ndarray) else np.full(x.shape, k) for k in x.key]
    flat = sum(a.astype(np.int64) * r for a, r in zip(arrays, rows))
    base = int(flat[(0,) * flat.ndim])
    strides = []
    for axis, n in enumerate(flat.shape):
        if n == 1:
            strides.append(0)
            continue
        steps = np.diff(flat, axis=axis)
        if not (steps == steps.flat[0]).all():
            raise rt.rule_error(API, f"the view of '{t.name}' it is called on is no strided view of its storage",
                                RULE)
        strides.append(int(steps.flat[0]))
    return t, base, strides


def _pattern(rt: Any, pattern: Any) -> list[tuple[Any, Any]]:
    try:
        pairs = [(s, c) for s, c in pattern]
    except (TypeError, ValueError):
        raise rt.rule_error(API, f"pattern must be a list of [stride, count] pairs, got {pattern!r}", RULE) from None
    if not pairs:
        raise rt.rule_error(API, "pattern is empty", RULE)
    for s, c in pairs:
        if not isinstance(s, (int, np.integer)) or not isinstance(c, (int, np.integer)) or isinstance(s, bool):
            raise rt.rule_error(API, f"pattern entries are ints, got [{s!r}, {c!r}]", RULE)
        if c < 1:
            raise rt.rule_error(API, f"pattern count {c} must be at least 1", RULE)
    return [(s if type(s) is int or getattr(s, "deps", ()) else int(s), c if type(c) is int or getattr(c, "deps", ())
             else int(c)) for s, c in pairs]


def _int(rt: Any, x: Any, what: str) -> int:
    if isinstance(x, np.integer):
        return int(x)
    raise rt.rule_error(API, f"{what} must be an int, got {type(x).__name__} (a runtime value goes in "
                        "scalar_offset= or vector_offset=)", RULE)


# ---- runtime offsets ---------------------------------------------------------------------------------
def _index_view(rt: Any, x: Any, what: str) -> View:
    from accelopt_nb.sim.core.operands import as_view
    v = as_view(x)
    if v is None:
        raise rt.rule_error(API, f"{what} must be an integer SBUF tile (or a register), got {type(x).__name__}",
                            "runtime offsets come from SBUF")
    if not v.tensor.on_chip or v.tensor.buffer != "sbuf" or dt.is_float(v.tensor.dtype):
        raise rt.rule_error(API, f"{what} '{v.tensor.name}' must be an integer SBUF tile, got "
                            f"{dt.name(v.tensor.dtype)} in {v.tensor.buffer.upper()}", "runtime offsets come from SBUF")
    return v


def _read_ints(rt: Any, v: View, what: str) -> np.ndarray | None:
    data, written = read(v, None, API)
    if written is not None and rt.options.check_uninitialized and not written.all():
        raise rt.rule_error(API, f"{what} '{v.tensor.name}' has never-written elements", UninitializedReadError.rule,
                            UninitializedReadError)
    return None if data is None else np.asarray(data).astype(np.int64)


def _runtime_value(rt: Any, x: Any, what: str) -> tuple[int, tuple[View, ...]]:
    """The value of a scalar runtime offset (0 trace-only), and the tiles read for it."""
    register = getattr(x, "__nki_register__", None)
    if register is not None:
        return register(), ()
    v = _index_view(rt, x, what)
    if int(prod(v.shape)) != 1:
        raise rt.rule_error(API, f"{what} must hold one element, got a {v.shape} tile", "a scalar offset is [1, 1]")
    data = _read_ints(rt, v, what)
    return (0 if data is None else int(data.reshape(-1)[0])), (v,)


def _vector(rt: Any, x: Any, pairs: list[tuple[int, int]]) -> tuple[np.ndarray, tuple[View, ...]]:
    v = _index_view(rt, x, "vector_offset")
    if len(v.shape) != 2 or v.shape[1] != 1 or v.shape[0] != pairs[0][1]:
        raise rt.rule_error(API, f"vector_offset must be a [{pairs[0][1]}, 1] tile (one index per partition of the "
                            f"pattern), got {v.shape}", "one runtime index per partition")
    data = _read_ints(rt, v, "vector_offset")
    return (np.zeros(v.shape[0], np.int64) if data is None else data.reshape(-1)), (v,)


# ---- keys ------------------------------------------------------------------------------------------------
def _progressions(shape: tuple[int, ...], start: int, pairs: list[tuple[int, int]]) -> tuple[tuple | None, tuple | None]:
    """The key when each pattern axis walks one tensor axis (no wrap into the next), in the tensor's axis order:
    one arithmetic progression per tensor axis, as index expressions, and the box it spans; else (None, None)."""
    rows = _row_major(shape)
    if not 0 <= start < prod(shape):
        return None, None
    coords, rest = [], start
    for r in rows:
        coords.append(rest // r)
        rest %= r
    nd = len(pairs)
    walks: dict[int, tuple[int, int]] = {}       # tensor axis -> (pattern axis, step)
    last = -1
    for i, (stride, count) in enumerate(pairs):
        if count == 1:
            continue
        axis = next((j for j, r in enumerate(rows) if stride and stride % r == 0), None)
        if axis is None or axis in walks or axis <= last:
            return None, None
        step = stride // rows[axis]
        end = coords[axis] + step * (count - 1)
        if not 0 <= end < shape[axis]:
            return None, None
        walks[axis] = (i, step)
        last = axis
    key, box = [], []
    for axis, c in enumerate(coords):
        if axis in walks:
            i, step = walks[axis]
            n = pairs[i][1]
            values = (c + step * np.arange(n, dtype=np.int64)).reshape([n if d == i else 1 for d in range(nd)])
            key.append(IndexExpr(values, (c, step)))
            lo, hi = min(c, c + step * (n - 1)), max(c, c + step * (n - 1)) + 1
            box.append(slice(lo, hi, 1))
        else:
            key.append(IndexExpr(np.full((1,) * nd, c, np.int64), (c, 0)))
            box.append(c)
    return tuple(key), tuple(box)


def _gather(shape: tuple[int, ...], start: int, pairs: list[tuple[int, int]], per_partition: np.ndarray | None) -> tuple:
    """Index arrays of every element of the pattern (any pattern): a gather. Out-of-bounds elements keep indices
    outside their axis (so the access reports them, or ``oob_mode=skip`` drops them)."""
    counts = [c for _, c in pairs]
    flat = np.full(counts, start, np.int64)
    for i, (stride, count) in enumerate(pairs):
        if i == 0 and per_partition is not None:
            continue        # the partition axis: each partition's own start replaces the pattern's stride
        flat += (stride * np.arange(count, dtype=np.int64)).reshape([count if d == i else 1 for d in range(len(pairs))])
    if per_partition is not None:
        flat += per_partition.reshape([counts[0]] + [1] * (len(pairs) - 1))
    rows = _row_major(shape)
    return (IndexExpr(flat // rows[0]),) + tuple(IndexExpr((flat // r) % n) for r, n in zip(rows[1:], shape[1:]))


# ---- the NkiTensor view API: shape-changing views, each an access pattern over the same storage -----------
VIEW_API = "nki.language.NkiTensor"


def _layout(x: Tensor | View, method: str) -> tuple[Any, Tensor, int, list[int], list[int]]:
    """(runtime, tensor, first element, strides, shape) of ``x``: one stride per axis of ``x.shape``."""
    rt = current()
    if getattr(x, "indirect", ()):
        raise rt.rule_error(f"{VIEW_API}.{method}", f"'{x.tensor.name}' is viewed through a runtime index; an "
                            "indirect view takes no further view operations here",
                            "an indirect view is the last view of a tensor (NkiTensor.is_indirect)")
    tensor, base, strides = _origin(x)
    shape = [int(n) for n in x.shape]
    return rt, tensor, base, strides[:len(shape)], shape


def _dim(rt: Any, api: str, dim: Any, ndim: int, *, on_chip: bool = False, inclusive: bool = False) -> int:
    d = int(dim)
    top = ndim + (1 if inclusive else 0)
    if d < 0:
        d += top
    if not 0 <= d < top:
        raise rt.rule_error(api, f"dim {dim} out of range for a view of rank {ndim}", "dims index the view's shape")
    if on_chip and d == 0:
        raise rt.rule_error(api, "dim 0 of an on-chip tensor is its partition dim", "view operations keep the "
                            "partition dim of an on-chip tensor (SBUF, PSUM) outermost and whole")
    return d


def get_pattern(self) -> list[list[int]]:
    """The view's ``[[stride, count], ...]``, one pair per dimension."""
    _, _, _, strides, shape = _layout(self, "get_pattern")
    return [[s, n] for s, n in zip(strides, shape)]


def strides(self) -> tuple[int, ...]:
    """The stride of each dimension, in elements of the storage."""
    return tuple(_layout(self, "strides")[3])


def offset(self) -> int:
    """The flat storage index of the view's first element."""
    return _layout(self, "offset")[2]


def size(self) -> int:
    return int(prod(self.shape))


def is_contiguous(self) -> bool:
    """Each non-size-1 dim's stride is the product of the sizes inside it (on chip, over the free dims)."""
    _, tensor, _, strides, shape = _layout(self, "is_contiguous")
    first = 1 if tensor.on_chip else 0
    inner = 1
    for s, n in reversed(list(zip(strides, shape))[first:]):
        if n != 1 and s != inner:
            return False
        inner *= n
    return True


def is_indirect(self) -> bool:
    return bool(getattr(self, "indirect", ()))


def permute(self, dims) -> View:
    rt, tensor, base, st, sh = _layout(self, "permute")
    api = f"{VIEW_API}.permute"
    dims = [int(d) for d in dims]
    if sorted(dims) != list(range(len(sh))):
        raise rt.rule_error(api, f"dims {tuple(dims)} is no permutation of the view's {len(sh)} dims",
                            "permute reorders all of the view's dims")
    if tensor.on_chip and dims[0] != 0:
        raise rt.rule_error(api, f"dims {tuple(dims)} moves the partition dim of an on-chip tensor",
                            "an on-chip tensor's partition dim stays outermost")
    return _build(rt, tensor, base, [(st[d], sh[d]) for d in dims])


def broadcast(self, dim, size) -> View:
    rt, tensor, base, st, sh = _layout(self, "broadcast")
    api = f"{VIEW_API}.broadcast"
    d = _dim(rt, api, dim, len(sh), on_chip=tensor.on_chip)
    if sh[d] != 1 or int(size) < 1:
        raise rt.rule_error(api, f"dim {d} has size {sh[d]}; broadcast repeats a dim of size 1 (to {size})", RULE)
    pairs = list(zip(st, sh))
    pairs[d] = (0, int(size))
    return _build(rt, tensor, base, pairs)


def expand_dim(self, dim) -> View:
    rt, tensor, base, st, sh = _layout(self, "expand_dim")
    d = _dim(rt, f"{VIEW_API}.expand_dim", dim, len(sh), on_chip=tensor.on_chip, inclusive=True)
    pairs = list(zip(st, sh))
    pairs.insert(d, (0, 1))
    return _build(rt, tensor, base, pairs)


def squeeze_dim(self, dim) -> View:
    rt, tensor, base, st, sh = _layout(self, "squeeze_dim")
    api = f"{VIEW_API}.squeeze_dim"
    d = _dim(rt, api, dim, len(sh), on_chip=tensor.on_chip)
    if sh[d] != 1:
        raise rt.rule_error(api, f"dim {d} has size {sh[d]}, not 1", "squeeze_dim removes a dim of size 1")
    if len(sh) == 1:
        raise rt.rule_error(api, "a view keeps at least one dim", "squeeze_dim removes a dim of size 1")
    pairs = list(zip(st, sh))
    del pairs[d]
    return _build(rt, tensor, base, pairs)


def reshape_dim(self, dim, shape) -> View:
    rt, tensor, base, st, sh = _layout(self, "reshape_dim")
    api = f"{VIEW_API}.reshape_dim"
    sizes = [int(n) for n in shape]
    d = _dim(rt, api, dim, len(sh), on_chip=tensor.on_chip and len(sizes) > 1)
    if sizes.count(-1) > 1:
        raise rt.rule_error(api, f"at most one size of {tuple(sizes)} may be -1", "one inferred size")
    if -1 in sizes:
        known = int(prod(n for n in sizes if n != -1))
        sizes[sizes.index(-1)] = sh[d] // known if known and sh[d] % known == 0 else -1
    if any(n < 1 for n in sizes) or int(prod(sizes)) != sh[d]:
        raise rt.rule_error(api, f"sizes {tuple(shape)} do not split dim {d} of size {sh[d]}",
                            "reshape_dim keeps the dim's element count")
    inner = [int(prod(sizes[k + 1:])) for k in range(len(sizes))]
    pairs = list(zip(st, sh))
    pairs[d:d + 1] = [(st[d] * m, n) for m, n in zip(inner, sizes)]
    return _build(rt, tensor, base, pairs)


def flatten_dims(self, start_dim, end_dim) -> View:
    rt, tensor, base, st, sh = _layout(self, "flatten_dims")
    api = f"{VIEW_API}.flatten_dims"
    a = _dim(rt, api, start_dim, len(sh), on_chip=tensor.on_chip)
    b = _dim(rt, api, end_dim, len(sh))
    if b < a:
        raise rt.rule_error(api, f"end_dim {end_dim} is before start_dim {start_dim}", "start_dim <= end_dim")
    for k in range(a, b):
        if sh[k] != 1 and sh[k + 1] != 1 and st[k] != st[k + 1] * sh[k + 1]:
            raise rt.rule_error(api, f"dims {a}..{b} are not contiguous in storage (dim {k} has stride {st[k]}, "
                                f"dim {k + 1} spans {st[k + 1] * sh[k + 1]})",
                                "flatten_dims merges dims that are contiguous in storage")
    pairs = list(zip(st, sh))
    pairs[a:b + 1] = [(st[b], int(prod(sh[a:b + 1])))]
    return _build(rt, tensor, base, pairs)


def slice_(self, dim, start, end, step=1) -> View:
    rt, tensor, base, st, sh = _layout(self, "slice")
    api = f"{VIEW_API}.slice"
    d = _dim(rt, api, dim, len(sh))
    start, end, step = int(start), int(end), int(step)
    if not (0 <= start < end <= sh[d]) or step < 1:
        raise rt.rule_error(api, f"slice {start}:{end}:{step} of dim {d} (size {sh[d]})",
                            "0 <= start < end <= size and step >= 1")
    pairs = list(zip(st, sh))
    pairs[d] = (st[d] * step, -(-(end - start) // step))
    return _build(rt, tensor, base + start * st[d], pairs)


def select(self, dim, index) -> View:
    """A static (int) or runtime (``[1, 1]`` SBUF tile, or a register) index along ``dim``, which goes away
    (the partition dim of an on-chip tensor stays, of size 1)."""
    rt, tensor, base, st, sh = _layout(self, "select")
    api = f"{VIEW_API}.select"
    d = _dim(rt, api, dim, len(sh))
    pairs = list(zip(st, sh))
    keep = tensor.on_chip and d == 0
    if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
        i = int(index)
        if not 0 <= i < sh[d]:
            raise rt.rule_error(api, f"index {i} out of range for dim {d} of size {sh[d]}", "0 <= index < size")
        pairs[d] = (st[d], 1)
        if not keep:
            del pairs[d]
        return _build(rt, tensor, base + i * st[d], pairs or [(1, 1)])
    if tensor.on_chip and d == 0:
        raise rt.rule_error(api, "a runtime index cannot select partitions of an on-chip tensor",
                            "runtime selection is a DMA feature (not of the partition dim on chip)")
    value, tiles = _runtime_value(rt, index, "index")
    del pairs[d]
    return _build(rt, tensor, base + value * st[d], pairs or [(1, 1)], tiles)


def vector_select(self, dim, vector_offset) -> View:
    """Partition ``p`` of the result is ``self`` at index ``vector_offset[p]`` of dim 0 (an HBM tensor)."""
    rt, tensor, base, st, sh = _layout(self, "vector_select")
    api = f"{VIEW_API}.vector_select"
    if int(dim) != 0:
        raise rt.rule_error(api, f"dim must be 0, got {dim}", "vector_select indexes dim 0")
    if tensor.on_chip:
        raise rt.rule_error(api, f"'{tensor.name}' is on chip", "vector_select reads HBM tensors (indirect DMA)")
    v = _index_view(rt, vector_offset, "vector_offset")
    if len(v.shape) != 2 or v.shape[1] != 1:
        raise rt.rule_error(api, f"vector_offset must be a [P, 1] tile, got {v.shape}", "one index per partition")
    pairs = [(st[0], int(v.shape[0]))] + list(zip(st[1:], sh[1:]))
    per_partition, tiles = _vector(rt, vector_offset, pairs)
    return _build(rt, tensor, base, pairs, tiles, per_partition * st[0])


def rearrange(self, src_pattern, dst_pattern, fixed_sizes=None) -> View:
    """einops-style: ``src_pattern`` names each dim (a tuple of names splits one), ``dst_pattern`` orders the names
    (a tuple of names merges dims contiguous in storage)."""
    rt, tensor, base, st, sh = _layout(self, "rearrange")
    api = f"{VIEW_API}.rearrange"
    fixed = {str(k): int(v) for k, v in (fixed_sizes or {}).items()}
    if len(src_pattern) != len(sh):
        raise rt.rule_error(api, f"src_pattern {src_pattern!r} names {len(src_pattern)} dims; the view has "
                            f"{len(sh)}", "src_pattern names every dim of the view")
    axes: dict[str, tuple[int, int]] = {}     # name -> (stride, count)
    for entry, stride, n in zip(src_pattern, st, sh):
        names = [entry] if isinstance(entry, str) else [str(e) for e in entry]
        sizes = [fixed.get(name, -1) for name in names]
        if len(names) == 1:
            sizes = [n]
        elif sizes.count(-1) == 1:
            known = int(prod(z for z in sizes if z != -1))
            sizes[sizes.index(-1)] = n // known if known and n % known == 0 else 0
        if -1 in sizes or int(prod(sizes)) != n or any(z < 1 for z in sizes):
            raise rt.rule_error(api, f"cannot split a dim of size {n} into {tuple(names)} with sizes {fixed}",
                                "a split dim's sizes multiply to the dim (fixed_sizes gives all but one)")
        for k, name in enumerate(names):
            if name in axes:
                raise rt.rule_error(api, f"name {name!r} appears twice in src_pattern", "each name once")
            axes[name] = (stride * int(prod(sizes[k + 1:])), sizes[k])
    pairs: list[tuple[int, int]] = []
    used: list[str] = []
    for entry in dst_pattern:
        names = [entry] if isinstance(entry, str) else [str(e) for e in entry]
        missing = [n for n in names if n not in axes]
        if missing:
            raise rt.rule_error(api, f"dst_pattern names {missing[0]!r}, which src_pattern does not",
                                "dst_pattern uses the names of src_pattern")
        group = [axes[n] for n in names]
        for (s0, n0), (s1, n1) in zip(group, group[1:]):
            if n0 != 1 and n1 != 1 and s0 != s1 * n1:
                raise rt.rule_error(api, f"dims {tuple(names)} are not contiguous in storage", "a merged group of "
                                    "dims is contiguous in storage")
        pairs.append((group[-1][0], int(prod(n for _, n in group))))
        used += names
    if sorted(used) != sorted(axes):
        raise rt.rule_error(api, f"dst_pattern uses {sorted(used)}, src_pattern names {sorted(axes)}",
                            "dst_pattern uses each name of src_pattern once")
    if tensor.on_chip and pairs[0] != (st[0], sh[0]):
        raise rt.rule_error(api, "the rearrangement moves, splits or merges the partition dim of an on-chip tensor",
                            "an on-chip tensor's partition dim stays outermost and whole")
    return _build(rt, tensor, base, pairs)


REINTERPRET = "a reinterpreting view reads the same bytes: offsets and sizes in whole elements of the new dtype"


def _as_dtype(rt: Any, api: str, tensor: Tensor, dtype: Any, units: list[int]) -> tuple[Tensor, list[int]]:
    """``tensor``'s storage read as ``dtype``, and ``units`` (offsets, strides in elements of the old dtype) in
    elements of the new one."""
    new = dt.canonical(dtype)
    old_size, new_size = dt.itemsize(tensor.dtype), dt.itemsize(new)
    if old_size == new_size:
        return reinterpreted(tensor, new), units
    what = f"reinterpreting {dt.name(tensor.dtype)} '{tensor.name}' {tuple(tensor.shape)} as {dt.name(new)}"
    if tensor.on_chip and len(tensor.shape) == 1:
        raise rt.rule_error(api, f"{what}: its only dim is the partition dim", REINTERPRET)
    if (tensor.shape[-1] * old_size) % new_size or any((u * old_size) % new_size for u in units):
        raise rt.rule_error(api, f"{what}: its last dim or the view's offset or strides are no whole number of "
                            f"{new_size}-byte elements", REINTERPRET)
    if not fully_written(tensor):
        raise rt.rule_error(api, f"{what}: part of it was never written, and the simulator tracks validity per "
                            "element of one size (reinterpret it once it is written, or with a dtype of the same "
                            "size)", "a reinterpreting view of another element size needs a fully written tensor")
    return reinterpreted(tensor, new), [u * old_size // new_size for u in units]


def view(self, dtype) -> View:
    """The same bytes read as ``dtype`` (like ``numpy.ndarray.view``): another element size scales the last dim,
    which must be contiguous."""
    rt, tensor, base, st, sh = _layout(self, "view")
    if dt.name(dtype) == dt.name(tensor.dtype):
        return self if isinstance(self, View) else tensor.full_view()
    api = f"{VIEW_API}.view"
    old_size, new_size = dt.itemsize(tensor.dtype), dt.itemsize(dtype)
    if old_size == new_size or not sh:
        alias, (base, *st) = _as_dtype(rt, api, tensor, dtype, [base, *st])
        return _build(rt, alias, base, list(zip(st, sh)) or [(1, 1)])
    if sh[-1] != 1 and st[-1] != 1:
        raise rt.rule_error(api, f"the view's last dim has stride {st[-1]}, not 1", "view(dtype) needs a "
                            "contiguous last dim")
    if (sh[-1] * old_size) % new_size:
        raise rt.rule_error(api, f"a last dim of {sh[-1] * old_size} bytes is no whole number of {new_size}-byte "
                            f"{dt.name(dtype)} elements", REINTERPRET)
    alias, (base, *st) = _as_dtype(rt, api, tensor, dtype, [base, *st[:-1]])
    st.append(1)
    sh[-1] = sh[-1] * old_size // new_size
    return _build(rt, alias, base, list(zip(st, sh)) or [(1, 1)])


VIEW_METHODS = {"get_pattern": get_pattern, "is_contiguous": is_contiguous, "is_indirect": is_indirect,
                "permute": permute, "broadcast": broadcast, "expand_dim": expand_dim, "squeeze_dim": squeeze_dim,
                "reshape_dim": reshape_dim, "flatten_dims": flatten_dims, "slice": slice_, "select": select,
                "vector_select": vector_select, "view": view, "reinterpret_cast": view, "rearrange": rearrange}
VIEW_PROPERTIES = {"strides": strides, "offset": offset, "size": size}


# ---- tensor attributes the simulator lacks ------------------------------------------------------------------
# The documented NkiTensor API (Neuron docs, nki/api/nki/language: class NkiTensor), for the error below
NKI_TENSOR_API = ("shape", "strides", "offset", "name", "dtype", "buffer", "ndim", "size", "is_contiguous",
                  "get_pattern", "is_indirect", "permute", "broadcast", "expand_dim", "squeeze_dim", "reshape_dim",
                  "flatten_dims", "reshape", "rearrange", "slice", "select", "vector_select", "ap", "view",
                  "reinterpret_cast", "indirect")


class UnknownTensorAttribute(UnsupportedAPIError, AttributeError):
    """A tensor attribute the simulator does not have: an AttributeError (``hasattr`` works) naming the API."""


def missing_attribute(obj: Any, name: str) -> Exception:
    api = f"nki.language.NkiTensor.{name}"
    if name in NKI_TENSOR_API:
        return UnknownTensorAttribute("documented method or attribute of NKI tensors that the simulator does not "
                                      "implement", api=api)
    have = ", ".join(n for n in NKI_TENSOR_API if hasattr(type(obj), n))
    return UnknownTensorAttribute(f"NKI tensors have no attribute {name!r} (the simulator's tensors have: {have})",
                                  api=api)


_API.access_pattern = ap
_API.missing_attribute = missing_attribute
_API.view_methods = {**VIEW_METHODS, **VIEW_PROPERTIES}
_API.index_pattern = index_pattern
