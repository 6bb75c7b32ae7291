"""``neuronxcc.nki.isa`` (``nisa``) on the simulator: one call, one engine instruction."""
from __future__ import annotations

import enum
from typing import Any

import numpy as np
from math import prod as _prod

from accelopt_nb.sim.api import ops as _ops
from accelopt_nb.sim.core import dtypes as _dt
from accelopt_nb.sim.core.functions import ACTIVATIONS, ALU, REDUCE, op_name
from accelopt_nb.sim.core.indexing import IndexExpr, Mask
from accelopt_nb.sim.core.indexing import broadcast as _broadcast
from accelopt_nb.sim.core.indexing import mask_rows_cols as _mask_rows_cols
from accelopt_nb.sim.core.memory import Thunk as _Thunk
from accelopt_nb.sim.core.memory import kept_box as _kept_box
from accelopt_nb.sim.core.memory import read, write
from accelopt_nb.sim.core.operands import Operand, as_view, combine_written, operand
from accelopt_nb.sim.core.prims import REBUILD as _REBUILD
from accelopt_nb.sim.core.prims import Lane as _Lane
from accelopt_nb.sim.core.prims import call as _call
from accelopt_nb.sim.core.prims import is_elementwise as _is_elementwise
from accelopt_nb.sim.core.prims import lane_axes as _lane_axes
from accelopt_nb.sim.core.prims import primitive as _primitive
from accelopt_nb.sim.core.prims import reduces_over_axes as _reduces_over_axes
from accelopt_nb.sim.core.runtime import GEMM_MOVING_FMAX, GEMM_STATIONARY_FMAX, PMAX, current
from accelopt_nb.sim.core.tensor import Tensor


class engine(enum.IntEnum):  # noqa: N801 (NKI's name)
    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    vector = 5
    sync = 6


unknown_engine = engine.unknown
tensor_engine = engine.tensor
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
vector_engine = engine.vector
sync_engine = engine.sync
dma_engine = engine.sync


class nc_version(enum.IntEnum):  # noqa: N801
    gen2 = 2
    gen3 = 3


def get_nc_version() -> nc_version:
    return nc_version.gen2


class reduce_cmd(enum.IntEnum):  # noqa: N801
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3


class dge_mode(enum.IntEnum):  # noqa: N801
    none = 0
    swdge = 1
    hwdge = 2
    unknown = 3


class oob_mode(enum.IntEnum):  # noqa: N801
    error = 0
    skip = 1


_ENGINE_NAME = {engine.tensor: "tensor", engine.scalar: "scalar", engine.gpsimd: "gpsimd", engine.vector: "vector"}


def _engine(requested: Any, default: str, allowed: tuple[str, ...], api: str) -> str:
    if requested is None or requested == engine.unknown:
        return default
    name = _ENGINE_NAME.get(engine(int(requested)), None)
    if name not in allowed:
        raise current().rule_error(api, f"{api} cannot run on engine {requested!r} (allowed: {', '.join(allowed)})",
                                   "instruction/engine compatibility")
    return name


def _alu(op: Any, api: str) -> tuple[str, Any]:
    name = op_name(op)
    if name is None or name not in ALU:
        raise current().rule_error(api, f"unsupported ALU operator {op!r}", "ALU ops are np/nl arithmetic, comparison "
                                   "or bitwise functions")
    return name, ALU[name]


def _act(op: Any, api: str) -> tuple[str, Any]:
    name = op_name(op)
    if name is None or name not in ACTIVATIONS:
        raise current().rule_error(api, f"unsupported activation function {op!r}", "activation takes an nl/np "
                                   "unary function (nl.exp, np.tanh, nl.copy, ...)")
    return name, ACTIVATIONS[name]


def _col(op: Operand, api: str, rows: int) -> Any:
    """A scalar or a [P, 1] tile operand broadcast along the free axes."""
    if op.scalar:
        return op.data
    if op.shape[0] != rows or int(_prod(op.shape[1:])) != 1:
        raise current().rule_error(api, f"operand of shape {op.shape} must be a scalar or a [{rows}, 1] tile",
                                   "per-partition operands are [P, 1] tiles")
    return None if op.data is None else op.data.reshape((rows,) + (1,) * 1)


def _reshape_col(c: Any, ndim: int) -> Any:
    if isinstance(c, np.ndarray) and c.ndim == 2 and ndim > 2:
        return c.reshape(c.shape + (1,) * (ndim - 2))
    return c


def _operand_mask(mask: np.ndarray | None, x: Any) -> np.ndarray | None:
    """Operand masking: a mask over the output's free index also shrinks the moving operand."""
    v = as_view(x)
    if mask is None or v is None:
        return None
    try:
        np.broadcast_shapes(mask.shape, v.shape)
    except ValueError:
        return None
    return mask if mask.ndim == 2 and mask.shape[0] == 1 else None


# ---- TensorE ---------------------------------------------------------------------------------
class matmul_perf_mode(enum.Enum):  # noqa: N801 (NKI's name)
    none = "none"
    double_row = "double_row"     # trn2+: two fp8 rows per PE pass, 2x TensorE throughput


def _perf_mode(rt, api: str, perf_mode: Any, st: Operand, mv: Operand, tile_position) -> str:
    name = getattr(perf_mode, "value", perf_mode)
    name = "none" if name in (None, 0, "none") else "double_row" if name == "double_row_gen3" else name
    if name not in ("none", "double_row"):
        raise rt.rule_error(api, f"unknown perf_mode {perf_mode!r} (nisa.matmul_perf_mode.none or .double_row)",
                            "nc_matmul perf_mode is none or double_row")
    if name == "double_row":
        bad = [o for o in (st, mv) if _dt.name(o.dtype) not in ("float8_e4m3", "float8_e5m2", "float8_e4m3fn")]
        if bad:
            raise rt.rule_error(api, f"perf_mode=double_row needs fp8 operands, got {_dt.name(bad[0].dtype)}",
                                "double_row performance mode packs two fp8 rows (NeuronCore-v3+)")
        if tile_position:
            raise rt.rule_error(api, "perf_mode=double_row cannot be combined with PE tiling (tile_position)",
                                "double_row performance mode excludes column tiling")
    return name


