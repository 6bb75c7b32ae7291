"""``neuronxcc.nki.language`` (``nl``) on the simulator.

Creation, memory movement, loops, SPMD ids, element-wise math, reductions, matmul and
transpose. High-level ``nl`` calls lower to the instructions the compiler would emit
(e.g. ``nl.exp`` -> one ScalarE activation; ``nl.matmul`` without ``transpose_x`` -> a PE
transpose plus the matmul).
"""
from __future__ import annotations

import builtins
import sys
from types import SimpleNamespace
from typing import Any

import ml_dtypes as _ml_dtypes
import numpy as np
from math import prod as _prod

from accelopt_nb.errors import UnsupportedAPIError

from accelopt_nb.sim.api import access as _access  # noqa: F401 (binds tensor.ap and the missing-method error)
from accelopt_nb.sim.api import isa as _isa
from accelopt_nb.sim.api import ops as _ops
from accelopt_nb.sim.api.launch import nc, spmd_dim  # noqa: F401 (re-exported)
from accelopt_nb.sim.core import dtypes as _dt
from accelopt_nb.sim.core import views as _views
from accelopt_nb.sim.core.functions import ACTIVATIONS, ALU, SCALAR_ENGINE_FUNCS, op_name
from accelopt_nb.sim.core.indexing import IndexExpr, Mask, arange, ds, mgrid  # noqa: F401 (re-exported)
from accelopt_nb.sim.core.indexing import broadcast as _broadcast
from accelopt_nb.sim.core.indexing import mask_rows_cols as _mask_rows_cols
from accelopt_nb.sim.core.limits import (BN_STATS_FMAX, GEMM_MOVING_FMAX, GEMM_STATIONARY_FMAX, PMAX, PSUM_BANKS,
                                         PSUM_FMAX)
from accelopt_nb.sim.core.memory import Thunk as _Thunk
from accelopt_nb.sim.core.memory import box_writable as _box_writable
from accelopt_nb.sim.core.memory import boxed_read as _boxed_read
from accelopt_nb.sim.core.memory import copy_of as _copy_of
from accelopt_nb.sim.core.memory import kept_box as _kept_box
from accelopt_nb.sim.core.memory import read, write
from accelopt_nb.sim.core.memory import takes_box as _takes_box
from accelopt_nb.sim.core.operands import as_view, operand
from accelopt_nb.sim.core.prims import REBUILD as _REBUILD
from accelopt_nb.sim.core.prims import Lane as _Lane
from accelopt_nb.sim.core.prims import call as _call
from accelopt_nb.sim.core.prims import elementwise as _elementwise
from accelopt_nb.sim.core.prims import fail as _fail
from accelopt_nb.sim.core.prims import lane_axes as _lane_axes
from accelopt_nb.sim.core.prims import primitive as _primitive
from accelopt_nb.sim.core.prims import reduces_over_axes as _reduces_over_axes
from accelopt_nb.sim.core.runtime import LoopIndex as _LoopIndex
from accelopt_nb.sim.core.runtime import NoReorder as _NoReorder
from accelopt_nb.sim.core.runtime import (ParDim, current, hbm, par_dim, private_hbm, psum, sbuf,  # noqa: F401
                                          shared_hbm)
from accelopt_nb.sim.core.tensor import Tensor
from accelopt_nb.sim.core.views import View

# ---- dtypes --------------------------------------------------------------------------------------
float32, float16, bfloat16, tfloat32 = _dt.float32, _dt.float16, _dt.bfloat16, _dt.tfloat32
float8_e4m3, float8_e5m2 = _dt.float8_e4m3, _dt.float8_e5m2
int8, int16, int32, uint8, uint16, uint32 = _dt.int8, _dt.int16, _dt.int32, _dt.uint8, _dt.uint16, _dt.uint32
bool_ = _dt.bool_
fp32 = SimpleNamespace(min=np.float32(np.finfo(np.float32).min), max=np.float32(np.finfo(np.float32).max))

def finfo(dtype) -> Any:
    """``nl.finfo``: machine limits of a float type (bf16/fp8 through ml_dtypes, like np.finfo)."""
    d = _dt.canonical(dtype)
    if not _dt.is_float(d):
        raise UnsupportedAPIError(f"nl.finfo takes a floating-point dtype, got {_dt.name(d)} (use nl.iinfo)", api="nl.finfo")
    return _ml_dtypes.finfo(_dt.storage(d))


def iinfo(dtype) -> Any:
    """``nl.iinfo``: machine limits of an integer type."""
    d = _dt.canonical(dtype)
    if _dt.is_float(d):
        raise UnsupportedAPIError(f"nl.iinfo takes an integer dtype, got {_dt.name(d)} (use nl.finfo)", api="nl.iinfo")
    return np.iinfo(_dt.storage(d))


_SCALAR_TYPES = (int, float, bool, np.number)   # an operand that is a Python or NumPy scalar, not a tile


class _UnknownConstant(UnsupportedAPIError, AttributeError):
    """A constant the simulator does not have: an AttributeError (``hasattr`` works) that names the API."""


