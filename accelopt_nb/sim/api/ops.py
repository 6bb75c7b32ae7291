"""Shared machinery of the NKI APIs: result tiles, engine rules, and instruction emission.

Every API reads its operands through :func:`operands.operand`, computes in fp32 (or int64 for
all-integer operands), produces a fresh *result tile*, and emits one instruction. Assigning a
result tile into a buffer (``buf[i] = nl.exp(x)``) re-targets that instruction's write to the
buffer, as the NKI compiler does, instead of emitting a copy. Tile assignment and ``+=`` land here
(bound into the core's tile handles at import: ``core.views.API``).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
from math import prod as _prod

from accelopt_nb.errors import NKIRuleError, UninitializedReadError
from accelopt_nb.sim.core import dtypes as dt
from accelopt_nb.sim.core import views
from accelopt_nb.sim.core.functions import FLOAT32_INTO
from accelopt_nb.sim.core.indexing import Mask, broadcast, keep, mask_all, mask_rows_cols
from accelopt_nb.sim.core.memory import Thunk, defer, kept_box, read, write
from accelopt_nb.sim.core.operands import Operand, as_view, combine_written, operand
from accelopt_nb.sim.core.prims import REBUILD, Array, Lane, call, elementwise, is_elementwise, primitive
from accelopt_nb.sim.core.limits import PMAX, PSUM_BANK_BYTES, PSUM_BANKS
from accelopt_nb.sim.core.runtime import Runtime, current
from accelopt_nb.sim.core.tensor import Tensor
from accelopt_nb.sim.core.views import View

# Which buffers each engine may read and write (Trainium arch guide, memory figure).
ENGINE_READS = {"tensor": {"sbuf"}, "vector": {"sbuf", "psum"}, "scalar": {"sbuf", "psum"},
                "gpsimd": {"sbuf"}, "dma": {"sbuf", "hbm", "psum"}}
ENGINE_WRITES = {"tensor": {"psum"}, "vector": {"sbuf", "psum"}, "scalar": {"sbuf", "psum"},
                 "gpsimd": {"sbuf"}, "dma": {"sbuf", "hbm"}}
ENGINE_NAMES = {"tensor": "TensorE", "vector": "VectorE", "scalar": "ScalarE", "gpsimd": "GpSimdE", "dma": "DMA"}


def mask_array(mask: Any) -> np.ndarray | None:
    if mask is None:
        return None
    if isinstance(mask, Mask):
        return mask.values
    if isinstance(mask, (bool, np.bool_)):
        return np.asarray(mask)
    raise current().rule_error("mask", f"mask must be a predicate over nl.arange expressions, got {type(mask).__name__}",
                               "mask is a compile-time affine predicate")


def check_engine_access(rt: Runtime, api: str, engine: str, operands: Sequence[Operand], dest_buffer: str | None) -> None:
    for op in operands:
        buf = op.buffer
        if buf is not None and buf not in ENGINE_READS[engine]:
            raise rt.rule_error(api, f"{ENGINE_NAMES[engine]} cannot read {buf.upper()} (operand '{op.view.tensor.name}')",
                                "engine/buffer connectivity: TensorE reads SBUF only; GpSimdE never touches PSUM")
    if dest_buffer is not None and dest_buffer not in ENGINE_WRITES[engine]:
        raise rt.rule_error(api, f"{ENGINE_NAMES[engine]} cannot write {dest_buffer.upper()}",
                            "engine/buffer connectivity: TensorE writes PSUM only; GpSimdE never touches PSUM")


def check_tile_shape(rt: Runtime, api: str, shape: tuple[int, ...], dtype: Any, buffer: str) -> None:
    if shape and shape[0] > PMAX:
        raise rt.rule_error(api, f"partition dimension {shape[0]} exceeds the architecture limit of {PMAX}",
                            "partition dim <= 128")
    if buffer == "psum":
        # a PSUM tile may span banks (nl.tile_size.psum_num_banks; "psum_fmax ... does not represent the free-dim
        # size per partition"); one matmul's output stays within one bank (check_psum_bank)
        per_partition = int(_prod(shape[1:])) * dt.itemsize(dtype) if len(shape) > 1 else dt.itemsize(dtype)
        if per_partition > PSUM_BANKS * PSUM_BANK_BYTES:
            raise rt.rule_error(api, f"PSUM tile of {per_partition} bytes per partition exceeds PSUM's "
                                f"{PSUM_BANKS} x 2 KiB banks (shape {shape}, {dt.name(dtype)})",
                                "PSUM tile <= 16 KiB per partition (8 banks of 512 fp32)")


def check_psum_bank(rt: Runtime, api: str, dest: View) -> None:
    """A TensorE instruction writes within one 2 KiB PSUM bank (NC-v2/v3; a tile starts on a bank boundary)."""
    t = dest.tensor
    if t.buffer != "psum":
        return
    reg = dest.region()
    free = t.shape[t.par_axis + 1:]
    strides = [int(_prod(free[i + 1:])) for i in range(len(free))]
    lo = sum(reg.lo[t.par_axis + 1 + i] * st for i, st in enumerate(strides))
    hi = sum((reg.hi[t.par_axis + 1 + i] - 1) * st for i, st in enumerate(strides)) + 1
    item = dt.itemsize(t.dtype)
    if (lo * item) // PSUM_BANK_BYTES != (hi * item - 1) // PSUM_BANK_BYTES:
        raise rt.rule_error(api, f"a TensorE result written to bytes {lo * item}..{hi * item - 1} of each partition "
                            f"of '{t.name}' crosses a 2 KiB PSUM bank boundary",
                            "one matmul's output lies within one PSUM bank (512 fp32 per partition)")


_DEFERRED = np.empty(0, np.float32)   # the data of a tile whose values are deferred (never read: see memory.defer)


@elementwise
def identity(x: Any) -> Any:
    return x


@elementwise
def reciprocal_of(x: Any) -> Any:
    return 1.0 / x


@primitive(replay=REBUILD)
def broadcast_copy(data: np.ndarray, *, shape: tuple[int, ...]) -> np.ndarray:
    return broadcast(data, shape).copy()


@primitive(replay=REBUILD, lane=Lane())
def copied(data: np.ndarray) -> np.ndarray:
    """A copy of its own (a view of another tile's storage must not alias it)."""
    return np.copy(data)


def new_result(rt: Runtime, api: str, shape: tuple[int, ...], dtype: Any, buffer: str,
               data: np.ndarray | None, written: np.ndarray | None, mask: np.ndarray | None,
               thunk: tuple | None = None) -> Tensor:
    """A fresh result tile; ``thunk`` (values mode) computes its values later (``memory.defer``)."""
    shape = tuple(map(int, shape))
    if len(shape) == 1:
        shape = (shape[0], 1)
        if data is not None:
            data = data.reshape(shape)
        if written is not None and written.shape == shape[:1]:   # e.g. a keepdims=False reduction
            written = written.reshape(shape)
    check_tile_shape(rt, api, shape, dtype, buffer)
    try:
        m = None if mask is None else broadcast(mask, shape)
    except ValueError:
        raise rt.rule_error(api, f"mask of shape {tuple(np.shape(mask))} does not fit the result tile {shape}",
                            "a mask is a predicate over the instruction's output tile") from None
    if m is not None and not mask_all(m):  # an all-true mask keeps every element: no validity to carry
        written = m if written is None else (broadcast(written, shape) & m)
    elif written is not None and written.shape != shape:
        written = broadcast(written, shape).copy()
    if thunk is not None:
        data = _DEFERRED
    elif data is not None:
        if data.shape != shape:
            data = call(broadcast_copy, data, shape=shape)
        elif data.base is not None or not data.flags.writeable:
            data = call(copied, data)  # a view (e.g. nl.copy's identity) must not alias its source's storage
    t = Tensor(rt, shape, dtype, buffer, "result", data=data, written=written if written is not None else True,
               raw=True)
    if thunk is not None:
        defer(t, thunk)
    # a mask value's broadcast is read-only too: its summaries are kept like the mask's (emit_for, regions)
    t._mask = None if mask is None else broadcast(mask, shape)
    if isinstance(mask, np.ndarray) and not mask.flags.writeable:
        keep(t._mask)
    return t


def emit_for(rt: Runtime, out: Tensor | None, engine: str, op: str, api: str, operands: Sequence[Operand],
             attrs: dict | None = None, *, partitions: int | None = None, free: int | None = None,
             extra_reads: Sequence[Any] = (), accumulate: bool = False):
    reads = tuple([o.region for o in operands if o.view is not None]) + tuple(extra_reads)
    writes = () if out is None else (out.tile_region(out._mask),)
    shape = out.shape if out is not None else (operands[0].shape if operands else (1, 1))
    p = partitions if partitions is not None else (shape[0] if shape else 1)
    n = free if free is not None else (int(_prod(shape[1:])) if len(shape) > 1 else 1)
    if out is not None and out._mask is not None:
        # the compiler shrinks a masked instruction to the elements the mask keeps
        rows, cols = mask_rows_cols(out._mask, out.shape)
        width = int(_prod(out.shape[1:]))
        p = min(p, rows) if partitions is None else p
        n = max(1, int(np.ceil(n * cols / width))) if width else n
    ins = rt.emit(engine, op, api, reads, writes, p, n, tuple(dt.name(o.dtype) for o in operands if not o.scalar),
                  dt.name(out.dtype) if out is not None else "", accumulate=accumulate, attrs=attrs)
    if out is not None:
        out._producer = ins
    return ins


def broadcast_shape(rt: Runtime, api: str, operands: Sequence[Operand]) -> tuple[int, ...]:
    shapes = [o.shape for o in operands if not o.scalar]
    try:
        return tuple(np.broadcast_shapes(*shapes)) if shapes else (1, 1)
    except ValueError:
        raise rt.rule_error(api, f"operand shapes {shapes} do not broadcast", "element-wise operands must broadcast") from None


def deferrable(fns: Sequence[Any], values: Sequence[Any], dtype: Any, shape: tuple[int, ...]) -> bool:
    """Whether a result can be computed later, maybe into its destination (``memory.defer``): NumPy ufuncs
    (or ``FLOAT32_INTO`` functions) of float32 arrays and scalars giving a float32 tile (then ``out=``
    rounds exactly as the result tile and its copy would)."""
    if dtype != dt.float32 or len(shape) < 2 or not all(map(computes_into, fns)):
        return False
    arrays = 0
    for v in values:
        if type(v) is np.float32:
            continue
        if type(v) is not np.ndarray or v.dtype != np.float32:
            return False
        arrays += 1
    return arrays > 0   # the ufunc's result has the tile's (broadcast) shape


def computes_into(fn: Any) -> bool:
    """Whether ``fn(*args, out=dst)`` computes into ``dst``: a single-output ufunc or a ``FLOAT32_INTO`` function."""
    return (type(fn) is np.ufunc and fn.nout == 1) or fn in FLOAT32_INTO


def _ufunc_lanes(args: list, params: dict) -> bool:
    """Lanes of ``ufunc_into``: a single-output ufunc, elementwise, or matmul on operands of rank 2 or more."""
    fn = params["ufunc"]
    if type(fn) is not np.ufunc or fn.nout != 1:
        return False
    if fn.signature is None:
        return True
    return fn is np.matmul and all(a.rank >= 2 for a in args[1:] if isinstance(a, Array))


@primitive(replay=REBUILD, lane=Lane(accepts=_ufunc_lanes), writes=0)
def ufunc_into(dst: np.ndarray | None, *args: Any, ufunc: np.ufunc) -> np.ndarray:
    """The deferred thunk of a :func:`deferrable` ufunc (elementwise ops, ``nc_matmul``): into ``dst`` or new."""
    return ufunc(*args) if dst is None else ufunc(*args, out=dst)


@primitive(replay=REBUILD, lane=Lane(accepts=lambda args, params: is_elementwise(params["fn"])))
def _eager(*args: Any, fn: Callable[..., Any], is_float: bool) -> np.ndarray:
    with np.errstate(all="ignore"):
        data = np.asarray(fn(*args))
    return data.astype(np.float32, copy=False) if is_float else data


def elementwise(api: str, engine: str, op: str, fn: Callable[..., np.ndarray], args: Sequence[Any], *,
                dtype: Any = None, mask: Any = None, attrs: dict | None = None, out_dtype_default: Any = None,
                buffer: str = "sbuf") -> Tensor:
    rt = current()
    m = mask_array(mask)
    # a ragged tile's box, computed into its destination: only a function that computes into memory can, and
    # only into float32 (a result asked for in another dtype is computed whole: its box is not read for nothing)
    wanted = dtype if dtype is not None else out_dtype_default
    box = (None if m is None or rt.options.trace_only or not computes_into(fn)
           or (wanted is not None and dt.canonical(wanted) != dt.float32) else _tile_box(m, args))
    opnds = None if box is None else [operand(a, api, mask=m, box=box) for a in args]
    if opnds is None or None in opnds:
        box, opnds = None, [operand(a, api, mask=m) for a in args]
    check_engine_access(rt, api, engine, opnds, None)
    shape = broadcast_shape(rt, api, opnds)
    dtype = _promoted(opnds, dtype if dtype is not None else out_dtype_default)
    data = None
    deferred = not rt.options.trace_only and deferrable((fn,), [o.data for o in opnds], dtype, shape)
    if box is not None and not deferred:   # computed whole after all
        box, opnds = None, [operand(a, api, mask=m) for a in args]
        deferred = deferrable((fn,), [o.data for o in opnds], dtype, shape)
    if not rt.options.trace_only and not deferred:
        data = call(_eager, *[o.data for o in opnds], fn=fn, is_float=dt.is_float(dtype))
    written = combine_written(*[o.written for o in opnds], shape=shape)
    args = [o.data for o in opnds]
    thunk = None if not deferred else Thunk(ufunc_into, tuple(args), {"ufunc": fn}, box)
    out = new_result(rt, api, shape, dtype, buffer, data, written, m, thunk)
    a = {"num_inputs": sum(1 for o in opnds if not o.scalar),
         "psum_input": any(o.buffer == "psum" for o in opnds)}
    if attrs:
        a.update(attrs)
    emit_for(rt, out, engine, op, api, opnds, a)
    return out


def copy_tile(src: Any, *, mask: Any = None, dtype: Any = None) -> Tensor:
    """``nl.copy``: a VectorE copy (also the PSUM evacuation other APIs make before a GpSimdE read)."""
    return elementwise("nl.copy", "vector", "tensor_copy", identity, [src], dtype=dtype, mask=mask,
                       out_dtype_default=None)


def random_generator(rt: Runtime) -> np.random.Generator:
    """The launch's generator (``Runtime.rng``): seeded with 0 at its first use unless ``nl.random_seed`` set it, so
    a launch's random values depend on the launch alone, not on what ran before it in the process."""
    if rt.rng is None:
        rt.rng = np.random.default_rng(0)
    return rt.rng


def dropout(x: Any, rate: Any, *, dtype: Any = None, mask: Any = None) -> Tensor:
    """``nl.dropout`` (and ``nisa.dropout``): elements kept with probability ``1 - rate``, scaled by its inverse."""
    keep = None
    rt = current()
    if not rt.options.trace_only:
        op = operand(x, "nl.dropout", allow_scalar=False)
        keep = (random_generator(rt).random(op.shape) >= float(rate)).astype(np.float32) / np.float32(1 - float(rate))
    return elementwise("nl.dropout", "vector", "dropout",
                       (lambda a: a * keep) if keep is not None else (lambda a: a), [x], dtype=dtype, mask=mask)


def _promoted(opnds: Sequence[Operand], dtype: Any) -> Any:
    """The result dtype: ``dtype`` if given, else NKI promotion (Python scalars are weakly typed: int->int32,
    float->fp32)."""
    if dtype is None:
        for o in opnds:
            dtype = o.dtype if dtype is None else dt.promote(dtype, o.dtype)
    return dt.canonical(dtype)


def _tile_box(mask: np.ndarray, args: Sequence[Any]) -> tuple[slice, ...] | None:
    """The box ``mask`` keeps of an elementwise instruction whose tile operands all have the tile's shape."""
    shapes = {v.shape for v in map(as_view, args) if v is not None}
    return kept_box(mask, shapes.pop()) if len(shapes) == 1 else None


# ---- assignment ------------------------------------------------------------------------------
def copy_into(dest: View, value: Any, api: str, reduction: bool = False) -> None:
    rt = current()
    dshape = dest.shape
    if isinstance(value, (int, float, bool, np.number)):
        data = None if rt.options.trace_only else np.full(dshape, value, dtype=np.float32 if dt.is_float(dest.dtype) else np.int64)
        write(dest, data, None, None, api)
        rt.emit("vector", "memset", api, (), (dest.region(),), dshape[0], int(_prod(dshape[1:])) if len(dshape) > 1 else 1,
                (), dt.name(dest.dtype), attrs={"value": float(value)})
        return
    src_view = as_view(value)
    if src_view is None:
        raise rt.rule_error(api, f"cannot assign a {type(value).__name__} to tile '{dest.tensor.name}'",
                            "tiles are assigned from NKI API results, tiles or scalars")
    src = src_view.tensor
    sshape = src_view.shape
    if sshape != dshape:
        if int(_prod(sshape)) == int(_prod(dshape)) and sshape[0] == dshape[0]:
            pass  # same tile, different free-dim grouping
        else:
            try:
                np.broadcast_shapes(sshape, dshape)
                if np.broadcast_shapes(sshape, dshape) != tuple(dshape):
                    raise ValueError
            except ValueError:
                raise rt.rule_error(api, f"shape mismatch: cannot assign a {sshape} tile to '{dest.tensor.name}' view "
                                    f"of shape {dshape}", "assigned tile must match the destination shape") from None
    if not src.on_chip:
        raise rt.rule_error(api, f"cannot assign HBM tensor '{src.name}' to an on-chip tile; use nl.load",
                            "HBM is read by DMA only")
    producer = src._producer
    # only a whole, unread result tile can become the producing instruction's destination
    retarget = (isinstance(value, Tensor) and src.kind == "result" and not src._consumed and producer is not None
                and dest.tensor.buffer in ENGINE_WRITES[producer.engine] and int(_prod(sshape)) == int(_prod(dshape)))
    mask = src._mask if retarget else None
    if retarget:
        if producer.engine == "tensor":
            check_psum_bank(rt, api, dest)
        src._consumed = True
        pending = rt.pending_reduction
        if pending is not None and pending[0] is src:  # dst[...] = nl.loop_reduce(...): dst is the accumulator
            rt.pending_reduction = None
            pending[1].reduce_into(dest, src, api)
            return
        # the tile's values: a deferred result is computed straight into a float32 destination (memory.write)
        written = None if src._written is None else (src._written.reshape(dshape) if sshape != dshape
                                                     else src._written)
        if mask is not None and sshape != dshape:
            mask = mask.reshape(dshape)
        write(dest, None, written, mask, api, reduction=reduction, tile=src)
        # the result tile's region becomes dest's; the instruction's other writes (a reduce_res) stay
        producer.writes = (dest.region(mask),) + tuple(producer.writes[1:])
        producer.out_dtype = dt.name(dest.dtype)
        if src.dtype == dest.dtype:   # else the trace keeps the tile: its dtype is what the instruction computed in
            rt.hide_result(src.id)
        return
    # a real copy: PSUM->SBUF evacuation or tile-to-tile move
    op = operand(src_view, api)
    engine = "vector"
    check_engine_access(rt, api, engine, [op], dest.tensor.buffer)
    values = op.data
    if values is not None and sshape != dshape and int(_prod(sshape)) == int(_prod(dshape)):
        values = values.reshape(dshape)
    written = op.written
    if written is not None and sshape != dshape and written.size == int(_prod(dshape)):
        written = written.reshape(dshape)
    write(dest, values, written, None, api, reduction=reduction)
    rt.emit(engine, "tensor_copy", api, (op.region,), (dest.region(),), dshape[0],
            int(_prod(dshape[1:])) if len(dshape) > 1 else 1, (dt.name(src.dtype),), dt.name(dest.dtype),
            attrs={"psum_input": src.buffer == "psum"})


def accumulate_into(dest: View, value: Any) -> None:
    """``dest += value``: PSUM accumulation for matmul results, otherwise a VectorE add."""
    if isinstance(value, Tensor):  # a whole matmul result accumulates in place into its PSUM destination
        producer = value._producer
        if (value.kind == "result" and not value._consumed and producer is not None and producer.engine == "tensor"
                and dest.tensor.buffer == "psum" and value.shape == dest.shape):
            check_psum_bank(current(), "+=", dest)
            value._consumed = True
            write(dest, value._data, value._written, value._mask, "+=", accumulate=True)
            producer.writes = (dest.region(),)
            producer.accumulate = True
            if value.dtype == dest.dtype:
                current().hide_result(value.id)
            return
    result = views.API.language.add(dest, value, dtype=dest.dtype)
    copy_into(dest, result, "+=", reduction=True)


def check_output_valid(rt: Runtime, api: str, written: np.ndarray | None, dest_name: str) -> None:
    """A store of values computed from never-written memory into HBM is an error."""
    if written is None or not rt.options.check_uninitialized:
        return
    bad = int(np.count_nonzero(~written))
    if bad:
        raise rt.rule_error(api, f"{bad} element(s) stored to '{dest_name}' were computed from on-chip memory that was "
                            "never written", UninitializedReadError.rule, UninitializedReadError)


def reduce_axes(rt: Runtime, api: str, shape: tuple[int, ...], axis: Any) -> tuple[int, ...]:
    if axis is None:
        axes = tuple(range(1, len(shape)))
    elif isinstance(axis, (list, tuple)):
        axes = tuple(int(a) for a in axis)
    else:
        axes = (int(axis),)
    axes = tuple(a % len(shape) for a in axes)
    if 0 in axes:
        raise rt.rule_error(api, "cannot reduce along the partition axis (axis 0) on VectorE; transpose first or use "
                            "a matmul with a ones vector", "reductions run over free axes only")
    return axes


def assign(dest: View, value: Any) -> None:
    """``dest[...] = value``: write a result tile, copy a tile, or fill with a scalar."""
    rt = current()
    if rt.calls is not None:
        rt.calls.store("assign", dest, value)
    if isinstance(value, View) and value._accum_pending and value.tensor is dest.tensor:
        value._accum_pending = False
        return  # the second half of an augmented assignment (psum[i] += x)
    if not dest.tensor.on_chip:
        raise rt.rule_error("assignment", f"cannot assign to HBM tensor '{dest.tensor.name}' inside a kernel; "
                            "use nl.store (or nisa.dma_copy)", "HBM is written by DMA only")
    dest.check_tile("assignment")
    copy_into(dest, value, api="assignment")


def accumulate(dest: View, value: Any) -> None:
    """``dest += value``."""
    rt = current()
    if rt.calls is not None:
        rt.calls.store("accumulate", dest, value)
    if not dest.tensor.on_chip:
        raise rt.rule_error("+=", f"cannot accumulate into HBM tensor '{dest.tensor.name}'",
                            "HBM is written by DMA only")
    dest.check_tile("+=")
    accumulate_into(dest, value)


views.API.assign = assign
views.API.accumulate = accumulate

__all__ = ["NKIRuleError", "read"]