def nc_matmul(stationary, moving, *, is_stationary_onezero: bool = False, is_moving_onezero: bool = False,
              is_transpose: bool = False, tile_position=(), tile_size=(), mask=None, perf_mode=None,
              _api: str = "nisa.nc_matmul", **kwargs) -> Tensor:
    """``stationary.T @ moving`` on the PE array: SBUF [K, M] and [K, N] in, PSUM fp32 [M, N] out."""
    rt = current()
    m_mask = _ops.mask_array(mask)
    st = operand(stationary, _api, allow_scalar=False)
    mv = operand(moving, _api, allow_scalar=False, mask=_operand_mask(m_mask, moving))
    _ops.check_engine_access(rt, _api, "tensor", [st, mv], "psum")
    mode = _perf_mode(rt, _api, perf_mode, st, mv, tile_position)
    # double_row with [K, 2, M] x [K, 2, N] operands (the NKI 0.1 layout): two rows of K per PE pass
    rows = 2 if mode == "double_row" and len(st.shape) == 3 and len(mv.shape) == 3 and st.shape[1] == mv.shape[1] == 2 \
        else 1
    if rows == 1 and (len(st.shape) != 2 or len(mv.shape) != 2):
        raise rt.rule_error(_api, f"operands must be 2-D tiles, got stationary {st.shape} and moving {mv.shape}",
                            "matmul operands are [K, M] and [K, N] tiles ([K, 2, M] and [K, 2, N] in double_row mode)")
    k, m = st.shape[0], st.shape[-1]
    k2, n = mv.shape[0], mv.shape[-1]
    if k != k2:
        raise rt.rule_error(_api, f"contraction (partition) sizes differ: stationary {st.shape} vs moving {mv.shape}",
                            "stationary and moving share the partition (K) axis")
    if k > PMAX or m > GEMM_STATIONARY_FMAX:
        raise rt.rule_error(_api, f"stationary tile {st.shape} exceeds 128x128", "matmul stationary <= 128x128")
    if n > GEMM_MOVING_FMAX:
        raise rt.rule_error(_api, f"moving tile {mv.shape} exceeds 128x512", "matmul moving <= 128x512")
    for v in tuple(tile_position) + tuple(tile_size):
        if int(v) % 32:
            raise rt.rule_error(_api, f"tile_position/tile_size {v} is not a multiple of 32", "PE tiling in multiples of 32")
    out_dtype = _dt.float32
    if is_transpose and _dt.is_float(st.dtype) and _dt.itemsize(st.dtype) == 2:
        out_dtype = st.dtype  # PE transpose mode passes 2-byte types through (NC-v3)
    data = thunk = None
    if st.data is not None and rows == 1 and _ops.deferrable((np.matmul,), (st.data, mv.data), out_dtype, (m, n)):
        thunk = _Thunk(_ops.ufunc_into, (st.data.T, mv.data), {"ufunc": np.matmul})   # maybe into its destination
    elif st.data is not None:
        data = _call(_pe_matmul, st.data, mv.data, rows=rows)
    written = None
    if st.written is not None or mv.written is not None:
        ws = np.ones(st.shape, bool) if st.written is None else st.written
        wm = np.ones(mv.shape, bool) if mv.written is None else mv.written
        lead = tuple(range(len(st.shape) - 1))
        written = np.all(ws, axis=lead)[:, None] & np.all(wm, axis=lead)[None, :]
    out = _ops.new_result(rt, _api, (m, n), out_dtype, "psum", data, written, m_mask, thunk)
    n_eff = n
    if m_mask is not None:
        n_eff = _mask_rows_cols(m_mask, (m, n))[1]
    _ops.emit_for(rt, out, "tensor", "nc_matmul", _api, [st, mv],
                  {"k": k, "m": m, "n": n_eff, "dtype": _dt.name(st.dtype), "moving_dtype": _dt.name(mv.dtype),
                   "is_transpose": bool(is_transpose), "stationary_onezero": bool(is_stationary_onezero),
                   "moving_onezero": bool(is_moving_onezero), "perf_mode": mode, "rows": rows},
                  partitions=m, free=n)
    return out


@_primitive(replay=_REBUILD, lane=_Lane())
def _pe_matmul(st: np.ndarray, mv: np.ndarray, *, rows: int) -> np.ndarray:
    """``st.T @ mv`` in fp32 (two rows of K per pass: ``[K, 2, M] x [K, 2, N]``), over any leading axes (lanes:
    one call for many iterations' tiles)."""
    st, mv = st.astype(np.float32, copy=False), mv.astype(np.float32, copy=False)
    if rows != 2:
        return np.matmul(np.swapaxes(st, -1, -2), mv)
    if st.ndim == 3 and mv.ndim == 3:
        return np.einsum("kim,kin->mn", st, mv)
    # einsum over leading axes is not promised to sum in one tile's order: tile by tile
    lead = np.broadcast_shapes(st.shape[:-3], mv.shape[:-3])
    st, mv = np.broadcast_to(st, lead + st.shape[-3:]), np.broadcast_to(mv, lead + mv.shape[-3:])
    return np.stack([_pe_matmul(st[i], mv[i], rows=rows) for i in np.ndindex(lead)]).reshape(
        lead + (st.shape[-1], mv.shape[-1]))


@_primitive(replay=_REBUILD, lane=_Lane())
def _transposed(x: np.ndarray) -> np.ndarray:
    """A tile's transpose, over any leading axes (lanes)."""
    return np.swapaxes(x, -1, -2).copy()