class _TileSize:
    """``nl.tile_size``: the hardware's tile limits (the docs' ``_TileSize``), trn1 values.

    SBUF: 128 partitions x 192 KiB on trn1, of which 16 KiB per partition are reserved for the compiler, so
    ``total_available_sbuf_size`` (usable bytes per partition, a deprecated name the NKI library still reads) is
    176 KiB (Neuron docs: trn1 architecture and direct allocation guides). PSUM: 8 banks of 2 KiB per partition.
    The docs give no values for the alignment constants: reading one is refused by name.
    """

    pmax = PMAX
    psum_fmax = PSUM_FMAX                      # deprecated name of psum_bank_fmax
    psum_bank_fmax = PSUM_FMAX
    psum_bank_fmax_bytes = PSUM_FMAX * 4
    psum_num_banks = PSUM_BANKS
    gemm_stationary_fmax = GEMM_STATIONARY_FMAX
    gemm_moving_fmax = GEMM_MOVING_FMAX
    bn_stats_fmax = BN_STATS_FMAX
    sbuf_fmax_bytes = 192 * 1024
    sbuf_fmax = sbuf_fmax_bytes // 4
    sbuf_size_bytes = PMAX * sbuf_fmax_bytes
    total_available_sbuf_size = 176 * 1024

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        undocumented = name in ("psum_min_align", "sbuf_min_align")
        raise _UnknownConstant(f"nl.tile_size.{name}: " + ("documented, but the docs give no value for it"
                                  if undocumented else "no such tile size constant"), api=f"nl.tile_size.{name}")

    def __repr__(self) -> str:
        return "nl.tile_size"


tile_size = _TileSize()


# ---- creation ------------------------------------------------------------------------------------
def _parse_shape(rt, api: str, shape: Any) -> tuple[tuple[int, ...], int]:
    if isinstance(shape, (int, np.integer, ParDim)):
        shape = (shape,)
    dims, par_axis = [], 0
    for i, d in enumerate(shape):
        if isinstance(d, ParDim):
            par_axis = i
            dims.append(d.size)
        else:
            try:
                dims.append(int(d))
            except (TypeError, ValueError):
                raise rt.rule_error(api, f"shape entries must be ints, got {d!r}", "shapes are compile-time ints") from None
    if any(d <= 0 for d in dims):
        raise rt.rule_error(api, f"shape {tuple(dims)} has a non-positive dimension", "shapes are positive")
    return tuple(dims), par_axis


def _buffer_name(rt, api: str, buffer: Any) -> tuple[str, str]:
    b = sbuf if buffer is None else buffer
    name = getattr(b, "name", None)
    if name not in ("sbuf", "psum", "hbm", "private_hbm", "shared_hbm"):
        raise rt.rule_error(api, f"unknown buffer {buffer!r}", "buffer is nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm or nl.private_hbm")
    return ("hbm" if "hbm" in name else name), name


def _allocate(api: str, shape, dtype, buffer, name: str, fill: Any, *, lazy: bool = False) -> Tensor:
    rt = current()
    dims, par_axis = _parse_shape(rt, api, shape)
    buf, raw_name = _buffer_name(rt, api, buffer)
    dtype = _dt.canonical(dtype if dtype is not None else float32)
    if buf != "hbm":
        p = dims[par_axis] if len(dims) > par_axis else 1
        if p > PMAX:
            raise rt.rule_error(api, f"partition dimension {p} exceeds the architecture limit of {PMAX}",
                                "partition dim <= 128 (put larger extents in block dims before par_dim)")
        if len(dims) - par_axis < 2 and buf == "psum":
            pass
        _ops.check_tile_shape(rt, api, dims[par_axis:], dtype, buf)
    else:
        par_axis = 0
    if raw_name == "shared_hbm" and rt.grid:
        # every SPMD instance declares the output; all of them share one tensor
        idx = rt.shared_hbm_cursor
        rt.shared_hbm_cursor += 1
        if idx < len(rt.shared_hbm):
            return rt.shared_hbm[idx]
    kind = "output" if raw_name == "shared_hbm" else "internal"
    written = fill is not None
    t = Tensor(rt, dims, dtype, buf, kind, name=name, par_axis=par_axis, written=written, fill=fill)
    placement = getattr(buffer, "trace_record", None)
    if placement is not None and not rt.force_auto_alloc and t.id in rt.trace.tensors:
        rt.trace.tensors[t.id].allocation = placement()
    if raw_name == "shared_hbm" and rt.grid:
        rt.shared_hbm.append(t)
    if fill is not None and buf != "hbm" and not lazy:
        per_partition = int(_prod(dims[par_axis + 1:])) if len(dims) > par_axis + 1 else 1
        nblocks = int(_prod(dims[:par_axis])) if par_axis else 1
        rt.emit("vector", "memset", api, (), (t.full_view().region(),), dims[par_axis], per_partition * nblocks,
                (), _dt.name(dtype), attrs={"value": float(fill)})
    return t


def ndarray(shape, dtype=float32, *, buffer=None, name: str = "", **kwargs) -> Tensor:
    return _allocate("nl.ndarray", shape, dtype, buffer, name, None)


def empty_like(a, dtype=None, *, buffer=None, name: str = "", **kwargs) -> Tensor:
    t = a.tensor if isinstance(a, View) else a
    return _allocate("nl.empty_like", a.shape, dtype or t.dtype, buffer if buffer is not None else _buf_of(t), name, None)


def zeros(shape, dtype=float32, *, buffer=None, name: str = "", lazy_initialization: bool = False, **kwargs) -> Tensor:
    return _allocate("nl.zeros", shape, dtype, buffer, name, 0, lazy=lazy_initialization)


def ones(shape, dtype=float32, *, buffer=None, name: str = "", **kwargs) -> Tensor:
    return _allocate("nl.ones", shape, dtype, buffer, name, 1)


def full(shape, fill_value, dtype=float32, *, buffer=None, name: str = "", lazy_initialization: bool = False,
         **kwargs) -> Tensor:
    return _allocate("nl.full", shape, dtype, buffer, name, fill_value, lazy=lazy_initialization)


def zeros_like(a, dtype=None, *, buffer=None, name: str = "", **kwargs) -> Tensor:
    t = a.tensor if isinstance(a, View) else a
    return _allocate("nl.zeros_like", a.shape, dtype or t.dtype, buffer if buffer is not None else _buf_of(t), name, 0)


def ones_like(a, dtype=None, *, buffer=None, name: str = "", **kwargs) -> Tensor:
    t = a.tensor if isinstance(a, View) else a
    return _allocate("nl.ones_like", a.shape, dtype or t.dtype, buffer if buffer is not None else _buf_of(t), name, 1)


def _buf_of(t: Tensor):
    return {"sbuf": sbuf, "psum": psum, "hbm": hbm}[t.buffer]


def shared_constant(constant, dtype=None, **kwargs) -> Tensor:
    """An HBM tensor holding host data (e.g. an identity matrix for PE transposes)."""
    rt = current()
    arr = np.asarray(constant)
    dtype = _dt.canonical(dtype) if dtype is not None else _dt.canonical(arr.dtype)
    data = None if rt.options.trace_only else _dt.cast(arr.astype(np.float32) if _dt.is_float(dtype) else arr, dtype)
    return Tensor(rt, arr.shape, dtype, "hbm", "constant", name="shared_constant", data=data, written=True)


def shared_identity_matrix(n, dtype=uint8, **kwargs) -> Tensor:
    return shared_constant(np.eye(int(n)), dtype=dtype)


# ---- loops and SPMD -----------------------------------------------------------------------------
def _range_args(args) -> range:
    return range(*[int(a) for a in args])


def affine_range(*args, **kwargs):
    return current().loop("affine", _range_args(args))


def sequential_range(*args, directives=None, **kwargs):
    # directives=nki.compiler.no_reorder(): the whole loop is one no_reorder block
    return current().loop("sequential", _range_args(args), no_reorder=isinstance(directives, _NoReorder))


def static_range(*args, **kwargs):
    return current().loop("static", _range_args(args))


def program_id(axis: int = 0) -> int:
    rt = current()
    if not rt.grid:
        return 0
    if not 0 <= axis < len(rt.grid):
        raise rt.rule_error("nl.program_id", f"axis {axis} out of range for launch grid {rt.grid}", "program_id axis < grid rank")
    return rt.program_id[axis]


def num_programs(axes: Any = None) -> Any:
    rt = current()
    grid = rt.grid or (1,)
    if axes is None:
        return int(_prod(grid))
    if isinstance(axes, (list, tuple)):
        return tuple(grid[a] for a in axes)
    return grid[axes]


def program_ndim() -> int:
    return len(current().grid)


def device_print(prefix: str, x: Any, **kwargs) -> None:
    rt = current()
    view = as_view(x)
    if view is None:
        rt.log.append(f"{prefix} {x}")
        return
    data, _ = read(view, None, "nl.device_print")
    rt.log.append(f"{prefix} {data if data is not None else '<trace-only>'}")


# ---- memory movement ---------------------------------------------------------------------------
def _dma_attrs(hbm_view: View, onchip_shape, itemsize: int, src: str, dst: str, transpose: bool = False,
               mask: np.ndarray | None = None) -> dict:
    """DMA facts for the performance model; a mask shrinks the transfer to the rows and columns it keeps."""
    p = onchip_shape[0] if onchip_shape else 1
    per_part = int(_prod(onchip_shape[1:])) * itemsize if len(onchip_shape) > 1 else itemsize
    if mask is not None:
        p, cols = _mask_rows_cols(mask, tuple(onchip_shape))
        per_part = cols * itemsize
    return {"bytes": p * per_part, "partitions": p, "bytes_per_partition": per_part,
            "contiguous_bytes": hbm_view.contiguous_bytes(), "src": src, "dst": dst, "transpose": transpose}


def _index_regions(view: View, attrs: dict) -> tuple:
    """An indirect DMA also reads its index tiles (a dependency for the performance model)."""
    if not view.indirect:
        return ()
    attrs["indirect"] = True
    return tuple(v.region() for v in view.indirect)


@_primitive(replay=_REBUILD, lane=_Lane())
def _loaded(data: np.ndarray, *, dtype: Any) -> np.ndarray:
    """HBM values as a tile of ``dtype`` holds them, in the compute type (fp32, or int64 for integers)."""
    compute = np.float32 if _dt.is_float(dtype) else np.int64
    return _dt.cast(data.astype(compute), dtype).astype(compute, copy=False)


def load(src, *, mask=None, dtype=None, **kwargs) -> Tensor:
    rt = current()
    api = "nl.load"
    view = as_view(src)
    if view is None or view.tensor.on_chip:
        raise rt.rule_error(api, "nl.load reads an HBM tensor; its argument is "
                            + ("an on-chip tile (use nl.copy)" if view is not None else type(src).__name__),
                            "nl.load moves HBM -> SBUF")
    m = _ops.mask_array(mask)
    shape = view.shape if len(view.shape) >= 2 else (view.shape[0] if view.shape else 1, 1)
    if shape[0] > PMAX:
        raise rt.rule_error(api, f"loaded tile has partition dimension {shape[0]} (> {PMAX}); the leftmost "
                            "indexed axis becomes the partition axis", "partition dim <= 128")
    out_dtype = _dt.canonical(dtype) if dtype is not None else view.tensor.dtype
    box = None if rt.options.trace_only or out_dtype != _dt.float32 or view.shape != shape else _kept_box(m, shape)
    part = None if box is None else _boxed_read(view, m, box)
    data = thunk = None
    if part is not None:   # a ragged tile: just the box its mask keeps is copied, into the tile's destination
        thunk = _Thunk(_copy_of, (part,), box=box)
    else:
        data, _ = read(view, m, api)
    if data is not None:
        data = data.reshape(shape)
        if data.dtype == np.float32 and out_dtype == _dt.float32 and len(shape) >= 2:
            thunk = _Thunk(_copy_of, (data,))   # the one copy out of HBM, straight into the tile's destination (defer)
            data = None
        else:
            data = _call(_loaded, data, dtype=out_dtype)  # one copy out of HBM
    out = _ops.new_result(rt, api, shape, out_dtype, "sbuf", data, None, m, thunk)
    attrs = _dma_attrs(view, shape, _dt.itemsize(view.tensor.dtype), "hbm", "sbuf", mask=m)
    ins = rt.emit("dma", "dma_load", api, (view.region(m),) + _index_regions(view, attrs),
                  (out.tile_region(out._mask),), shape[0],
                  int(_prod(shape[1:])), (_dt.name(view.tensor.dtype),), _dt.name(out_dtype), attrs=attrs)
    out._producer = ins
    return out