def nc_transpose(data, *, mask=None, dtype=None, engine=None, _api: str = "nisa.nc_transpose", **kwargs) -> Tensor:
    rt = current()
    op = operand(data, _api, allow_scalar=False)
    if len(op.shape) != 2:
        raise rt.rule_error(_api, f"transpose takes a 2-D tile, got {op.shape}", "transpose swaps P and F of a 2-D tile")
    p, f = op.shape
    eng = _engine(engine, "tensor" if (p > 32 or f > 32) else "vector", ("tensor", "vector"), _api)
    if eng == "tensor" and (p > PMAX or f > PMAX):
        raise rt.rule_error(_api, f"PE transpose takes at most 128x128, got {op.shape}", "nc_transpose on TensorE <= 128x128")
    if eng == "vector" and (p > 32 or f > 32):
        raise rt.rule_error(_api, f"VectorE transpose takes at most 32x32, got {op.shape}", "nc_transpose on VectorE <= 32x32")
    _ops.check_engine_access(rt, _api, eng, [op], None)
    out_data = None if op.data is None else _call(_transposed, op.data)
    written = None if op.written is None else op.written.T.copy()
    buffer = "psum" if eng == "tensor" else "sbuf"
    out_dtype = _dt.canonical(dtype) if dtype is not None else (_dt.float32 if eng == "tensor" else op.dtype)
    out = _ops.new_result(rt, _api, (f, p), out_dtype, buffer, out_data, written, _ops.mask_array(mask))
    if eng == "tensor":
        _ops.emit_for(rt, out, "tensor", "nc_matmul", _api, [op],
                      {"k": p, "m": f, "n": p, "dtype": _dt.name(op.dtype), "moving_dtype": _dt.name(op.dtype),
                       "is_transpose": True, "stationary_onezero": False, "moving_onezero": True},
                      partitions=f, free=p)
    else:
        _ops.emit_for(rt, out, "vector", "transpose", _api, [op], {"num_inputs": 1})
    return out


# ---- ScalarE ---------------------------------------------------------------------------------
_SIGN_BLIND: dict[Any, bool] = {}
_SCALARS = (float, np.float32)


def _sign_blind(fn: Any) -> bool:
    """Whether ``fn`` maps -0.0 and +0.0 to the same bits (sigmoid, exp; not tanh or sign), so the
    default bias's ``x + 0.0`` (which turns -0.0 into +0.0) can be skipped without changing a result."""
    try:
        return _SIGN_BLIND[fn]
    except KeyError:
        with np.errstate(all="ignore"):
            ys = [np.asarray(fn(np.array([z], np.float32)), np.float32) for z in (-0.0, 0.0)]
        _SIGN_BLIND[fn] = blind = ys[0].tobytes() == ys[1].tobytes()
        return blind


def _func_lanes(args: list, params: dict) -> bool:
    return _is_elementwise(params["func"])


@_primitive(replay=_REBUILD, lane=_Lane(accepts=_func_lanes), writes=0)
def _activation_into(dst: np.ndarray | None, xs: np.ndarray, sc: Any, bc: Any, *, func: Any) -> np.ndarray:
    """func(xs * sc + bc), each step rounded to fp32 (a deferred thunk, see ``memory.defer``); a scale or
    bias of None is a step that changes nothing, skipped (``_activation`` decides, once per instruction)."""
    y, out = xs, dst
    if sc is not None:
        y = out = np.multiply(y, sc, out=out)
    if bc is not None:
        y = out = np.add(y, bc, out=out)
    return func(y, out=out)


@_primitive(replay=_REBUILD, lane=_Lane(accepts=_func_lanes))
def _activation_eager(xs: np.ndarray, sc: Any, bc: Any, *, func: Any) -> np.ndarray:
    with np.errstate(all="ignore"):
        return func(xs * sc + bc).astype(np.float32, copy=False)


def _activation(api: str, op, data, bias, scale, reduce_op, reduce_res, mask, dtype, reduce_required: bool,
                boxed: bool = True) -> Tensor:
    rt = current()
    name, fn = _act(op, api)
    m = _ops.mask_array(mask)
    view = as_view(data)
    # a ragged tile: computed on the box its mask keeps (a plain activation; a reduction reads the whole tile)
    box = (None if not boxed or rt.options.trace_only or view is None or reduce_res is not None or reduce_required
           or not _ops.computes_into(fn) else _kept_box(m, view.shape))
    x = None if box is None else operand(data, api, allow_scalar=False, mask=m, box=box)
    if x is None:
        box, x = None, operand(data, api, allow_scalar=False, mask=m)
    operands = [x]
    rows = x.shape[0]
    s = 1.0
    if scale is not None and not isinstance(scale, (int, float, np.number)):
        so = operand(scale, api)
        operands.append(so)
        s = _col(so, api, rows)
    elif scale is not None:
        s = np.float32(scale)
    b = 0.0
    if bias is not None:
        bo = operand(bias, api)
        operands.append(bo)
        b = _col(bo, api, rows)
    _ops.check_engine_access(rt, api, "scalar", operands, None)
    out_dtype = _dt.canonical(dtype) if dtype is not None else x.dtype
    out_data = thunk = None
    # the box reads the scale and bias tiles' rows of the box: all of them valid, or computed whole after all
    if box is not None and any(o.written is not None for o in operands[1:]):
        box, x = None, operand(data, api, allow_scalar=False, mask=m)
        operands[0] = x
    if x.data is not None:
        nd = x.data.ndim
        xs, sc, bc = x.data.astype(np.float32, copy=False), _reshape_col(s, nd), _reshape_col(b, nd)
        if box is not None:
            sc, bc = (v[box[0]] if isinstance(v, np.ndarray) and v.shape[0] > 1 else v for v in (sc, bc))
        if reduce_res is None and not reduce_required and _ops.deferrable(
                (fn,), (xs, np.float32(sc) if type(sc) is float else sc, np.float32(bc) if type(bc) is float else bc),
                out_dtype, x.shape):
            # x * 1.0 is x; x + 0.0 is x but at -0.0, which only some functions tell apart
            skip_scale = type(sc) in _SCALARS and sc == 1.0
            skip_bias = type(bc) in _SCALARS and bc == 0.0 and _sign_blind(fn)
            thunk = _Thunk(_activation_into, (xs, None if skip_scale else sc, None if skip_bias else bc), {"func": fn},
                           box)
        elif box is not None:   # computed whole after all
            return _activation(api, op, data, bias, scale, reduce_op, reduce_res, mask, dtype, reduce_required,
                               boxed=False)
        else:
            out_data = _call(_activation_eager, xs, sc, bc, func=fn)
    written = combine_written(*[o.written if o is x else (None if o.written is None else _broadcast(
        o.written.reshape((rows,) + (1,) * (len(x.shape) - 1)), x.shape)) for o in operands], shape=x.shape)
    out = _ops.new_result(rt, api, x.shape, out_dtype, "sbuf", out_data, written, m, thunk)
    attrs = {"func": name, "num_inputs": 1, "psum_input": x.buffer == "psum", "reduce": False}
    if reduce_res is not None or reduce_required:
        rname = op_name(reduce_op) or "add"
        if rname not in REDUCE:
            raise rt.rule_error(api, f"unsupported reduce_op {reduce_op!r}", "activation reduce uses add/max/min")
        dest = as_view(reduce_res)
        if dest is None:
            raise rt.rule_error(api, "reduce_res must be a [P, 1] tile", "activation_reduce writes a [P, 1] tile")
        attrs["reduce"] = True
        red = None
        if out_data is not None:
            vals = out_data if m is None else np.where(_broadcast(m, out_data.shape), out_data,
                                                       0.0 if rname in ("add", "sum") else out_data)
            red = REDUCE[rname](vals.reshape(rows, -1), axis=1, keepdims=True).astype(np.float32)
        write(dest, red, None if written is None else np.all(written.reshape(rows, -1), axis=1, keepdims=True),
              None, api)
        ins = _ops.emit_for(rt, out, "scalar", "activation_reduce" if reduce_required else "activation", api,
                            operands, attrs)
        if ins is not None:
            ins.writes = ins.writes + (dest.region(),)
        return out
    _ops.emit_for(rt, out, "scalar", "activation", api, operands, attrs)
    return out