@_primitive(replay=_REBUILD, lane=_Lane())
def _transposed_cast(data: np.ndarray, *, dtype: Any) -> np.ndarray:
    """A 2-D tile's transpose in ``dtype``'s values, over any leading axes (lanes)."""
    return _dt.cast(np.swapaxes(data, -1, -2).astype(np.float32), dtype).astype(np.float32)


def load_transpose2d(src, *, mask=None, dtype=None, **kwargs) -> Tensor:
    rt = current()
    api = "nl.load_transpose2d"
    view = as_view(src)
    if view is None or view.tensor.on_chip or len(view.shape) != 2:
        raise rt.rule_error(api, "load_transpose2d reads a 2-D HBM view", "nl.load_transpose2d moves a 2-D HBM tile")
    shape = (view.shape[1], view.shape[0])
    if shape[0] > PMAX:
        raise rt.rule_error(api, f"transposed tile has partition dimension {shape[0]} (> {PMAX})", "partition dim <= 128")
    m = _ops.mask_array(mask)
    out_dtype = _dt.canonical(dtype) if dtype is not None else view.tensor.dtype
    data, written = read(view, m.T if m is not None and m.ndim == 2 else m, api)
    if data is not None:
        data = _call(_transposed_cast, data, dtype=out_dtype)
    out = _ops.new_result(rt, api, shape, out_dtype, "sbuf", data, None if written is None else written.T, m)
    attrs = _dma_attrs(view, shape, _dt.itemsize(view.tensor.dtype), "hbm", "sbuf", transpose=True)
    out._producer = rt.emit("dma", "dma_transpose", api, (view.region(),), (out.full_view().region(),), shape[0],
                            shape[1], (_dt.name(view.tensor.dtype),), _dt.name(out_dtype), attrs=attrs)
    return out


def store(dst, value, *, mask=None, **kwargs) -> None:
    rt = current()
    api = "nl.store"
    dview = as_view(dst)
    if dview is None or dview.tensor.on_chip:
        raise rt.rule_error(api, "nl.store writes to an HBM tensor", "nl.store moves SBUF -> HBM")
    m = _ops.mask_array(mask)
    sview = as_view(value)
    if sview is None:
        if isinstance(value, (int, float, np.number)):
            value = full((dview.shape[0] if dview.shape else 1, int(_prod(dview.shape[1:])) if len(dview.shape) > 1 else 1),
                         value, dtype=dview.tensor.dtype)
            sview = value.full_view()
        else:
            raise rt.rule_error(api, f"value must be a tile, got {type(value).__name__}", "nl.store stores a tile")
    if not sview.tensor.on_chip:
        raise rt.rule_error(api, "value is an HBM tensor; HBM->HBM copies use nisa.dma_copy", "nl.store moves SBUF -> HBM")
    if sview.tensor.buffer == "psum":  # the compiler evacuates PSUM to SBUF first
        sview = copy(sview).full_view()
    # a ragged tile into float32 memory: its mask's box alone (checked first: else the box is read for nothing)
    box = (None if rt.options.trace_only or sview.shape != dview.shape or not _box_writable(dview.tensor)
           else _kept_box(m, dview.shape))
    if box is not None and not _takes_box(dview, m, box):
        box = None
    op = None if box is None else operand(sview, api, mask=m, compute=False, box=box)
    if op is not None:   # a ragged tile: its mask's box alone
        write(dview, op.data, None, m, api, box=box)
        _emit_store(rt, api, dview, op, m)
        return
    op = operand(sview, api, mask=m, compute=False)
    if int(_prod(op.shape)) != int(_prod(dview.shape)):
        try:
            if np.broadcast_shapes(op.shape, dview.shape) != tuple(dview.shape):
                raise ValueError
        except ValueError:
            raise rt.rule_error(api, f"value of shape {op.shape} does not match destination '{dview.tensor.name}' view "
                                f"of shape {dview.shape}", "stored tile must match the destination shape") from None
    data, written = op.data, op.written
    if data is not None and data.shape != dview.shape and data.size == int(_prod(dview.shape)):
        data = data.reshape(dview.shape)
        written = None if written is None else written.reshape(dview.shape)
    if m is not None and written is not None:
        written = written | ~_broadcast(m, written.shape)
    _ops.check_output_valid(rt, api, written, dview.tensor.name)
    if data is not None:
        write(dview, data.astype(np.float32, copy=False) if _dt.is_float(dview.tensor.dtype) else data, None,
              None if m is None else _broadcast(m, dview.shape) if m.size > 1 else m, api)
    else:
        write(dview, None, None, m, api)
    _emit_store(rt, api, dview, op, m)


def _emit_store(rt: Any, api: str, dview: View, op: Any, m: np.ndarray | None) -> None:
    stype = op.view.tensor.dtype
    attrs = _dma_attrs(dview, op.shape, _dt.itemsize(stype), "sbuf", "hbm", mask=m)
    rt.emit("dma", "dma_store", api, (op.region,) + _index_regions(dview, attrs), (dview.region(m),), op.shape[0],
            int(_prod(op.shape[1:])), (_dt.name(stype),), _dt.name(dview.tensor.dtype), attrs=attrs)


def copy(src, *, mask=None, dtype=None, **kwargs) -> Tensor:
    return _ops.copy_tile(src, mask=mask, dtype=dtype)


copy._nki_name = "copy"  # type: ignore[attr-defined]  # also the identity activation / unary ALU op (nisa op=nl.copy)


def broadcast_to(src, *, shape, dtype=None, **kwargs) -> Tensor:
    """``src`` repeated to ``shape``; ``dtype`` (the nki front end) casts the result."""
    rt = current()
    api = "nl.broadcast_to"
    op = operand(src, api, allow_scalar=False)
    out_dtype = op.dtype if dtype is None else _dt.canonical(dtype)
    shape = tuple(int(s) for s in shape)
    try:
        np.broadcast_shapes(op.shape, shape)
    except ValueError:
        raise rt.rule_error(api, f"cannot broadcast {op.shape} to {shape}", "broadcast_to follows NumPy rules") from None
    data = None if op.data is None else _call(_ops.broadcast_copy, op.data, shape=shape)
    written = None if op.written is None else _broadcast(op.written, shape)
    if op.shape[0] == 1 and shape[0] > 1:
        # partition broadcast: a TensorE matmul with a ones row. One PSUM bank holds the result, which
        # consumers read directly; wider rows go bank by bank and are gathered into SBUF.
        free = int(_prod(shape[1:]))
        mm_attrs = {"k": 1, "m": shape[0], "dtype": _dt.name(op.dtype), "moving_dtype": _dt.name(op.dtype),
                    "is_transpose": False, "stationary_onezero": True, "moving_onezero": False}
        if free * 4 <= _ops.PSUM_BANK_BYTES and dtype is None:
            out = _ops.new_result(rt, api, shape, float32, "psum", data, written, None)
            _ops.emit_for(rt, out, "tensor", "nc_matmul", api, [op], dict(mm_attrs, n=free))
            return out
        out = _ops.new_result(rt, api, shape, out_dtype, "sbuf", data, written, None)
        flat = out.full_view().region()
        for start in range(0, free, PSUM_FMAX):
            n = builtins.min(PSUM_FMAX, free - start)
            bank = _ops.new_result(rt, api, (shape[0], n), float32, "psum", None, None, None)
            _ops.emit_for(rt, bank, "tensor", "nc_matmul", api, [op], dict(mm_attrs, n=n))
            rt.emit("vector", "tensor_copy", api, (bank.full_view().region(),), (flat,), shape[0], n,
                    ("float32",), _dt.name(out_dtype), attrs={"psum_input": True, "num_inputs": 1})
        return out
    out = _ops.new_result(rt, api, shape, out_dtype, "sbuf", data, written, None)
    _ops.emit_for(rt, out, "vector", "tensor_copy", api, [op], {"num_inputs": 1})
    return out


def expand_dims(data, axis) -> Tensor:
    rt = current()
    t = data if isinstance(data, Tensor) else copy(data)
    axes = [axis] if isinstance(axis, int) else list(axis)
    shape = list(t.shape)
    for a in sorted(a % (len(shape) + 1) for a in axes):
        if a == 0:
            raise rt.rule_error("nl.expand_dims", "cannot add an axis before the partition axis", "expand_dims adds free axes")
        shape.insert(a, 1)
    return t.reshape(tuple(shape))


# ---- element-wise math ---------------------------------------------------------------------------
def _partition_broadcast(x: Any, y: Any) -> tuple[Any, Any]:
    """A (1, F) operand meeting a (P, F) one is broadcast on TensorE first: legal, but not free."""
    vx, vy = as_view(x), as_view(y)
    if vx is None or vy is None or not vx.shape or not vy.shape or vx.shape[0] == vy.shape[0]:
        return x, y
    if vx.shape[0] == 1:
        return broadcast_to(x, shape=(vy.shape[0],) + tuple(vx.shape[1:])), y
    if vy.shape[0] == 1:
        return x, broadcast_to(y, shape=(vx.shape[0],) + tuple(vy.shape[1:]))
    return x, y


def _binary(name: str):
    fn = ALU[name]

    def api(x, y, *, dtype=None, mask=None, **kwargs):
        x, y = _partition_broadcast(x, y)
        scalar_side = isinstance(x, _SCALAR_TYPES) or isinstance(y, _SCALAR_TYPES)
        op = "tensor_scalar" if scalar_side else "tensor_tensor"
        engine = "gpsimd" if name == "power" and not scalar_side else "vector"
        if not scalar_side:
            vx, vy = as_view(x), as_view(y)
            if vx is not None and vy is not None:
                sx, sy = vx.shape, vy.shape
                # a [P, 1] operand broadcast along the free axis is a tensor_scalar operand
                if (len(sy) >= 2 and sy[0] == sx[0] and int(_prod(sy[1:])) == 1 and int(_prod(sx[1:])) > 1) or \
                        (len(sx) >= 2 and sx[0] == sy[0] and int(_prod(sx[1:])) == 1 and int(_prod(sy[1:])) > 1):
                    op = "tensor_scalar"
        out_default = _dt.uint8 if name in ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
                                            "logical_and", "logical_or", "logical_xor") else None
        return _ops.elementwise(f"nl.{name}", engine, op, fn, [x, y], dtype=dtype or out_default, mask=mask,
                                attrs={"alu": name})
    api.__name__ = name
    api._nki_name = name  # type: ignore[attr-defined]
    return api


for _n in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "fmod", "mod", "equal",
           "not_equal", "greater", "greater_equal", "less", "less_equal", "logical_and", "logical_or", "logical_xor",
           "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"):
    globals()[_n] = _binary(_n)


def _unary(name: str):
    fn = ACTIVATIONS[name]
    engine, op = ("scalar", "activation") if name in SCALAR_ENGINE_FUNCS else ("vector", "tensor_scalar")

    def api(x, *, dtype=None, mask=None, **kwargs):
        return _ops.elementwise(f"nl.{name}", engine, op, fn, [x], dtype=dtype, mask=mask, attrs={"func": name})
    api.__name__ = name
    api._nki_name = name  # type: ignore[attr-defined]
    return api