def activation(op, data, *, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=None, mask=None,
               dtype=None, **kwargs) -> Tensor:
    return _activation("nisa.activation", op, data, bias, scale, reduce_op, reduce_res, mask, dtype, False)


def activation_reduce(op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None,
                      **kwargs) -> Tensor:
    return _activation("nisa.activation_reduce", op, data, bias, scale, reduce_op, reduce_res, mask, dtype, True)


# ---- VectorE / GpSimd ------------------------------------------------------------------------
def _free_broadcast(a: tuple, b: tuple) -> bool:
    """Same partitions, and one operand is a [P, 1] column (broadcast along the free axes)."""
    return len(a) >= 2 and len(b) >= 2 and a[0] == b[0] and 1 in (int(_prod(a[1:])), int(_prod(b[1:])))


def tensor_tensor(data1, data2, op, *, dtype=None, mask=None, engine=None, **kwargs) -> Tensor:
    api = "nisa.tensor_tensor"
    name, fn = _alu(op, api)
    default = "gpsimd" if name == "power" else "vector"
    eng = _engine(engine, default, ("vector", "gpsimd", "scalar"), api)
    a = as_view(data1)
    b = as_view(data2)
    if a is None or b is None:
        raise current().rule_error(api, "both operands must be tiles (use tensor_scalar for scalars)",
                                   "tensor_tensor takes two tiles")
    if a.shape != b.shape and int(_prod(a.shape)) != int(_prod(b.shape)) and not _free_broadcast(a.shape, b.shape):
        raise current().rule_error(api, f"operand shapes differ: {a.shape} vs {b.shape}", "tensor_tensor takes equal "
                                   "shapes (or a [P, 1] operand broadcast along the free axis)")
    if a.tensor.buffer == "psum" and b.tensor.buffer == "psum":
        raise current().rule_error(api, "at most one tensor_tensor input may be in PSUM", "tensor_tensor: <= 1 PSUM input")
    return _ops.elementwise(api, eng, "tensor_tensor", fn, [data1, data2], dtype=dtype, mask=mask,
                            attrs={"alu": name})


def _tensor_scalar_lanes(args: list, params: dict) -> bool:
    return _is_elementwise(params["op0"]) and (params["op1"] is None or _is_elementwise(params["op1"]))


@_primitive(replay=_REBUILD, lane=_Lane(accepts=_tensor_scalar_lanes), writes=0)
def _tensor_scalar_into(dst: np.ndarray | None, x: np.ndarray, a0: Any, a1: Any, *, op0: Any, reverse0: bool, op1: Any,
                        reverse1: bool) -> np.ndarray:
    """``x op0 a0`` (then ``op1 a1``), into ``dst`` when given (a deferred thunk, see ``memory.defer``)."""
    with np.errstate(all="ignore"):
        kw = {} if dst is None else {"out": dst}
        v = op0(a0, x, **kw) if reverse0 else op0(x, a0, **kw)
        if op1 is not None:
            v = op1(a1, v, **kw) if reverse1 else op1(v, a1, **kw)
    return v


@_primitive(replay=_REBUILD, lane=_Lane(accepts=_tensor_scalar_lanes))
def _tensor_scalar_eager(x: np.ndarray, a0: Any, a1: Any, **params: Any) -> np.ndarray:
    return np.asarray(_tensor_scalar_into(None, x, a0, a1, **params))


def tensor_scalar(data, op0, operand0, reverse0: bool = False, op1=None, operand1=None, reverse1: bool = False, *,
                  dtype=None, mask=None, engine=None, **kwargs) -> Tensor:
    rt = current()
    api = "nisa.tensor_scalar"
    n0, f0 = _alu(op0, api)
    n1, f1 = _alu(op1, api) if op1 is not None else (None, None)
    eng = _engine(engine, "vector", ("vector", "scalar", "gpsimd"), api)
    m = _ops.mask_array(mask)
    x = operand(data, api, allow_scalar=False, mask=m)
    ops_ = [x]
    o0 = operand(operand0, api)
    c0 = _col(o0, api, x.shape[0])
    if not o0.scalar:
        ops_.append(o0)
    c1 = None
    if op1 is not None:
        o1 = operand(operand1, api)
        c1 = _col(o1, api, x.shape[0])
        if not o1.scalar:
            ops_.append(o1)
    _ops.check_engine_access(rt, api, eng, ops_, None)
    out_dtype = _dt.canonical(dtype) if dtype is not None else x.dtype
    out_data = thunk = None
    if x.data is not None:
        nd = x.data.ndim
        a0, a1 = _reshape_col(c0, nd), _reshape_col(c1, nd)

        params = {"op0": f0, "reverse0": bool(reverse0), "op1": f1, "reverse1": bool(reverse1)}
        if _ops.deferrable((f0,) if f1 is None else (f0, f1), (x.data, a0) if f1 is None else (x.data, a0, a1),
                           out_dtype, x.shape):
            thunk = _Thunk(_tensor_scalar_into, (x.data, a0, a1), params)
        else:
            out_data = _call(_tensor_scalar_eager, x.data, a0, a1, **params)
    written = combine_written(x.written, *[None if o.written is None else _broadcast(
        o.written.reshape((x.shape[0],) + (1,) * (len(x.shape) - 1)), x.shape) for o in ops_[1:]], shape=x.shape)
    if out_data is not None and _dt.is_float(out_dtype):
        out_data = out_data.astype(np.float32, copy=False)
    out = _ops.new_result(rt, api, x.shape, out_dtype, "sbuf", out_data, written, m, thunk)
    _ops.emit_for(rt, out, eng, "tensor_scalar", api, ops_, {"alu": n0, "alu1": n1, "num_inputs": 1,
                                                             "psum_input": x.buffer == "psum",
                                                             "compiler_engine": engine in (None, unknown_engine)})
    return out


def scalar_tensor_tensor(*, data, op0, operand0, op1, operand1, reverse0: bool = False, reverse1: bool = False,
                         dtype=None, mask=None, **kwargs) -> Tensor:
    rt = current()
    api = "nisa.scalar_tensor_tensor"
    n0, f0 = _alu(op0, api)
    n1, f1 = _alu(op1, api)
    m = _ops.mask_array(mask)
    x = operand(data, api, allow_scalar=False, mask=m)
    o0 = operand(operand0, api)
    c0 = _col(o0, api, x.shape[0])
    t1 = operand(operand1, api, allow_scalar=False, mask=m)
    if t1.shape != x.shape:
        raise rt.rule_error(api, f"operand1 shape {t1.shape} differs from data {x.shape}", "operand1 is a full tile")
    ops_ = [x] + ([] if o0.scalar else [o0]) + [t1]
    _ops.check_engine_access(rt, api, "vector", ops_, None)
    out_data = None
    if x.data is not None:
        nd = x.data.ndim
        with np.errstate(all="ignore"):
            v = f0(_reshape_col(c0, nd), x.data) if reverse0 else f0(x.data, _reshape_col(c0, nd))
            v = f1(t1.data, v) if reverse1 else f1(v, t1.data)
        out_data = np.asarray(v).astype(np.float32)
    written = combine_written(x.written, t1.written, shape=x.shape)
    out = _ops.new_result(rt, api, x.shape, _dt.canonical(dtype) if dtype is not None else _dt.promote(x.dtype, t1.dtype),
                          "sbuf", out_data, written, m)
    _ops.emit_for(rt, out, "vector", "scalar_tensor_tensor", api, ops_, {"alu": n0, "alu1": n1, "num_inputs": 2,
                                                                         "psum_input": any(o.buffer == "psum" for o in ops_)})
    return out


@_primitive(replay=_REBUILD)
def _tensor_reduced_lanes(vals: np.ndarray, keep: np.ndarray | None, *, axes: tuple[int, ...], **params: Any
                          ) -> np.ndarray:
    return _tensor_reduced(vals, keep, axes=_lane_axes(axes), **params)


@_primitive(replay=_REBUILD, lane=_Lane(impl=_tensor_reduced_lanes, accepts=_reduces_over_axes))
def _tensor_reduced(vals: np.ndarray, keep: np.ndarray | None, *, name: str, axes: tuple[int, ...], keepdims: bool,
                    negate: bool) -> np.ndarray:
    """``tensor_reduce``'s values: masked-off elements count as the operator's neutral element."""
    if keep is not None:
        neutral = {"add": 0, "sum": 0, "maximum": -np.inf, "max": -np.inf, "minimum": np.inf, "min": np.inf,
                   "multiply": 1, "prod": 1}.get(name, 0)
        vals = np.where(keep, vals, neutral)
    with np.errstate(all="ignore"):
        out = np.asarray(REDUCE[name](vals, axis=axes, keepdims=keepdims))
    if negate:
        out = -out
    return out.astype(np.float32) if out.dtype.kind == "f" else out


def tensor_reduce(op, data, axis, *, dtype=None, negate: bool = False, keepdims: bool = False, mask=None,
                  **kwargs) -> Tensor:
    rt = current()
    api = "nisa.tensor_reduce"
    name = op_name(op)
    if name not in REDUCE:
        raise rt.rule_error(api, f"unsupported reduction {op!r}", "tensor_reduce op is add/max/min/multiply/bitwise")
    m = _ops.mask_array(mask)
    x = operand(data, api, allow_scalar=False, mask=m)
    _ops.check_engine_access(rt, api, "vector", [x], None)
    axes = _ops.reduce_axes(rt, api, x.shape, axis)
    out_shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape)) if keepdims else \
        tuple(s for i, s in enumerate(x.shape) if i not in axes)
    out_data = None
    if x.data is not None:
        out_data = _call(_tensor_reduced, x.data, None if m is None else _broadcast(m, x.data.shape), name=name,
                         axes=axes, keepdims=keepdims, negate=bool(negate))
    written = None if x.written is None else np.all(x.written, axis=axes, keepdims=keepdims)
    out = _ops.new_result(rt, api, out_shape, _dt.canonical(dtype) if dtype is not None else x.dtype, "sbuf",
                          out_data, written, None)
    _ops.emit_for(rt, out, "vector", "tensor_reduce", api, [x], {"alu": name, "num_inputs": 1,
                                                                 "psum_input": x.buffer == "psum"},
                  free=int(_prod(x.shape[1:])) if len(x.shape) > 1 else 1)
    return out