for _n in ("abs", "negative", "sign", "trunc", "floor", "ceil", "exp", "log", "sqrt", "rsqrt", "reciprocal", "square",
           "sin", "cos", "tan", "tanh", "arctan", "sigmoid", "relu", "gelu", "gelu_dx", "gelu_apprx_tanh",
           "gelu_apprx_sigmoid", "silu", "silu_dx", "erf", "erf_dx", "softplus", "mish"):
    globals()[_n] = _unary(_n)


def logical_not(x, *, dtype=None, mask=None, **kwargs):
    return _ops.elementwise("nl.logical_not", "vector", "tensor_scalar", np.logical_not, [x], dtype=dtype or uint8,
                            mask=mask, attrs={"alu": "logical_not"})


def invert(x, *, dtype=None, mask=None, **kwargs):
    return _ops.elementwise("nl.invert", "vector", "tensor_scalar", np.invert, [x], dtype=dtype, mask=mask,
                            attrs={"alu": "invert"})


logical_not._nki_name = "logical_not"  # type: ignore[attr-defined]
invert._nki_name = "invert"  # type: ignore[attr-defined]


def where(condition, x, y, *, dtype=None, mask=None, **kwargs):
    return _ops.elementwise("nl.where", "vector", "tensor_tensor", _select,
                            [condition, x, y], dtype=dtype or _where_dtype(x, y), mask=mask, attrs={"alu": "select"})


@_elementwise
def _select(c, a, b):
    return np.where(c != 0, a, b)


def _where_dtype(x, y):
    dx = getattr(x, "dtype", None)
    dy = getattr(y, "dtype", None)
    return dx if dx is not None else dy


# ---- reductions ----------------------------------------------------------------------------------
@_primitive(replay=_REBUILD)
def _reduced_lanes(data: np.ndarray, *, fn: Any, axes: tuple[int, ...], keepdims: bool, to_fp32: bool) -> np.ndarray:
    return _reduced(data, fn=fn, axes=_lane_axes(axes), keepdims=keepdims, to_fp32=to_fp32)


@_primitive(replay=_REBUILD, lane=_Lane(impl=_reduced_lanes, accepts=_reduces_over_axes))
def _reduced(data: np.ndarray, *, fn: Any, axes: tuple[int, ...], keepdims: bool, to_fp32: bool) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(fn(data.astype(np.float32) if to_fp32 else data, axis=axes, keepdims=keepdims))


def _reduce(name: str, rfn):
    def api(x, axis=None, *, dtype=None, mask=None, keepdims: bool = False, **kwargs):
        rt = current()
        api_name = f"nl.{name}"
        m = _ops.mask_array(mask)
        op = operand(x, api_name, allow_scalar=False, mask=m)
        axes = _ops.reduce_axes(rt, api_name, op.shape, axis)
        out_shape = tuple(1 if i in axes else s for i, s in enumerate(op.shape)) if keepdims else \
            tuple(s for i, s in enumerate(op.shape) if i not in axes)
        data = None
        if op.data is not None:
            data = _call(_reduced, op.data, fn=rfn, axes=axes, keepdims=keepdims, to_fp32=name in ("mean", "var"))
        written = None
        if op.written is not None:
            written = np.all(op.written, axis=axes, keepdims=keepdims)
        out_dtype = _dt.canonical(dtype) if dtype is not None else (
            float32 if name in ("mean", "var") else (uint8 if name == "all" else op.dtype))
        out = _ops.new_result(rt, api_name, out_shape, out_dtype, "sbuf", data, written, None)
        n_in = int(_prod(op.shape[1:])) if len(op.shape) > 1 else 1
        _ops.emit_for(rt, out, "vector", "tensor_reduce", api_name, [op], {"alu": name, "num_inputs": 1},
                      free=n_in * (2 if name == "var" else 1))
        return out
    api.__name__ = name
    api._nki_name = {"sum": "add", "max": "max", "min": "min", "prod": "multiply"}.get(name, name)  # type: ignore[attr-defined]
    return api


sum = _reduce("sum", np.sum)  # noqa: A001 (NKI's name)
max = _reduce("max", np.max)  # noqa: A001
min = _reduce("min", np.min)  # noqa: A001
mean = _reduce("mean", np.mean)
prod = _reduce("prod", np.prod)
var = _reduce("var", np.var)
all = _reduce("all", lambda a, axis, keepdims: np.all(a != 0, axis=axis, keepdims=keepdims))  # noqa: A001


def loop_reduce(x, op, loop_indices, *, dtype=None, mask=None, **kwargs):
    """Reduce ``x`` with ``op`` across the iterations of the loops named in ``loop_indices``.

    As documented, the destination is also the accumulator input: ``dst[...] = nl.loop_reduce(x, ...)``
    computes ``dst = op(dst, x)``, except at the first iteration of the named loops (all of them at
    their first value), where the reduction restarts with ``dst = x`` (compiler-generated kernels
    reduce into uninitialized buffers). The named loops need not be the innermost, nor adjacent, and
    may be affine: this is a reduction, not a loop-carried write. Rebound to a name instead
    (``b = nl.loop_reduce(...)``), the result is the accumulator of this call site in the current
    iteration of the loops that are not named (:class:`_Accumulators`).
    """
    rt = current()
    api = "nl.loop_reduce"
    name = op_name(op)
    if name not in ALU:
        raise rt.rule_error(api, f"unsupported reduction op {op!r}", "loop_reduce takes an ALU op")
    named = _named_loops(rt, api, loop_indices)
    restart = builtins.all(f.iteration == f.start for f in named)
    m = _ops.mask_array(mask)
    xo = operand(x, api, allow_scalar=False, mask=m)
    out_dtype = _dt.canonical(dtype) if dtype is not None else xo.dtype
    fn = ALU[name]
    data = written = None
    if xo.data is not None:
        to_float = _dt.is_float(out_dtype)
        acc = _Accumulators.of(rt, named, xo.shape, np.dtype(np.float32) if to_float else xo.data.dtype)
        slot = acc.slot(rt)
        data = _call(_reduce_step, acc.values[slot], acc.started[slot + (Ellipsis,)], xo.data, m, fn=fn,
                     restart=restart, to_float=to_float)
        written = xo.written
        if written is not None or acc.written:
            # validity kept per slot in a dict: a loop doing this is not replayed with values
            _fail("nl.loop_reduce of a partially written tile")
            written = _ops.combine_written(None if restart else acc.written.get(slot), written, shape=xo.shape)
            acc.written[slot] = written
    out = _ops.new_result(rt, api, xo.shape, out_dtype, "sbuf", data, written, m)
    _ops.emit_for(rt, out, "vector", "tensor_tensor", api, [xo], {"alu": name, "num_inputs": 2,
                                                                 "psum_input": xo.buffer == "psum", "loop_reduce": True})
    rt.pending_reduction = (out, _PendingReduce(fn, restart, xo, m))
    return out