def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0: bool = False, reverse1: bool = False, *,
                       dtype=None, mask=None, **kwargs) -> Tensor:
    """Per partition along the free axis: r[i] = op1(op0(d0[i], r[i-1]), d1[i]), r[-1] = initial."""
    rt = current()
    api = "nisa.tensor_tensor_scan"
    n0, f0 = _alu(op0, api)
    n1, f1 = _alu(op1, api)
    a = operand(data0, api, allow_scalar=False)
    b = operand(data1, api, allow_scalar=False)
    if a.shape != b.shape:
        raise rt.rule_error(api, f"data0 {a.shape} and data1 {b.shape} differ", "scan inputs share one shape")
    init = operand(initial, api)
    rows = a.shape[0]
    c = _col(init, api, rows)
    ops_ = [a, b] + ([] if init.scalar else [init])
    _ops.check_engine_access(rt, api, "vector", ops_, None)
    out_data = None
    if a.data is not None:
        d0 = a.data.reshape(rows, -1).astype(np.float32)
        d1 = b.data.reshape(rows, -1).astype(np.float32)
        res = np.empty_like(d0)
        prev = _broadcast(np.asarray(c, dtype=np.float32).reshape(-1, 1) if isinstance(c, np.ndarray)
                               else np.float32(c), (rows, 1)).reshape(rows).copy()
        with np.errstate(all="ignore"):
            if n0 == "multiply" and n1 == "add" and not reverse0 and not reverse1:
                for i in range(d0.shape[1]):  # the common linear recurrence, without dispatch overhead
                    prev = d0[:, i] * prev + d1[:, i]
                    res[:, i] = prev
            else:
                for i in range(d0.shape[1]):
                    t = f0(prev, d0[:, i]) if reverse0 else f0(d0[:, i], prev)
                    prev = f1(d1[:, i], t) if reverse1 else f1(t, d1[:, i])
                    res[:, i] = prev
        out_data = res.reshape(a.shape)
    written = combine_written(a.written, b.written, shape=a.shape)
    if written is not None:  # a scan propagates invalidity forward along the free axis
        written = np.logical_and.accumulate(written.reshape(rows, -1), axis=1).reshape(a.shape)
    out = _ops.new_result(rt, api, a.shape, _dt.canonical(dtype) if dtype is not None else _dt.promote(a.dtype, b.dtype),
                          "sbuf", out_data, written, _ops.mask_array(mask))
    _ops.emit_for(rt, out, "vector", "tensor_tensor_scan", api, ops_, {"alu": n0, "alu1": n1, "num_inputs": 2,
                                                                       "psum_input": False})
    return out


def reciprocal(data, *, dtype=None, mask=None, **kwargs) -> Tensor:
    return _ops.elementwise("nisa.reciprocal", "vector", "reciprocal", _ops.reciprocal_of, [data], dtype=dtype,
                            mask=mask, attrs={"func": "reciprocal"})


def memset(shape, value, dtype, *, mask=None, engine=None, **kwargs) -> Tensor:
    rt = current()
    api = "nisa.memset"
    eng = _engine(engine, "vector", ("vector", "gpsimd"), api)
    shape = tuple(int(s) for s in shape)
    dtype = _dt.canonical(dtype)
    data = None if rt.options.trace_only else np.full(shape, value, dtype=np.float32 if _dt.is_float(dtype) else np.int64)
    out = _ops.new_result(rt, api, shape, dtype, "sbuf", data, None, _ops.mask_array(mask))
    _ops.emit_for(rt, out, eng, "memset", api, [], {"value": float(value)})
    return out


def iota(expr, dtype, *, mask=None, **kwargs) -> Tensor:
    rt = current()
    api = "nisa.iota"
    if isinstance(expr, (int, np.integer)):
        expr = IndexExpr(np.asarray([[int(expr)]]))
    if not isinstance(expr, IndexExpr):
        raise rt.rule_error(api, "iota takes an affine nl.arange expression", "iota builds constants from index expressions")
    vals = expr.values
    shape = vals.shape if vals.ndim >= 2 else (vals.shape[0], 1)
    data = None if rt.options.trace_only else _broadcast(vals.reshape(shape) if vals.ndim < 2 else vals, shape).copy()
    dtype = _dt.canonical(dtype)
    if data is not None and _dt.is_float(dtype):
        data = data.astype(np.float32)
    out = _ops.new_result(rt, api, shape, dtype, "sbuf", data, None, _ops.mask_array(mask))
    _ops.emit_for(rt, out, "gpsimd", "iota", api, [], {})
    return out


def tensor_copy(src, *, dtype=None, mask=None, engine=None, **kwargs) -> Tensor:
    api = "nisa.tensor_copy"
    eng = _engine(engine, "vector", ("vector", "scalar", "gpsimd"), api)
    return _ops.elementwise(api, eng, "tensor_copy", _ops.identity, [src], dtype=dtype, mask=mask,
                            attrs={"compiler_engine": engine in (None, unknown_engine)})


def bn_stats(data, *, dtype=None, mask=None, **kwargs) -> Tensor:
    """Per partition: (count, mean, var*count) of the even elements, then of the odd elements."""
    rt = current()
    api = "nisa.bn_stats"
    m = _ops.mask_array(mask)
    x = operand(data, api, allow_scalar=False, mask=m)
    _ops.check_engine_access(rt, api, "vector", [x], None)
    rows = x.shape[0]
    f = int(_prod(x.shape[1:]))
    if f > 512:
        raise rt.rule_error(api, f"bn_stats free size {f} exceeds 512", "bn_stats free size <= nl.tile_size.bn_stats_fmax")
    # the mask selects the elements counted (a ragged row) and the partitions written
    keep = np.ones((rows, f), bool) if m is None else _broadcast(m, x.shape).reshape(rows, f)
    out_data = None
    if x.data is not None:
        v = x.data.reshape(rows, f).astype(np.float32)
        parts = []
        for half, k in ((v[:, 0::2], keep[:, 0::2]), (v[:, 1::2], keep[:, 1::2])):
            cnt = k.sum(axis=1).astype(np.float32)
            with np.errstate(all="ignore"):
                mean_ = np.where(cnt > 0, np.where(k, half, 0).sum(axis=1) / np.maximum(cnt, 1), 0).astype(np.float32)
                m2 = np.where(k, (half - mean_[:, None]) ** 2, 0).sum(axis=1).astype(np.float32)
            parts += [cnt, mean_, m2]
        out_data = np.stack(parts, axis=1).astype(np.float32)
    written = None if x.written is None else np.all(x.written.reshape(rows, f), axis=1, keepdims=True)
    out_mask = None if m is None else keep.any(axis=1, keepdims=True)
    out = _ops.new_result(rt, api, (rows, 6), _dt.canonical(dtype) if dtype is not None else _dt.float32, "sbuf",
                          out_data, written, out_mask)
    _ops.emit_for(rt, out, "vector", "bn_stats", api, [x], {"num_inputs": 1},
                  free=f if m is None else max(1, int(keep.sum(axis=1).max())))
    return out


def bn_aggr(data, *, dtype=None, mask=None, **kwargs) -> Tensor:
    """Combine bn_stats triples into (mean, population variance) per partition."""
    rt = current()
    api = "nisa.bn_aggr"
    x = operand(data, api, allow_scalar=False)
    _ops.check_engine_access(rt, api, "vector", [x], None)
    rows = x.shape[0]
    f = int(_prod(x.shape[1:]))
    if f % 3:
        raise rt.rule_error(api, f"bn_aggr input free size {f} is not a multiple of 3", "bn_aggr takes bn_stats output")
    out_data = None
    if x.data is not None:
        t = x.data.reshape(rows, f // 3, 3).astype(np.float64)
        cnt, mean_, m2 = t[..., 0], t[..., 1], t[..., 2]
        total = cnt.sum(axis=1)
        safe = np.where(total > 0, total, 1)
        gmean = (cnt * mean_).sum(axis=1) / safe
        var_ = (m2 + cnt * (mean_ - gmean[:, None]) ** 2).sum(axis=1) / safe
        out_data = np.stack([gmean, var_], axis=1).astype(np.float32)
    written = None if x.written is None else np.all(x.written.reshape(rows, f), axis=1, keepdims=True)
    out = _ops.new_result(rt, api, (rows, 2), _dt.canonical(dtype) if dtype is not None else _dt.float32, "sbuf",
                          out_data, written, None)
    _ops.emit_for(rt, out, "vector", "bn_aggr", api, [x], {"num_inputs": 1}, free=f)
    return out


def affine_select(pred, on_true_tile, on_false_value, *, dtype=None, mask=None, **kwargs) -> Tensor:
    rt = current()
    api = "nisa.affine_select"
    if not isinstance(pred, Mask):
        raise rt.rule_error(api, "pred must be an affine predicate over nl.arange expressions",
                            "affine_select takes a compile-time affine predicate")
    src = as_view(on_true_tile)
    if src is not None and src.tensor.buffer == "psum":
        # GpSimdE cannot read PSUM: the compiler first evacuates the tile to SBUF (a VectorE copy)
        on_true_tile = _ops.copy_tile(on_true_tile)
    x = operand(on_true_tile, api, allow_scalar=False)
    _ops.check_engine_access(rt, api, "gpsimd", [x], None)
    try:
        p = _broadcast(pred.values, x.shape)
    except ValueError:
        raise rt.rule_error(api, f"predicate shape {pred.values.shape} does not match tile {x.shape}",
                            "predicate broadcasts to the tile") from None
    out_data = None if x.data is None else np.where(p, x.data, np.float32(on_false_value)).astype(np.float32)
    written = None if x.written is None else (x.written | ~p)
    out = _ops.new_result(rt, api, x.shape, _dt.canonical(dtype) if dtype is not None else x.dtype, "sbuf",
                          out_data, written, _ops.mask_array(mask))
    _ops.emit_for(rt, out, "gpsimd", "affine_select", api, [x], {"num_inputs": 1})
    return out


def dropout(data, prob, *, dtype=None, mask=None, **kwargs) -> Tensor:
    return _ops.dropout(data, prob, dtype=dtype, mask=mask)


def tensor_scalar_reduce(*, data, op0, operand0, reduce_op, reduce_res, reverse0: bool = False, dtype=None,
                         mask=None, **kwargs) -> Tensor:
    rt = current()
    api = "nisa.tensor_scalar_reduce"
    out = tensor_scalar(data, op0, operand0, reverse0, dtype=dtype, mask=mask)
    rname = op_name(reduce_op)
    if rname not in REDUCE:
        raise rt.rule_error(api, f"unsupported reduce_op {reduce_op!r}", "tensor_scalar_reduce reduce_op")
    dest = as_view(reduce_res)
    red = None if out._data is None else np.asarray(REDUCE[rname](out._data.reshape(out.shape[0], -1), axis=1,
                                                                  keepdims=True)).astype(np.float32)
    write(dest, red, None, None, api)
    if out._producer is not None:
        out._producer.writes = out._producer.writes + (dest.region(),)
        out._producer.op = "tensor_scalar_reduce"
    return out


# ---- cross-partition data movement -----------------------------------------------------------------------
_QUADRANT = 32   # a stream shuffle moves partitions within each quadrant of 32, the same mask in every quadrant
_UNMODIFIED = 255   # a shuffle_mask entry that leaves its destination partition as it is


@_primitive(replay=_REBUILD)
def _rows_taken_lanes(data: np.ndarray, *, rows: tuple[int, ...]) -> np.ndarray:
    return np.take(data, rows, axis=1)


@_primitive(replay=_REBUILD, lane=_Lane(impl=_rows_taken_lanes))
def _rows_taken(data: np.ndarray, *, rows: tuple[int, ...]) -> np.ndarray:
    """The tile whose partition ``p`` is partition ``rows[p]`` of ``data``."""
    return np.take(data, rows, axis=0)


def nc_stream_shuffle(src, dst, shuffle_mask, **kwargs) -> None:
    """VectorE cross-partition move: partition ``32 q + i`` of ``dst`` takes partition ``32 q + shuffle_mask[i]``
    of ``src``, for every quadrant ``q`` of 32 partitions; an entry of 255 leaves its partition unmodified."""
    rt = current()
    api = "nisa.nc_stream_shuffle"
    dv = as_view(dst)
    if dv is None:
        raise rt.rule_error(api, f"dst must be a tile, got {type(dst).__name__}", "nc_stream_shuffle moves partitions "
                            "of a tile")
    entries = list(shuffle_mask) if isinstance(shuffle_mask, (list, tuple)) else None
    if entries is None or len(entries) != _QUADRANT or not all(
            isinstance(e, (int, np.integer)) and (0 <= int(e) < _QUADRANT or int(e) == _UNMODIFIED) for e in entries):
        raise rt.rule_error(api, f"shuffle_mask must be a list of {_QUADRANT} ints in 0..{_QUADRANT - 1} or "
                            f"{_UNMODIFIED}, got {shuffle_mask!r}", "nc_stream_shuffle takes a 32-entry shuffle mask")
    x = operand(src, api, allow_scalar=False)
    if dv.tensor.on_chip:
        dv.check_tile(api)
    _ops.check_engine_access(rt, api, "vector", [x], dv.tensor.buffer)
    if dv.tensor.dtype != x.dtype:
        raise rt.rule_error(api, f"dst is {_dt.name(dv.tensor.dtype)} but src is {_dt.name(x.dtype)}",
                            "nc_stream_shuffle keeps the data type (dst and src share one dtype)")
    p_src, p_dst = x.shape[0], dv.shape[0]
    free = int(_prod(x.shape[1:])) if len(x.shape) > 1 else 1
    if free != (int(_prod(dv.shape[1:])) if len(dv.shape) > 1 else 1):
        raise rt.rule_error(api, f"src {x.shape} and dst {dv.shape} hold different numbers of elements per partition",
                            "nc_stream_shuffle moves whole partitions")
    reads, writes = x.region, dv.region()
    active = -(-max(p_src, p_dst) // _QUADRANT) * _QUADRANT
    starts = {32: (0, 32, 64, 96), 64: (0, 64)}.get(active, (0,))
    for name, reg, t in (("src", reads, x.view.tensor), ("dst", writes, dv.tensor)):
        start = reg.lo[t.par_axis] if t.on_chip else 0
        if start not in starts:
            raise rt.rule_error(api, f"{name} starts at partition {start}; with {active} active partitions a shuffle "
                                f"starts at partition {' or '.join(map(str, starts))}",
                                "nc_stream_shuffle start partitions follow its active-partition rule")
    rows = []
    for p in range(p_dst):
        quadrant, i = divmod(p, _QUADRANT)
        entry = int(entries[i])
        row = _QUADRANT * quadrant + entry
        if entry != _UNMODIFIED and row >= p_src:
            raise rt.rule_error(api, f"shuffle_mask[{i}] = {entry} reads partition {row} of src, which has {p_src}",
                                "nc_stream_shuffle reads partitions of src's own quadrants")
        rows.append(0 if entry == _UNMODIFIED else row)
    kept = np.array([int(entries[p % _QUADRANT]) != _UNMODIFIED for p in range(p_dst)])[:, None]
    mask = None if kept.all() else kept
    data = written = None
    if x.data is not None:
        data = _call(_rows_taken, x.data.reshape(p_src, free), rows=tuple(rows)).reshape(dv.shape)
        written = None if x.written is None else x.written.reshape(p_src, free)[rows].reshape(dv.shape)
    write(dv, data, written, mask, api)
    rt.emit("vector", "nc_stream_shuffle", api, (reads,), (dv.region(mask),), p_dst if mask is None else
            int(kept.sum()), free, (_dt.name(x.dtype),), _dt.name(dv.tensor.dtype),
            attrs={"num_inputs": 1, "psum_input": x.buffer == "psum"})


def dma_copy(*, dst, src, mask=None, dst_rmw_op=None, oob_mode=None, dge_mode=None, **kwargs) -> None:
    """A DMA between HBM and SBUF (either direction, or HBM->HBM); ``dst_rmw_op=np.add`` accumulates."""
    rt = current()
    api = "nisa.dma_copy"
    dv, sv = as_view(dst), as_view(src)
    if dv is None or sv is None:
        raise rt.rule_error(api, "dst and src must be tensors or views", "dma_copy moves tensor data")
    for v in (dv, sv):
        if v.tensor.buffer == "psum":
            raise rt.rule_error(api, "DMA cannot access PSUM", "DMA moves data between HBM and SBUF")
    if int(_prod(dv.shape)) != int(_prod(sv.shape)):
        raise rt.rule_error(api, f"dst {dv.shape} and src {sv.shape} hold different element counts",
                            "dma_copy needs equal sizes")
    m = _ops.mask_array(mask)
    data, written = read(sv, m, api)
    if not dv.tensor.on_chip:
        _ops.check_output_valid(rt, api, written, dv.tensor.name)
    accumulate = dst_rmw_op is not None
    if accumulate and op_name(dst_rmw_op) != "add":
        raise rt.rule_error(api, f"unsupported dst_rmw_op {dst_rmw_op!r}", "dma_copy dst_rmw_op is np.add")
    if data is not None:
        data = data.astype(np.float32, copy=False) if _dt.is_float(sv.tensor.dtype) else data
        data = data.reshape(dv.shape)
        written = None if written is None else written.reshape(dv.shape)
    write(dv, data, written, m, api, accumulate=accumulate)
    onchip = dv if dv.tensor.on_chip else sv
    hbm_view = sv if not sv.tensor.on_chip else dv
    shape = onchip.shape
    p = shape[0] if shape else 1
    per_part = (int(_prod(shape[1:])) if len(shape) > 1 else 1) * _dt.itemsize(sv.tensor.dtype)
    index_reads = tuple(v.region() for v in sv.indirect + dv.indirect)   # indirect DMA reads its index tiles
    rt.emit("dma", "dma_copy", api, (sv.region(m),) + index_reads, (dv.region(m),), p,
            int(_prod(shape[1:])) if len(shape) > 1 else 1,
            (_dt.name(sv.tensor.dtype),), _dt.name(dv.tensor.dtype), accumulate=accumulate,
            attrs={"bytes": p * per_part, "partitions": p, "bytes_per_partition": per_part,
                   "contiguous_bytes": hbm_view.contiguous_bytes(), "src": sv.tensor.buffer, "dst": dv.tensor.buffer,
                   "transpose": False, "indirect": bool(index_reads)})


__all__ = [n for n in dir() if not n.startswith("_")]