class _Accumulators:
    """One ``nl.loop_reduce`` call site's accumulators: a slot per iteration of the loops it does not name that
    run inside the outermost loop it names (a loop around all the named ones restarts the reduction at each of
    its iterations, so needs no slot of its own), in one dense array.

    The slots' offsets move with those loops, so value replay (:mod:`accelopt_nb.sim.replay.values`) re-runs a
    reduction step at another iteration on the right slot; ``started`` marks the slots a restart wrote.
    """

    __slots__ = ("depths", "values", "started", "written")

    @classmethod
    def of(cls, rt: Any, named: list, shape: tuple[int, ...], dtype: np.dtype) -> "_Accumulators":
        file, line = rt.location()
        outer = builtins.min(rt.loops.index(f) for f in named)
        depths = tuple(d for d in range(outer + 1, len(rt.loops)) if rt.loops[d] not in named)
        key = (file, line, depths, shape, dtype.str)
        acc = rt.loop_reduce_state.get(key)
        counts = tuple(rt.loops[d].count for d in depths)
        if acc is None or builtins.any(c > n for c, n in zip(counts, acc.started.shape)):
            acc = rt.loop_reduce_state[key] = cls(depths, counts, shape, dtype, acc)
            if rt.observer is not None:   # by identity in value replay's records, however they are used
                for a in (acc.values, acc.started):
                    rt.observer.storage(a)
        return acc

    def __init__(self, depths: tuple[int, ...], counts: tuple[int, ...], shape: tuple[int, ...], dtype: np.dtype,
                 smaller: "_Accumulators | None") -> None:
        if smaller is not None:   # a loop grew (its length depends on an outer loop): keep what the slots hold
            counts = tuple(builtins.max(c, n) for c, n in zip(counts, smaller.started.shape))
        self.depths = depths
        self.values = np.empty(counts + shape, dtype=dtype)
        self.started = np.zeros(counts, dtype=bool)
        self.written: dict[tuple[int, ...], np.ndarray] = {}
        if smaller is not None:
            corner = tuple(slice(0, n) for n in smaller.started.shape)
            self.values[corner] = smaller.values
            self.started[corner] = smaller.started
            self.written = smaller.written

    def slot(self, rt: Any) -> tuple[int, ...]:
        """The slot of the current iterations: each loop's position in its range."""
        return tuple((rt.loops[d].iteration - rt.loops[d].start) // rt.loops[d].step for d in self.depths)


@_primitive(replay=_REBUILD)
def _reduce_step(slot: np.ndarray, started: np.ndarray, x: np.ndarray, m: np.ndarray | None, *, fn: Any, restart: bool,
                 to_float: bool) -> np.ndarray:
    """One ``nl.loop_reduce`` call: the new accumulator, also kept in ``slot``. ``x`` at a restart (or in a slot
    no restart wrote), else ``fn(slot, x)`` where the mask keeps."""
    new = x.astype(np.float32) if to_float else x.copy()
    if not restart and started:
        new = _combine(slot, new, m, fn=fn)
    slot[...] = new
    started[...] = True
    return new


def _named_loops(rt, api: str, loop_indices: Any) -> list:
    items = loop_indices if isinstance(loop_indices, (list, tuple)) else [loop_indices]
    if not items:
        raise rt.rule_error(api, "loop_indices is empty", "loop_reduce names the loops it reduces over")
    frames = []
    for idx in items:
        if isinstance(idx, _LoopIndex) and idx.frame in rt.loops:
            frames.append(idx.frame)
            continue
        # a plain int: the innermost enclosing loop at that value that is not named yet
        hit = next((f for f in reversed(rt.loops) if f.kind != "spmd" and f not in frames
                    and isinstance(idx, (int, np.integer)) and f.iteration == int(idx)), None)
        if hit is None:
            raise rt.rule_error(api, f"loop_indices entry {idx!r} is not the variable of an enclosing loop",
                                "loop_reduce names enclosing loop variables")
        frames.append(hit)
    return frames


@_primitive(replay=_REBUILD)
def _combine(acc: np.ndarray, x: np.ndarray, m: np.ndarray | None, *, fn: Any) -> np.ndarray:
    """``fn(acc, x)`` where ``m`` keeps (fp32 for a float accumulator)."""
    if acc.dtype.kind == "f":
        acc = acc.astype(np.float32, copy=False)
    with np.errstate(all="ignore"):
        new = np.asarray(fn(acc, x), dtype=acc.dtype if acc.dtype.kind == "f" else None)
    return new if m is None else np.where(_broadcast(m, new.shape), new, acc)


class _PendingReduce:
    """A loop_reduce result waiting for its destination: assigning it reduces into the destination."""

    __slots__ = ("fn", "restart", "x", "mask")

    def __init__(self, fn, restart: bool, x, mask) -> None:
        self.fn, self.restart, self.x, self.mask = fn, restart, x, mask

    def reduce_into(self, dest: View, result: Tensor, api: str) -> None:
        """``dest = x`` at a restart, else ``dest = op(dest, x)``; one VectorE instruction either way."""
        producer = result._producer
        mask = result._mask
        if self.x.data is None:  # trace-only
            write(dest, None, None, mask, api, reduction=not self.restart)
        elif self.restart:
            write(dest, result._data.reshape(dest.shape), None if result._written is None else
                  result._written.reshape(dest.shape), mask, api)
        else:
            acc, acc_written = read(dest, None, api)
            x = self.x.data.reshape(dest.shape)
            new = _call(_combine, acc, x,
                        None if self.mask is None else _broadcast(self.mask, self.x.shape).reshape(dest.shape), fn=self.fn)
            xw = None if self.x.written is None else self.x.written.reshape(dest.shape)
            write(dest, new, _ops.combine_written(acc_written, xw, shape=dest.shape), mask, api, reduction=True)
        if producer is not None:
            producer.writes = (dest.region(mask),)
            producer.out_dtype = _dt.name(dest.dtype)
            if not self.restart:
                producer.reads = producer.reads + (dest.region(),)


# ---- composite ops -------------------------------------------------------------------------------
def softmax(x, axis=-1, *, dtype=None, mask=None, **kwargs):
    mx = max(x, axis=axis, keepdims=True, mask=mask)
    shifted = subtract(x, mx, mask=mask)
    e = exp(shifted, mask=mask)
    s = sum(e, axis=axis, keepdims=True, mask=mask)
    r = reciprocal(s)
    return multiply(e, r, dtype=dtype, mask=mask)


def rms_norm(x, w, axis=-1, n=None, epsilon: float = 1e-6, *, dtype=None, compute_dtype=None, mask=None, **kwargs):
    """``x / rms(x) * w``; ``compute_dtype``: the precision of the intermediate tiles (each rounds to it)."""
    rt = current()
    op = operand(x, "nl.rms_norm", allow_scalar=False)
    count = n if n is not None else int(_prod([op.shape[a] for a in _ops.reduce_axes(rt, "nl.rms_norm", op.shape, axis)]))
    cd = compute_dtype
    sq = square(x, dtype=cd, mask=mask)
    ss = sum(sq, axis=axis, keepdims=True, dtype=cd, mask=mask)
    ms = multiply(ss, 1.0 / count, dtype=cd)
    inv = rsqrt(add(ms, float(epsilon), dtype=cd), dtype=cd)
    normed = multiply(x, inv, dtype=cd, mask=mask)
    return multiply(normed, w, dtype=dtype if dtype is not None else op.dtype if cd is not None else None, mask=mask)


def random_seed(seed, **kwargs) -> None:
    rt = current()
    rt.rng = np.random.default_rng(int(seed) if not isinstance(seed, (Tensor, View)) else 0)


def rand(shape, dtype=float32, **kwargs):
    rt = current()
    dims, _ = _parse_shape(rt, "nl.rand", shape)
    data = None if rt.options.trace_only else _ops.random_generator(rt).random(dims, dtype=np.float32)
    out = _ops.new_result(rt, "nl.rand", dims, dtype, "sbuf", data, None, None)
    _ops.emit_for(rt, out, "gpsimd", "rand", "nl.rand", [], {})
    return out


def dropout(x, rate, *, dtype=None, mask=None, **kwargs):
    return _ops.dropout(x, rate, dtype=dtype, mask=mask)


# ---- matmul and transpose ------------------------------------------------------------------------
def matmul(x, y, *, transpose_x: bool = False, mask=None, **kwargs) -> Tensor:
    """``x @ y`` into a PSUM fp32 tile. Without ``transpose_x`` the compiler adds a PE transpose of x."""
    rt = current()
    if not transpose_x:
        xv = as_view(x)
        if xv is None:
            raise rt.rule_error("nl.matmul", "x must be a tile", "matmul operands are SBUF tiles")
        xt = transpose(x)
        return _isa.nc_matmul(xt, y, mask=mask, _api="nl.matmul")
    return _isa.nc_matmul(x, y, mask=mask, _api="nl.matmul")


def transpose(x, *, dtype=None, mask=None, **kwargs) -> Tensor:
    """Swap partition and free axes of a 2-D tile: a PE transpose into PSUM, evacuated to SBUF."""
    rt = current()
    op_view = as_view(x)
    if op_view is None or len(op_view.shape) != 2:
        raise rt.rule_error("nl.transpose", "nl.transpose takes a 2-D tile", "transpose swaps P and F of a 2-D tile")
    t = _isa.nc_transpose(x, engine=_isa.tensor_engine, _api="nl.transpose")
    return copy(t, dtype=dtype or op_view.tensor.dtype)


def gather_flattened(data, indices, *, mask=None, dtype=None, **kwargs):
    rt = current()
    d = operand(data, "nl.gather_flattened", allow_scalar=False)
    i = operand(indices, "nl.gather_flattened", allow_scalar=False)
    out_data = None
    if d.data is not None:
        flat = d.data.reshape(d.shape[0], -1)
        idx = i.data.reshape(i.shape[0], -1).astype(np.int64) % flat.shape[1]
        out_data = np.take_along_axis(flat, idx, axis=1).reshape(i.shape)
    out = _ops.new_result(rt, "nl.gather_flattened", i.shape, dtype or d.dtype, "sbuf", out_data, None, _ops.mask_array(mask))
    _ops.emit_for(rt, out, "gpsimd", "local_gather", "nl.gather_flattened", [d, i], {})
    return out


_views.API.language = sys.modules[__name__]   # what tile operators and methods mean (core.views.API)

__all__ = [n for n in dir() if not n.startswith("_")]
