"""``neuronxcc.nki.isa`` (``nisa``) on the simulator: one call, one engine instruction."""
from __future__ import annotations

import enum
from typing import Any

import numpy as np
from math import prod as _prod

from accelopt_nb.sim.api import generations as _generations
from accelopt_nb.sim.api import ops as _ops
from accelopt_nb.sim.core import dtypes as _dt
from accelopt_nb.sim.core.functions import ACTIVATIONS, ALU, REDUCE, UNARY_ALU, op_name
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
from accelopt_nb.sim.core.limits import GEMM_MOVING_FMAX, GEMM_STATIONARY_FMAX, PMAX
from accelopt_nb.sim.core.context import active as _active
from accelopt_nb.sim.core.runtime import current
from accelopt_nb.sim.core.tensor import Tensor
from accelopt_nb.sim.core.views import View as _View


class engine(enum.IntEnum):  # noqa: N801 (NKI's name)
    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    dma = 4
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
    gen4 = 4


def get_nc_version() -> nc_version:
    """The simulated target's generation (``SimOptions.hw``); ``gen2`` when the target is unknown or the call
    comes outside a launch (a kernel module's top level)."""
    rt = _active()
    target = None if rt is None else rt.target
    return nc_version.gen2 if target is None else nc_version(target.nc_version)


class reduce_cmd(enum.IntEnum):  # noqa: N801 (NKI's name)
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


_CMD = reduce_cmd   # the enum, where a parameter of the same name hides it


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
        _generations.require(rt, api, "perf_mode=double_row", 3, "nc_matmul reference, 'Performance mode': "
                             "not supported on NeuronCore-v2")
        bad = [o for o in (st, mv) if _dt.name(o.dtype) not in ("float8_e4m3", "float8_e5m2", "float8_e4m3fn")]
        if bad:
            raise rt.rule_error(api, f"perf_mode=double_row needs fp8 operands, got {_dt.name(bad[0].dtype)}",
                                "double_row performance mode packs two fp8 rows (NeuronCore-v3+)")
        if tile_position:
            raise rt.rule_error(api, "perf_mode=double_row cannot be combined with PE tiling (tile_position)",
                                "double_row performance mode excludes column tiling")
    return name


def _evacuated(rt, api: str, x: Any, role: str) -> Any:
    """A matmul operand the compiler placed in PSUM (the result tile of an NKI 0.1 call, e.g. a TensorE transpose)
    is moved to SBUF first, by a copy the trace shows: TensorE reads SBUF only (nc_matmul docs, "Memory types"),
    yet such kernels compiled and ran on trn1 (autocomp's attention traces). An operand the kernel itself put in
    PSUM (a buffer it allocated there) stays an error."""
    t = x.tensor if isinstance(x, _View) else x if isinstance(x, Tensor) else None   # as_view(x).tensor, no view made
    if t is None or t.buffer != "psum" or t.kind != "result":
        return x
    key = (api, role) + rt.location()
    if key not in rt.warned_once:
        rt.warned_once.add(key)
        rt.warn(f"{api}: {role} operand is a PSUM tile: simulated as the compiler's copy to SBUF before the matmul "
                "(a VectorE tensor_copy in the trace)")
    return _ops.copy_tile(x)


def nc_matmul(stationary, moving, *, is_stationary_onezero: bool = False, is_moving_onezero: bool = False,
              is_transpose: bool = False, tile_position=(), tile_size=(), mask=None, perf_mode=None,
              _api: str = "nisa.nc_matmul", **kwargs) -> Tensor:
    """``stationary.T @ moving`` on the PE array: SBUF [K, M] and [K, N] in, PSUM fp32 [M, N] out."""
    rt = current()
    m_mask = _ops.mask_array(mask)
    stationary, moving = _evacuated(rt, _api, stationary, "stationary"), _evacuated(rt, _api, moving, "moving")
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
    if any(int(v) == 32 for v in tuple(tile_size)):
        _generations.require(rt, _api, "PE tiling with a 32-wide tile (tile_size 32)", 3,
                             "nc_matmul reference: 32-row/column tiles are NeuronCore-v3 or newer")
    out_dtype = _dt.float32
    if is_transpose and _transpose_mode(rt) and _dt.is_float(st.dtype) and _dt.itemsize(st.dtype) == 2:
        out_dtype = st.dtype  # PE transpose mode passes 2-byte types through (NC-v3)
    data = thunk = None
    if st.data is not None and is_transpose and rows == 1 and _transpose_mode(rt):
        data = _call(_pe_transpose_mode, st.data, mv.data)
    elif st.data is not None and rows == 1 and _ops.deferrable((np.matmul,), (st.data, mv.data), out_dtype, (m, n)):
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


def _transpose_mode(rt) -> bool:
    """Whether ``is_transpose=True`` switches TensorE into transpose mode. NeuronCore-v3 and later have one
    (bit-accurate, 2-byte results for 2-byte inputs); NeuronCore-v2 does not, the flag only labels the
    instruction for the profiler and it runs as the plain fp32 matmul (nc_matmul docs, "Transpose mode";
    Trainium2 architecture guide, "Built-in Transpose Support"). An unknown target keeps the NC-v3 reading."""
    return rt.target is None or rt.target.nc_version >= 3


@_primitive(replay=_REBUILD, lane=_Lane())
def _pe_transpose_mode(st: np.ndarray, mv: np.ndarray) -> np.ndarray:
    """TensorE transpose mode (NeuronCore-v3): against an identity moving operand, the stationary's exact
    transpose (NaN and Inf stay where they were); against anything else, which the docs leave undescribed, the
    fp32 matmul. Over any leading axes (lanes), tile by tile."""
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.matmul(np.swapaxes(st.astype(np.float32, copy=False), -1, -2), mv.astype(np.float32, copy=False))
    k, n = mv.shape[-2:]
    if k != n:
        return out
    identity = np.all(mv.astype(np.float32, copy=False) == np.eye(k, dtype=np.float32), axis=(-2, -1))
    if not np.any(identity):
        return out
    exact = np.broadcast_to(np.swapaxes(st, -1, -2).astype(np.float32), out.shape)
    return np.where(np.asarray(identity)[..., None, None], exact, out)


@_primitive(replay=_REBUILD, lane=_Lane())
def _pe_transposed_nc2(x: np.ndarray) -> np.ndarray:
    """NeuronCore-v2's TensorE transpose: a matmul against an identity (no transpose mode), so a NaN or Inf
    spreads along its output row (0 x Inf = NaN, nc_transpose docs); finite values come out exact."""
    t = np.swapaxes(x, -1, -2).copy()
    if not _dt.is_float(x.dtype) or np.all(np.isfinite(x)):
        return t
    eye = np.eye(x.shape[-2], dtype=np.float32)
    with np.errstate(invalid="ignore"):
        return np.matmul(t.astype(np.float32), eye).astype(x.dtype)


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
    if p > PMAX or f > PMAX:
        raise rt.rule_error(_api, f"transpose takes at most 128x128, got {op.shape}", "nc_transpose <= 128x128 "
                            "(the partition dim of input and output)")
    # VectorE transposes 32x32 blocks, one per 32-partition quadrant (nc_transpose docs; architecture guide,
    # "Reshape Bank"). A larger tile compiled and gave the full transpose on trn1 (autocomp's SD-attention
    # candidates, output checked): simulated as the compiler splitting it into 32x32 blocks
    blocks = (-(-p // 32)) * (-(-f // 32)) if eng == "vector" else 1
    _ops.check_engine_access(rt, _api, eng, [op], None)
    nc2 = eng == "tensor" and rt.target is not None and rt.target.nc_version == 2
    out_data = None if op.data is None else _call(_pe_transposed_nc2 if nc2 else _transposed, op.data)
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
        # the blocks stream through the engine one after another: 32 elements per lane each (an estimate: the
        # docs give max(MIN_II, N) for one block and nothing for a split)
        _ops.emit_for(rt, out, "vector", "transpose", _api, [op], {"num_inputs": 1, "blocks": blocks},
                      **({} if blocks == 1 else {"partitions": min(f, 32), "free": 32 * blocks}))
    return out


# ---- accumulation registers (reduce_cmd) ----------------------------------------------------------
# ScalarE (activation*) and VectorE (tensor_scalar_reduce, range_select, select_reduce) each keep 128 32-bit
# accumulation registers, one per lane, that persist across instructions (nki.isa docs: activation, "reduce_regs";
# tensor_scalar_reduce, "Accumulator behavior"). They are an fp32 [128, 1] tensor of the launch, outside the trace,
# read and written like any tile: validity (never reset = never written) and loop replay come with it.
_REDUCE_IDENTITY = {"add": 0.0, "sum": 0.0, "multiply": 1.0, "prod": 1.0, "maximum": -np.inf, "max": -np.inf,
                    "minimum": np.inf, "min": np.inf}
_COMBINE = {"add": np.add, "sum": np.add, "multiply": np.multiply, "prod": np.multiply, "maximum": np.maximum,
            "max": np.maximum, "minimum": np.minimum, "min": np.minimum}


def _reduce_cmd(value: Any, default: reduce_cmd) -> reduce_cmd:
    return default if value is None else reduce_cmd(int(value))


def _registers(rt, engine: str) -> Tensor:
    regs = rt.engine_regs.get(engine)
    if regs is None:
        data = None if rt.options.trace_only else np.zeros((PMAX, 1), np.float32)
        regs = Tensor(rt, (PMAX, 1), _dt.float32, "sbuf", "internal", name=f"{engine}_reduce_regs", data=data)
        rt.trace.tensors.pop(regs.id, None)   # engine state, not an allocation the compiler makes
        rt.engine_regs[engine] = regs
    return regs


@_primitive(replay=_REBUILD)
def _filled_col(*, rows: int, value: float) -> np.ndarray:
    return np.full((rows, 1), value, np.float32)


@_primitive(replay=_REBUILD)
def _combined(regs: np.ndarray, red: np.ndarray, *, name: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        return _COMBINE[name](regs.astype(np.float32, copy=False), red.astype(np.float32, copy=False))


@_primitive(replay=_REBUILD)
def _negated(x: np.ndarray) -> np.ndarray:
    return np.negative(x)


@_primitive(replay=_REBUILD)
def _free_reduced(vals: np.ndarray, keep: np.ndarray | None, *, name: str, rows: int) -> np.ndarray:
    """Per partition, ``name`` over the free axes (masked-off elements count as the identity)."""
    vals = vals.reshape(rows, -1)
    if keep is not None:
        vals = np.where(keep.reshape(rows, -1), vals, _REDUCE_IDENTITY.get(name, 0.0))
    with np.errstate(all="ignore"):
        return np.asarray(REDUCE[name](vals, axis=1, keepdims=True)).astype(np.float32)


def _accumulate_registers(rt, api: str, engine: str, cmd: reduce_cmd, name: str, red: Any, red_written: Any,
                          rows: int, reduce_res: Any, init: Any = None, negate: bool = False) -> Any:
    """One instruction's use of ``engine``'s registers: ``cmd`` on them with this instruction's per-partition
    reduction ``red`` (``name``), then ``reduce_res`` (if given) reads them out. Returns reduce_res's view."""
    regs = _registers(rt, engine)
    view = as_view(regs[0:rows, 0:1])
    full = as_view(regs[0:PMAX, 0:1])
    if cmd in (reduce_cmd.reset, reduce_cmd.reset_reduce):
        value = 0.0 if cmd == reduce_cmd.reset or engine == "scalar" else _REDUCE_IDENTITY.get(name, 0.0)
        zeros = None if rt.options.trace_only else _call(_filled_col, rows=PMAX, value=value)
        write(full, zeros, None, None, api, reduction=True)
    elif cmd == reduce_cmd.load_reduce:
        iv, iw = init
        write(view, iv, iw, None, api, reduction=True)
    if cmd in (reduce_cmd.reduce, reduce_cmd.reset_reduce, reduce_cmd.load_reduce):
        cur, cur_written = read(view, None, api)
        new = None if cur is None or red is None else _call(_combined, cur, red, name=name)
        write(view, new, combine_written(cur_written, red_written, shape=(rows, 1)), None, api, reduction=True)
    if reduce_res is None:
        return None
    dest = as_view(reduce_res)
    if dest is None or int(_prod(dest.shape)) != rows:
        raise rt.rule_error(api, f"reduce_res must be a [{rows}, 1] tile, got {getattr(dest, 'shape', reduce_res)!r}",
                            "reduce_res holds one value per partition of data")
    vals, written = read(view, None, api)
    if vals is not None:
        if negate:
            vals = _call(_negated, vals)
        vals = vals.reshape(dest.shape)
    write(dest, vals, None if written is None else written.reshape(dest.shape), None, api)
    return dest


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
                boxed: bool = True, cmd: reduce_cmd = reduce_cmd.idle) -> Tensor:
    rt = current()
    name, fn = _act(op, api)
    m = _ops.mask_array(mask)
    view = as_view(data)
    if reduce_required:   # activation_reduce: this instruction's reduction, read out
        cmd = reduce_cmd.reset_reduce
    registers = reduce_res is not None or cmd != reduce_cmd.idle
    reduces = cmd in (reduce_cmd.reduce, reduce_cmd.reset_reduce)
    # a ragged tile: computed on the box its mask keeps (a plain activation; a reduction reads the whole tile)
    box = (None if not boxed or rt.options.trace_only or view is None or registers
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
        if not registers and _ops.deferrable(
                (fn,), (xs, np.float32(sc) if type(sc) is float else sc, np.float32(bc) if type(bc) is float else bc),
                out_dtype, x.shape):
            # x * 1.0 is x; x + 0.0 is x but at -0.0, which only some functions tell apart
            skip_scale = type(sc) in _SCALARS and sc == 1.0
            skip_bias = type(bc) in _SCALARS and bc == 0.0 and _sign_blind(fn)
            thunk = _Thunk(_activation_into, (xs, None if skip_scale else sc, None if skip_bias else bc), {"func": fn},
                           box)
        elif box is not None:   # computed whole after all
            return _activation(api, op, data, bias, scale, reduce_op, reduce_res, mask, dtype, reduce_required,
                               boxed=False, cmd=cmd)
        else:
            out_data = _call(_activation_eager, xs, sc, bc, func=fn)
    written = combine_written(*[o.written if o is x else (None if o.written is None else _broadcast(
        o.written.reshape((rows,) + (1,) * (len(x.shape) - 1)), x.shape)) for o in operands], shape=x.shape)
    out = _ops.new_result(rt, api, x.shape, out_dtype, "sbuf", out_data, written, m, thunk)
    attrs = {"func": name, "num_inputs": 1, "psum_input": x.buffer == "psum", "reduce": False}
    if not registers:
        _ops.emit_for(rt, out, "scalar", "activation", api, operands, attrs)
        return out
    rname = op_name(reduce_op) or "add"
    if reduces and rname not in REDUCE:
        raise rt.rule_error(api, f"unsupported reduce_op {reduce_op!r}", "activation reduce uses add/max/min")
    red = red_written = None
    if reduces:
        if out_data is not None:
            red = _call(_free_reduced, out_data, None if m is None else _broadcast(m, out_data.shape), name=rname,
                        rows=rows)
        red_written = None if written is None else np.all(written.reshape(rows, -1), axis=1, keepdims=True)
    dest = _accumulate_registers(rt, api, "scalar", cmd, rname, red, red_written, rows, reduce_res)
    attrs["reduce"] = dest is not None   # reading the registers out is one more (small) instruction
    attrs["reduce_cmd"] = cmd.name
    ins = _ops.emit_for(rt, out, "scalar", "activation_reduce" if reduce_required else "activation", api,
                        operands, attrs)
    if ins is not None and dest is not None:
        ins.writes = ins.writes + (dest.region(),)
    return out


def activation(op, data, *, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=None, mask=None,
               dtype=None, **kwargs) -> Tensor:
    """ScalarE ``op(data * scale + bias)``; ``reduce_cmd`` drives the 128 accumulation registers (idle: untouched,
    reset: zeroed, reduce: this instruction's free-axis reduction added, reset_reduce: zeroed then added) and
    ``reduce_res`` reads them out."""
    return _activation("nisa.activation", op, data, bias, scale, reduce_op, reduce_res, mask, dtype, False,
                       cmd=_reduce_cmd(reduce_cmd, _CMD.idle))


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

        # a unary ALU operator reads the data alone, whichever side its (ignored) operand is on
        params = {"op0": f0, "reverse0": bool(reverse0) and n0 not in UNARY_ALU, "op1": f1,
                  "reverse1": bool(reverse1) and n1 not in UNARY_ALU}
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


def _result_into(api: str, dst: Any, out: Tensor) -> Tensor | None:
    """The NKI 0.1 form returns its result tile; the standalone ``nki`` form writes it into ``dst`` (the
    instruction re-targeted, no copy added)."""
    if dst is None:
        return out
    view = as_view(dst)
    if view is None or not view.tensor.on_chip:
        raise current().rule_error(api, f"dst must be an on-chip tile, got {type(dst).__name__}",
                                   "ISA instructions write SBUF/PSUM tiles")
    _ops.copy_into(view, out, api)
    return None


def _pattern(rt, api: str, pattern: Any, per_partition: int) -> tuple[tuple[int, int], ...]:
    """An iota / affine_select ``pattern``: up to 4 ``[step, num]`` pairs, outermost first, whose counts multiply
    to the elements per partition of ``dst``."""
    try:
        pairs = tuple((int(st), int(num)) for st, num in pattern)
    except (TypeError, ValueError):
        raise rt.rule_error(api, f"pattern must be a list of [step, num] pairs, got {pattern!r}",
                            "pattern is up to 4 [step, num] pairs") from None
    if not 1 <= len(pairs) <= 4 or any(num < 1 for _, num in pairs):
        raise rt.rule_error(api, f"pattern must hold 1 to 4 [step, num] pairs with num >= 1, got {pattern!r}",
                            "pattern is up to 4 [step, num] pairs")
    if int(_prod(num for _, num in pairs)) != per_partition:
        raise rt.rule_error(api, f"pattern {pattern!r} describes {int(_prod(num for _, num in pairs))} elements per "
                            f"partition, dst holds {per_partition}", "the pattern's counts multiply to dst's elements "
                            "per partition")
    return pairs


@_primitive(replay=_REBUILD)
def _affine_values(*, rows: int, pattern: tuple, offset: int, multiplier: int) -> np.ndarray:
    """``offset + p * multiplier + sum(i_k * step_k)`` for partition ``p`` and pattern indices ``i_k`` (int32
    arithmetic), as [rows, elements per partition]."""
    v = np.full((rows, 1), offset, np.int64) + np.arange(rows, dtype=np.int64)[:, None] * multiplier
    free = np.zeros(1, np.int64)
    for step, num in pattern:
        free = (free[:, None] + np.arange(num, dtype=np.int64)[None, :] * step).reshape(-1)
    return (v + free[None, :]).astype(np.int32)


def iota(*, expr=None, dtype=None, mask=None, dst=None, pattern=None, offset=0, channel_multiplier=0,
         **kwargs) -> Tensor | None:
    """GpSimd constants: from an affine ``nl.arange`` expression (NKI 0.1), or into ``dst`` from a ``pattern`` of
    ``[step, num]`` pairs: ``offset + partition * channel_multiplier + sum(index_k * step_k)`` (standalone nki)."""
    rt = current()
    api = "nisa.iota"
    if pattern is not None:
        view = as_view(dst)
        if view is None:
            raise rt.rule_error(api, "iota with a pattern writes into dst", "iota(dst, pattern, ...)")
        if view.tensor.buffer != "sbuf":
            raise rt.rule_error(api, f"dst is in {view.tensor.buffer.upper()}", "iota writes SBUF")
        rows = view.shape[0]
        free = int(_prod(view.shape[1:])) if len(view.shape) > 1 else 1
        pairs = _pattern(rt, api, pattern, free)
        data = None if rt.options.trace_only else _call(_affine_values, rows=rows, pattern=pairs, offset=int(offset),
                                                        multiplier=int(channel_multiplier)).reshape(view.shape)
        out = _ops.new_result(rt, api, view.shape, _dt.int32, "sbuf", data, None, None)
        _ops.emit_for(rt, out, "gpsimd", "iota", api, [], {})
        return _result_into(api, dst, out)
    if isinstance(expr, (int, np.integer)):
        expr = IndexExpr(np.asarray([[int(expr)]]))
    if not isinstance(expr, IndexExpr):
        raise rt.rule_error(api, "iota takes an affine nl.arange expression", "iota builds constants from index expressions")
    vals = expr.values
    shape = vals.shape if vals.ndim >= 2 else (vals.shape[0], 1)
    data = None if rt.options.trace_only else _broadcast(vals.reshape(shape) if vals.ndim < 2 else vals, shape).copy()
    dtype = _dt.canonical(dtype if dtype is not None else _dt.int32)
    if data is not None and _dt.is_float(dtype):
        data = data.astype(np.float32)
    out = _ops.new_result(rt, api, shape, dtype, "sbuf", data, None, _ops.mask_array(mask))
    _ops.emit_for(rt, out, "gpsimd", "iota", api, [], {})
    return _result_into(api, dst, out)


def tensor_copy(src, *, dtype=None, mask=None, engine=None, **kwargs) -> Tensor:
    api = "nisa.tensor_copy"
    eng = _engine(engine, "vector", ("vector", "scalar", "gpsimd"), api)
    return _ops.elementwise(api, eng, "tensor_copy", _ops.identity, [src], dtype=dtype, mask=mask,
                            attrs={"compiler_engine": engine in (None, unknown_engine)})


def _dynamic_copy(api: str, op: str, src: Any, dtype: Any, mask: Any, engine_: Any) -> Tensor:
    """A tensor_copy whose instruction is ``op`` (costed max(MIN_II_DYNAMIC, N)) and reads the offset tiles of
    its dynamically indexed views too."""
    eng = _engine(engine_, "vector", ("vector", "scalar", "gpsimd"), api)
    out = _ops.elementwise(api, eng, op, _ops.identity, [src], dtype=dtype, mask=mask,
                           attrs={"compiler_engine": engine_ in (None, unknown_engine)})
    sv = as_view(src)
    ins = out._producer
    if ins is not None and sv is not None and sv.indirect:
        ins.reads = ins.reads + tuple(t.region() for t in sv.indirect)
    return out


def tensor_copy_dynamic_src(src, *, mask=None, dtype=None, engine=None, **kwargs) -> Tensor:
    """A copy of ``src``, an on-chip tile indexed at a dynamic offset (``sbuf[ix, offsets[0, i] + iy]``, the
    offset a one-element SBUF tile read when the instruction runs), into a new tile (NKI 0.1 only)."""
    return _dynamic_copy("nisa.tensor_copy_dynamic_src", "tensor_copy_dynamic_src", src, dtype, mask, engine)


def tensor_copy_dynamic_dst(*, dst, src, mask=None, dtype=None, engine=None, **kwargs) -> None:
    """A copy of ``src`` into ``dst``, an on-chip tile indexed at a dynamic offset (NKI 0.1 only)."""
    rt = current()
    api = "nisa.tensor_copy_dynamic_dst"
    dv = as_view(dst)
    if dv is None or not dv.tensor.on_chip:
        raise rt.rule_error(api, f"dst must be an on-chip tile, got {type(dst).__name__}",
                            "tensor_copy_dynamic_dst writes a tile in SBUF or PSUM")
    sv = as_view(src)
    if sv is not None and (sv.shape[0] != dv.shape[0] or int(_prod(sv.shape)) != int(_prod(dv.shape))):
        raise rt.rule_error(api, f"src {sv.shape} and dst {dv.shape}", "tensor_copy_dynamic_dst: src and dst have "
                            "the same partitions and elements per partition")
    out = _dynamic_copy(api, "tensor_copy_dynamic_dst", src, dtype if dtype is not None else dv.tensor.dtype, mask,
                        engine)
    _ops.copy_into(dv, out, api)
    ins = out._producer
    if ins is not None and dv.indirect:
        ins.reads = ins.reads + tuple(t.region() for t in dv.indirect)


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


@_primitive(replay=_REBUILD)
def _selected(x: np.ndarray, keep: np.ndarray, *, false_value: float) -> np.ndarray:
    return np.where(keep, x.astype(np.float32, copy=False), np.float32(false_value)).astype(np.float32)


@_primitive(replay=_REBUILD)
def _affine_kept(*, rows: int, pattern: tuple, offset: int, multiplier: int, cmp: Any) -> np.ndarray:
    return np.asarray(cmp(_affine_values(rows=rows, pattern=pattern, offset=offset, multiplier=multiplier), 0))


def affine_select(*, pred=None, on_true_tile=None, on_false_value=None, dtype=None, mask=None, dst=None, pattern=None,
                  channel_multiplier=0, cmp_op=None, offset=0, **kwargs) -> Tensor | None:
    """GpSimd ``where(predicate, on_true_tile, on_false_value)``: the predicate an affine ``nl.arange`` comparison
    (NKI 0.1), or ``cmp_op(offset + partition * channel_multiplier + sum(index_k * step_k), 0)`` from a
    ``pattern`` (standalone nki; ``cmp_op`` defaults to equal)."""
    rt = current()
    api = "nisa.affine_select"
    if pattern is None and not isinstance(pred, Mask):
        raise rt.rule_error(api, "pred must be an affine predicate over nl.arange expressions",
                            "affine_select takes a compile-time affine predicate")
    src = as_view(on_true_tile)
    if src is not None and src.tensor.buffer == "psum":
        # GpSimdE cannot read PSUM: the compiler first evacuates the tile to SBUF (a VectorE copy)
        on_true_tile = _ops.copy_tile(on_true_tile)
    x = operand(on_true_tile, api, allow_scalar=False)
    _ops.check_engine_access(rt, api, "gpsimd", [x], None)
    rows = x.shape[0]
    if pattern is not None:
        cname, cfn = _alu(cmp_op if cmp_op is not None else "equal", api)
        pairs = _pattern(rt, api, pattern, int(_prod(x.shape[1:])) if len(x.shape) > 1 else 1)
        p = None if rt.options.trace_only and x.written is None else _call(
            _affine_kept, rows=rows, pattern=pairs, offset=int(offset), multiplier=int(channel_multiplier),
            cmp=cfn).reshape(x.shape)
    else:
        try:
            p = _broadcast(pred.values, x.shape)
        except ValueError:
            raise rt.rule_error(api, f"predicate shape {pred.values.shape} does not match tile {x.shape}",
                                "predicate broadcasts to the tile") from None
    out_data = None if x.data is None else _call(_selected, x.data, p, false_value=float(on_false_value))
    written = None if x.written is None else (x.written | ~p)
    out = _ops.new_result(rt, api, x.shape, _dt.canonical(dtype) if dtype is not None else x.dtype, "sbuf",
                          out_data, written, _ops.mask_array(mask))
    _ops.emit_for(rt, out, "gpsimd", "affine_select", api, [x], {"num_inputs": 1})
    return _result_into(api, dst, out)


def dropout(data, prob, *, dtype=None, mask=None, **kwargs) -> Tensor:
    return _ops.dropout(data, prob, dtype=dtype, mask=mask)


def tensor_scalar_reduce(*, data, op0, operand0, reduce_op, reduce_res=None, reverse0: bool = False,
                         reduce_cmd=None, reduce_init=None, reduce_res_negate: bool = False, dtype=None, mask=None,
                         **kwargs) -> Tensor:
    """VectorE ``data op0 operand0`` reduced along the free axes into the VectorE accumulation registers
    (``reduce_cmd``: reset_reduce by default, reduce, load_reduce from ``reduce_init``), read out into
    ``reduce_res`` (negated with ``reduce_res_negate``)."""
    rt = current()
    api = "nisa.tensor_scalar_reduce"
    cmd = _reduce_cmd(reduce_cmd, _CMD.reset_reduce)
    if cmd not in (_CMD.reset_reduce, _CMD.reduce, _CMD.load_reduce):
        raise rt.rule_error(api, f"reduce_cmd {cmd.name} does not reduce", "tensor_scalar_reduce takes reduce_cmd "
                            "reset_reduce, reduce or load_reduce")
    if (reduce_init is not None) != (cmd == _CMD.load_reduce):
        raise rt.rule_error(api, "reduce_init goes with reduce_cmd=load_reduce (and load_reduce needs it)",
                            "reduce_init is set exactly when reduce_cmd is load_reduce")
    rname = op_name(reduce_op)
    if rname not in _COMBINE:
        raise rt.rule_error(api, f"unsupported reduce_op {reduce_op!r}", "tensor_scalar_reduce reduce_op is "
                            "nl.add, nl.multiply, nl.max or nl.min")
    out = tensor_scalar(data, op0, operand0, reverse0, dtype=dtype, mask=mask)
    rows = out.shape[0]
    values = out._data
    red = None if values is None else _call(_free_reduced, values, None, name=rname, rows=rows)
    red_written = None if out._written is None else np.all(out._written.reshape(rows, -1), axis=1, keepdims=True)
    init = None
    if cmd == _CMD.load_reduce:
        io = operand(reduce_init, api)
        c = _col(io, api, rows)
        iv = None if c is None else (_call(_filled_col, rows=rows, value=float(c)) if io.scalar else c)
        init = (iv, None if io.scalar or io.written is None else io.written.reshape(rows, 1))
    dest = _accumulate_registers(rt, api, "vector", cmd, rname, red, red_written, rows, reduce_res, init,
                                 negate=bool(reduce_res_negate))
    if out._producer is not None:
        if dest is not None:
            out._producer.writes = out._producer.writes + (dest.region(),)
        out._producer.op = "tensor_scalar_reduce"
    return out


# ---- top-8 search (VectorE) ------------------------------------------------------------------------
_EIGHT = 8


def _per_partition(rt, api: str, x: Operand, what: str) -> int:
    n = int(_prod(x.shape[1:])) if len(x.shape) > 1 else 1
    if not _EIGHT <= n <= 16384:
        raise rt.rule_error(api, f"{what} holds {n} elements per partition", f"{api} reads 8 to 16384 elements "
                            "per partition")
    return n


def _eight(rt, api: str, vals: Operand, rows: int) -> None:
    if vals.shape[0] != rows or (int(_prod(vals.shape[1:])) if len(vals.shape) > 1 else 1) != _EIGHT:
        raise rt.rule_error(api, f"vals {vals.shape} must hold 8 values for each of the {rows} partitions",
                            "vals holds exactly 8 values per partition")


@_primitive(replay=_REBUILD)
def _top8(x: np.ndarray, *, rows: int) -> np.ndarray:
    v = x.reshape(rows, -1).astype(np.float32, copy=False)
    return -np.sort(-v, axis=1, kind="stable")[:, :_EIGHT]


@_primitive(replay=_REBUILD)
def _match_positions(data: np.ndarray, vals: np.ndarray, *, rows: int, ascending: bool) -> np.ndarray:
    """Per partition, for each of the 8 ``vals``: the position of its match in ``data`` (fp32 comparison), -1 if
    none. A value repeated in ``vals`` takes successive matches: in ascending slot order (nc_find_index8) or
    descending (nc_match_replace8, which replaces as it goes from slot 7 down)."""
    d = data.reshape(rows, -1).astype(np.float32, copy=False)
    v = vals.reshape(rows, _EIGHT).astype(np.float32, copy=False)
    same = v[:, :, None] == v[:, None, :]                              # [P, 8, 8]
    before = np.tril(np.ones((_EIGHT, _EIGHT), bool), -1) if ascending else np.triu(np.ones((_EIGHT, _EIGHT), bool), 1)
    k = (same & before[None]).sum(axis=2)                              # earlier duplicates of each slot
    eq = d[:, None, :] == v[:, :, None]                                # [P, 8, N]
    hit = eq & (np.cumsum(eq, axis=2) == (k + 1)[:, :, None])
    return np.where(hit.any(axis=2), hit.argmax(axis=2), -1)


@_primitive(replay=_REBUILD)
def _as_index(pos: np.ndarray, *, sentinel: int) -> np.ndarray:
    return np.where(pos >= 0, pos, sentinel).astype(np.int64)


@_primitive(replay=_REBUILD)
def _replaced(data: np.ndarray, pos: np.ndarray, *, rows: int, imm: float) -> np.ndarray:
    out = data.reshape(rows, -1).astype(np.float32)
    r, c = np.nonzero(pos >= 0)
    out[r, pos[r, c]] = np.float32(imm)
    return out.reshape(data.shape)


def max8(*, src, mask=None, dtype=None, dst=None, **kwargs) -> Tensor | None:
    """VectorE: the 8 largest values of each partition (read in fp32), in descending order, as [P, 8]."""
    rt = current()
    api = "nisa.max8"
    x = operand(src, api, allow_scalar=False, mask=_ops.mask_array(mask))
    _ops.check_engine_access(rt, api, "vector", [x], None)
    rows = x.shape[0]
    n = _per_partition(rt, api, x, "src")
    data = None if x.data is None else _call(_top8, x.data, rows=rows)
    written = None if x.written is None else _broadcast(np.all(x.written.reshape(rows, -1), axis=1, keepdims=True),
                                                        (rows, _EIGHT))
    out = _ops.new_result(rt, api, (rows, _EIGHT), _dt.canonical(dtype) if dtype is not None else x.dtype, "sbuf",
                          data, written, None)
    _ops.emit_for(rt, out, "vector", "max8", api, [x], {"num_inputs": 1, "psum_input": x.buffer == "psum"}, free=n)
    return _result_into(api, dst, out)


def _found_written(d: Operand, v: Operand, rows: int) -> np.ndarray | None:
    parts = [np.all(o.written.reshape(rows, -1), axis=1, keepdims=True) for o in (d, v) if o.written is not None]
    return None if not parts else _broadcast(np.logical_and.reduce(parts), (rows, _EIGHT))


def _data_and_eight(rt, api: str, data, vals, mask) -> tuple[Operand, Operand, int, int]:
    """The operands of the 8-value VectorE searches: ``data`` (rows, n) and 8 ``vals`` per partition."""
    d = operand(data, api, allow_scalar=False, mask=_ops.mask_array(mask))
    v = operand(vals, api, allow_scalar=False)
    _ops.check_engine_access(rt, api, "vector", [d, v], None)
    rows = d.shape[0]
    n = _per_partition(rt, api, d, "data")
    _eight(rt, api, v, rows)
    return d, v, rows, n


def nc_find_index8(*, data, vals, mask=None, dtype=None, dst=None, **kwargs) -> Tensor | None:
    """VectorE: per partition, the index of the first match of each of the 8 ``vals`` in ``data`` (duplicates
    take successive matches); all ones (0xFFFFFFFF / 0xFFFF) where a value is missing. uint32 by default."""
    rt = current()
    api = "nisa.nc_find_index8"
    d, v, rows, n = _data_and_eight(rt, api, data, vals, mask)
    target = as_view(dst)
    out_dtype = _dt.canonical(dtype) if dtype is not None else (target.dtype if target is not None else _dt.uint32)
    if _dt.name(out_dtype) not in ("uint32", "uint16"):
        raise rt.rule_error(api, f"indices are uint32 or uint16, not {_dt.name(out_dtype)}",
                            "nc_find_index8 writes uint16 or uint32 indices")
    idx = None
    if d.data is not None:
        pos = _call(_match_positions, d.data, v.data, rows=rows, ascending=True)
        idx = _call(_as_index, pos, sentinel=0xFFFF if _dt.name(out_dtype) == "uint16" else 0xFFFFFFFF)
    out = _ops.new_result(rt, api, (rows, _EIGHT), out_dtype, "sbuf", idx, _found_written(d, v, rows), None)
    _ops.emit_for(rt, out, "vector", "nc_find_index8", api, [d, v], {"num_inputs": 2,
                                                                      "psum_input": d.buffer == "psum"}, free=n)
    return _result_into(api, dst, out)


def nc_match_replace8(*, data, vals, imm, dst_idx=None, mask=None, dtype=None, dst=None, **kwargs) -> Tensor | None:
    """VectorE: ``data`` with the first match of each of the 8 ``vals`` replaced by ``imm`` (slot 7 first, so a
    repeated value's earliest match lands in its highest slot); ``dst_idx`` gets the matched positions."""
    rt = current()
    api = "nisa.nc_match_replace8"
    d, v, rows, n = _data_and_eight(rt, api, data, vals, mask)
    pos = replaced = None
    if d.data is not None:
        pos = _call(_match_positions, d.data, v.data, rows=rows, ascending=False)
        replaced = _call(_replaced, d.data, pos, rows=rows, imm=float(imm))
    written = None if d.written is None and v.written is None else combine_written(
        d.written, None if v.written is None else _broadcast(
            np.all(v.written.reshape(rows, -1), axis=1).reshape((rows,) + (1,) * (len(d.shape) - 1)), d.shape),
        shape=d.shape)
    out = _ops.new_result(rt, api, d.shape, _dt.canonical(dtype) if dtype is not None else d.dtype, "sbuf",
                          replaced, written, None)
    ins = _ops.emit_for(rt, out, "vector", "nc_match_replace8", api, [d, v], {"num_inputs": 2,
                        "psum_input": d.buffer == "psum"}, free=n)
    if dst_idx is not None:
        iv = as_view(dst_idx)
        if iv is None or int(_prod(iv.shape)) != rows * _EIGHT:
            raise rt.rule_error(api, f"dst_idx must be a [{rows}, 8] tile", "dst_idx holds 8 indices per partition")
        idx = None if pos is None else _call(_as_index, pos, sentinel=0xFFFF if _dt.name(iv.dtype) == "uint16"
                                             else 0xFFFFFFFF).reshape(iv.shape)
        fw = _found_written(d, v, rows)
        write(iv, idx, None if fw is None else fw.reshape(iv.shape), None, api)
        if ins is not None:
            ins.writes = ins.writes + (iv.region(),)
    return _result_into(api, dst, out)


# ---- selections and partition reductions -----------------------------------------------------------------
_FP32_MIN = float(np.finfo(np.float32).min)
_COMPARISONS = ("equal", "less", "less_equal", "greater", "greater_equal")


def tensor_copy_predicated(*, src, dst, predicate, reverse_pred: bool = False, mask=None, dtype=None,
                           **kwargs) -> None:
    """VectorE: ``dst = src`` where ``predicate`` is nonzero (zero with ``reverse_pred``); elsewhere ``dst`` keeps
    its values. ``src`` may be a scalar."""
    rt = current()
    api = "nisa.tensor_copy_predicated"
    dv = as_view(dst)
    if dv is None or not dv.tensor.on_chip:
        raise rt.rule_error(api, "dst must be an on-chip tile", "tensor_copy_predicated writes an SBUF/PSUM tile")
    m = _ops.mask_array(mask)
    x = operand(src, api, mask=m)
    pr = operand(predicate, api, allow_scalar=False, mask=m)
    _ops.check_engine_access(rt, api, "vector", [o for o in (x, pr) if not o.scalar], dv.tensor.buffer)
    if sum(o.buffer == "psum" for o in (x, pr) if not o.scalar) > 1:
        raise rt.rule_error(api, "src and predicate are both in PSUM", "tensor_copy_predicated: at most one of src "
                            "and predicate in PSUM")
    if int(_prod(pr.shape)) != int(_prod(dv.shape)) or (not x.scalar and int(_prod(x.shape)) != int(_prod(dv.shape))):
        raise rt.rule_error(api, f"dst {dv.shape}, src {x.shape} and predicate {pr.shape} differ in size",
                            "tensor_copy_predicated copies element by element")
    keep = None
    if pr.data is not None:
        keep = (pr.data.reshape(dv.shape) != 0) ^ bool(reverse_pred)
        if m is not None:
            keep &= _broadcast(m, dv.shape)
    values = None
    if x.data is not None:
        values = np.broadcast_to(np.asarray(x.data, np.float32 if _dt.is_float(dv.dtype) else None), dv.shape) \
            if x.scalar else x.data.reshape(dv.shape)
    written = None if x.written is None else x.written.reshape(dv.shape)
    write(dv, values, written, keep, api)
    rt.emit("vector", "tensor_copy_predicated", api, tuple(o.region for o in (x, pr) if not o.scalar),
            (dv.region(),), dv.shape[0], int(_prod(dv.shape[1:])) if len(dv.shape) > 1 else 1,
            tuple(_dt.name(o.dtype) for o in (x, pr) if not o.scalar), _dt.name(dv.dtype),
            attrs={"num_inputs": 2, "psum_input": any(o.buffer == "psum" for o in (x, pr) if not o.scalar)})


@_primitive(replay=_REBUILD)
def _partition_reduced(x: np.ndarray, *, name: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        if name == "average":
            return np.mean(x.astype(np.float32, copy=False), axis=0, keepdims=True, dtype=np.float32)
        out = np.asarray(REDUCE[name](x, axis=0, keepdims=True))
    return out.astype(np.float32) if out.dtype.kind == "f" else out


def tensor_partition_reduce(op, data, *, mask=None, dtype=None, dst=None, **kwargs) -> Tensor | None:
    """GpSimd: ``op`` (add, average, max, bitwise_or, bitwise_and) across the partitions of ``data`` into one
    partition."""
    rt = current()
    api = "nisa.tensor_partition_reduce"
    name = op_name(op)
    name = {"mean": "average", "max": "maximum", "sum": "add"}.get(name, name)
    if name not in ("add", "average", "maximum", "bitwise_or", "bitwise_and"):
        raise rt.rule_error(api, f"unsupported op {op!r}", "tensor_partition_reduce op is add, average, max, "
                            "bitwise_or or bitwise_and")
    x = operand(data, api, allow_scalar=False, mask=_ops.mask_array(mask))
    _ops.check_engine_access(rt, api, "gpsimd", [x], None)
    out_data = None if x.data is None else _call(_partition_reduced, x.data, name=name)
    written = None if x.written is None else np.all(x.written, axis=0, keepdims=True)
    out = _ops.new_result(rt, api, (1,) + tuple(x.shape[1:]), _dt.canonical(dtype) if dtype is not None else x.dtype,
                          "sbuf", out_data, written, None)
    _ops.emit_for(rt, out, "gpsimd", "tensor_partition_reduce", api, [x], {"alu": name, "num_inputs": 1},
                  free=int(_prod(x.shape)))
    return _result_into(api, dst, out)


@_primitive(replay=_REBUILD)
def _gathered_in_partitions(data: np.ndarray, idx: np.ndarray, *, rows: int) -> np.ndarray:
    return np.take_along_axis(data.reshape(rows, -1), idx.reshape(rows, -1).astype(np.int64), axis=1)


def nc_n_gather(*, data, indices, dtype=None, dst=None, **kwargs) -> Tensor | None:
    """GpSimd: within each partition, ``dst[p].ravel()[j] = data[p].ravel()[indices[p].ravel()[j]]``."""
    rt = current()
    api = "nisa.nc_n_gather"
    d = operand(data, api, allow_scalar=False)
    ix = operand(indices, api, allow_scalar=False)
    _ops.check_engine_access(rt, api, "gpsimd", [d, ix], None)
    rows = d.shape[0]
    if ix.shape[0] != rows:
        raise rt.rule_error(api, f"indices {ix.shape} and data {d.shape} differ in partitions",
                            "nc_n_gather gathers within each partition")
    if not _dt.name(ix.dtype).startswith(("uint", "int")):
        raise rt.rule_error(api, f"indices are {_dt.name(ix.dtype)}", "nc_n_gather indices are uint32")
    n = int(_prod(d.shape[1:])) if len(d.shape) > 1 else 1
    out_data = None
    if d.data is not None:
        bad = (ix.data < 0) | (ix.data >= n)
        if bad.any():
            raise rt.rule_error(api, f"index {int(ix.data[bad].flat[0])} outside the {n} elements of a partition",
                                "nc_n_gather indices lie in [0, elements per partition)")
        out_data = _call(_gathered_in_partitions, d.data, ix.data, rows=rows).reshape(ix.shape)
    written = None
    if d.written is not None or ix.written is not None:
        dw = np.ones((rows, 1), bool) if d.written is None else np.all(d.written.reshape(rows, -1), axis=1,
                                                                        keepdims=True)
        written = _broadcast(dw.reshape((rows,) + (1,) * (len(ix.shape) - 1)), ix.shape) & (
            True if ix.written is None else ix.written)
    out = _ops.new_result(rt, api, ix.shape, _dt.canonical(dtype) if dtype is not None else d.dtype, "sbuf",
                          out_data, written, None)
    _ops.emit_for(rt, out, "gpsimd", "nc_n_gather", api, [d, ix], {"num_inputs": 2},
                  free=int(_prod(ix.shape[1:])) if len(ix.shape) > 1 else 1)
    return _result_into(api, dst, out)


@_primitive(replay=_REBUILD)
def _range_kept(x: np.ndarray, b0: np.ndarray, b1: np.ndarray, *, rows: int, start: float, cmp0: Any,
                cmp1: Any) -> np.ndarray:
    i = (np.float32(start) + np.arange(int(x.size // rows), dtype=np.float32))[None, :]
    return np.asarray(cmp0(i, b0.reshape(rows, 1).astype(np.float32)) & cmp1(i, b1.reshape(rows, 1).astype(np.float32)))


def range_select(*, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=None, reduce_res=None,
                 reduce_op=None, range_start=0, on_false_value=_FP32_MIN, mask=None, dtype=None, dst=None,
                 **kwargs) -> Tensor | None:
    """VectorE (NeuronCore-v3+): keep the element at free index ``i`` where ``comp_op0(range_start + i, bound0[p])``
    and ``comp_op1(range_start + i, bound1[p])``, else ``on_false_value``; the row maxima go through the VectorE
    accumulation registers (``reduce_cmd``) into ``reduce_res``."""
    rt = current()
    api = "nisa.range_select"
    names = []
    for c in (comp_op0, comp_op1):
        n, f = _alu(c, api)
        if n not in _COMPARISONS:
            raise rt.rule_error(api, f"comparison {c!r}", "range_select compares with equal, less, less_equal, greater "
                                "or greater_equal")
        names.append(f)
    rname = op_name(reduce_op) if reduce_op is not None else "maximum"
    if rname not in ("maximum", "max", "amax"):
        raise rt.rule_error(api, f"reduce_op {reduce_op!r}", "range_select reduces with nl.maximum only")
    cmd = _reduce_cmd(reduce_cmd, _CMD.idle if dst is None else _CMD.reset_reduce)
    x = operand(on_true_tile, api, allow_scalar=False, mask=_ops.mask_array(mask))
    b0, b1 = (operand(b, api, allow_scalar=False) for b in (bound0, bound1))
    rows = x.shape[0]
    for b in (b0, b1):
        if b.shape[0] != rows or int(_prod(b.shape[1:])) != 1:
            raise rt.rule_error(api, f"bound {b.shape} is not one value per partition of {x.shape}",
                                "range_select bounds hold one value per partition")
    _ops.check_engine_access(rt, api, "vector", [x, b0, b1], None)
    out_data = red = None
    if x.data is not None:
        keep = _call(_range_kept, x.data, b0.data, b1.data, rows=rows, start=float(range_start), cmp0=names[0],
                     cmp1=names[1]).reshape(x.shape)
        out_data = _call(_selected, x.data, keep, false_value=float(on_false_value))
        red = _call(_free_reduced, out_data, None, name="maximum", rows=rows)
    written = combine_written(x.written, *[None if b.written is None else _broadcast(
        b.written.reshape((rows,) + (1,) * (len(x.shape) - 1)), x.shape) for b in (b0, b1)], shape=x.shape)
    out = _ops.new_result(rt, api, x.shape, _dt.canonical(dtype) if dtype is not None else x.dtype, "sbuf",
                          out_data, written, None)
    red_written = None if written is None else np.all(written.reshape(rows, -1), axis=1, keepdims=True)
    dest = None
    if reduce_res is not None or cmd != _CMD.idle:
        dest = _accumulate_registers(rt, api, "vector", cmd, "maximum", red, red_written, rows, reduce_res)
    ins = _ops.emit_for(rt, out, "vector", "range_select", api, [x, b0, b1], {"num_inputs": 1,
                        "psum_input": x.buffer == "psum", "reduce": dest is not None})
    if ins is not None and dest is not None:
        ins.writes = ins.writes + (dest.region(),)
    return _result_into(api, dst, out)


def select_reduce(*, dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=None, reduce_op=None,
                  reverse_pred: bool = False, mask=None, dtype=None, **kwargs) -> None:
    """VectorE: ``dst = where(predicate (negated with reverse_pred), on_true, on_false)`` (``on_false`` a scalar
    or one value per partition); the row maxima go through the accumulation registers into ``reduce_res``."""
    rt = current()
    api = "nisa.select_reduce"
    dv = as_view(dst)
    if dv is None or not dv.tensor.on_chip:
        raise rt.rule_error(api, "dst must be an on-chip tile", "select_reduce writes an SBUF/PSUM tile")
    rname = op_name(reduce_op) if reduce_op is not None else "maximum"
    if rname not in ("maximum", "max", "amax"):
        raise rt.rule_error(api, f"reduce_op {reduce_op!r}", "select_reduce reduces with nl.maximum only")
    m = _ops.mask_array(mask)
    pr = operand(predicate, api, allow_scalar=False, mask=m)
    t = operand(on_true, api, allow_scalar=False, mask=m)
    f = operand(on_false, api)
    rows = t.shape[0]
    fc = _col(f, api, rows)
    _ops.check_engine_access(rt, api, "vector", [o for o in (pr, t, f) if not o.scalar], dv.tensor.buffer)
    if int(_prod(pr.shape)) != int(_prod(t.shape)) or int(_prod(dv.shape)) != int(_prod(t.shape)):
        raise rt.rule_error(api, f"predicate {pr.shape}, on_true {t.shape} and dst {dv.shape} differ in size",
                            "select_reduce selects element by element")
    values = red = None
    if t.data is not None:
        keep = (pr.data.reshape(t.shape) != 0) ^ bool(reverse_pred)
        off = np.asarray(fc, np.float32)
        off = off.reshape((rows,) + (1,) * (len(t.shape) - 1)) if off.size > 1 else off
        values = np.where(keep, t.data.astype(np.float32), off).astype(np.float32)
        red = _call(_free_reduced, values, None, name="maximum", rows=rows)
    written = combine_written(t.written, pr.written, None if f.written is None else _broadcast(
        f.written.reshape((rows,) + (1,) * (len(t.shape) - 1)), t.shape), shape=t.shape)
    write(dv, None if values is None else values.reshape(dv.shape),
          None if written is None else written.reshape(dv.shape), None, api)
    cmd = _reduce_cmd(reduce_cmd, _CMD.idle)
    dest = None
    if reduce_res is not None or cmd != _CMD.idle:
        red_written = None if written is None else np.all(written.reshape(rows, -1), axis=1, keepdims=True)
        dest = _accumulate_registers(rt, api, "vector", cmd, "maximum", red, red_written, rows, reduce_res)
    rt.emit("vector", "select_reduce", api, tuple(o.region for o in (pr, t, f) if not o.scalar),
            (dv.region(),) + (() if dest is None else (dest.region(),)), rows,
            int(_prod(t.shape[1:])) if len(t.shape) > 1 else 1, (_dt.name(t.dtype),), _dt.name(dv.dtype),
            attrs={"num_inputs": 2, "psum_input": t.buffer == "psum", "reduce": dest is not None})


_GPSIMD_CORE_PARTITIONS = 16   # each of the 8 GpSimd cores reaches 16 contiguous partitions


@_primitive(replay=_REBUILD)
def _nonzero_counted(x: np.ndarray, *, rows: int, offset: int, padding: int) -> np.ndarray:
    v = x.reshape(rows, -1)
    t = v.shape[1]
    out = np.full((rows, t + 1), padding, np.int64)
    for p in range(0, rows, _GPSIMD_CORE_PARTITIONS):
        nz = np.flatnonzero(v[p])
        out[p, :nz.size] = nz + offset
        out[p, t] = nz.size
    return out


def nonzero_with_count(dst, src, *, index_offset=0, padding_val=-1, **kwargs) -> None:
    """GpSimd (NeuronCore-v3+): in partitions 0, 16, ..., 112 only (each GpSimd core's first), the indices of
    ``src``'s nonzero elements plus ``index_offset``, then ``padding_val``, then their count (dst has one more
    element per partition than src); other partitions of ``dst`` are left as they are."""
    rt = current()
    api = "nisa.nonzero_with_count"
    dv = as_view(dst)
    x = operand(src, api, allow_scalar=False)
    if dv is None or dv.tensor.buffer != "sbuf" or x.buffer != "sbuf":
        raise rt.rule_error(api, "src and dst must be SBUF tiles", "nonzero_with_count reads and writes SBUF")
    rows = x.shape[0]
    t = int(_prod(x.shape[1:])) if len(x.shape) > 1 else 1
    if dv.shape[0] != rows or int(_prod(dv.shape[1:])) != t + 1:
        raise rt.rule_error(api, f"dst {dv.shape} for src {x.shape}", "nonzero_with_count's dst has src's partitions "
                            "and one more element per partition (the count)")
    if _dt.name(dv.dtype) != "int32" or _dt.name(x.dtype) not in ("float32", "int32"):
        raise rt.rule_error(api, f"src {_dt.name(x.dtype)}, dst {_dt.name(dv.dtype)}", "nonzero_with_count reads "
                            "float32 or int32 and writes int32")
    _ops.check_engine_access(rt, api, "gpsimd", [x], dv.tensor.buffer)
    keep = (np.arange(rows) % _GPSIMD_CORE_PARTITIONS == 0).reshape((rows,) + (1,) * (len(dv.shape) - 1))
    values = None if x.data is None else _call(_nonzero_counted, x.data, rows=rows, offset=int(index_offset),
                                               padding=int(padding_val)).reshape(dv.shape)
    written = None if x.written is None else _broadcast(
        np.all(x.written.reshape(rows, -1), axis=1).reshape(keep.shape), dv.shape)
    write(dv, values, written, _broadcast(keep, dv.shape), api)
    rt.emit("gpsimd", "nonzero_with_count", api, (x.region,), (dv.region(_broadcast(keep, dv.shape)),),
            -(-rows // _GPSIMD_CORE_PARTITIONS), t, (_dt.name(x.dtype),), _dt.name(dv.dtype), attrs={"num_inputs": 1})


# ---- GpSimd sequence and gather instructions ----------------------------------------------------------
@_primitive(replay=_REBUILD)
def _sequence_bounds(ids: np.ndarray, *, rows: int) -> np.ndarray:
    """Per partition, for element ``i`` of a row of segment ids: ``[start, end)`` of the run of equal ids holding it
    (``[n, -1]`` for an id of 0, padding), as ``[rows, 2, n]`` (the docs' NumPy equivalent, without its loops)."""
    v = ids.reshape(rows, -1)
    n = v.shape[1]
    i = np.broadcast_to(np.arange(n, dtype=np.int64), v.shape)
    first = np.ones(v.shape, bool)
    first[:, 1:] = v[:, 1:] != v[:, :-1]
    last = np.ones(v.shape, bool)
    last[:, :-1] = v[:, :-1] != v[:, 1:]
    start = np.maximum.accumulate(np.where(first, i, 0), axis=1)
    end = np.minimum.accumulate(np.where(last, i + 1, n)[:, ::-1], axis=1)[:, ::-1]
    pad = v == 0
    return np.stack([np.where(pad, n, start), np.where(pad, -1, end)], axis=1)


_SEQUENCE_DTYPES = ("float32", "int32")


def sequence_bounds(*, segment_ids, dtype=None, dst=None, **kwargs) -> Tensor | None:
    """GpSimd: for each element of a one-partition row of segment ids, the start and end (exclusive) of the run of
    equal ids it belongs to; ids of 0 are padding and get ``[n, -1]``. The result is ``[1, 2, n]`` (starts, then
    ends)."""
    rt = current()
    api = "nisa.sequence_bounds"
    x = operand(segment_ids, api, allow_scalar=False)
    dv = None if dst is None else as_view(dst)
    _ops.check_engine_access(rt, api, "gpsimd", [x], None if dv is None else dv.tensor.buffer)
    if x.shape[0] != 1:
        raise rt.rule_error(api, f"segment_ids has {x.shape[0]} partitions", "sequence_bounds: the partition "
                            "dimension must always be 1")
    out_dtype = _dt.canonical(dtype) if dtype is not None else dv.tensor.dtype if dv is not None else x.dtype
    for what, d in (("segment_ids", x.dtype), ("the output", out_dtype)):
        if _dt.name(d) not in _SEQUENCE_DTYPES:
            raise rt.rule_error(api, f"{what} is {_dt.name(d)}", "sequence_bounds reads and writes float32 or int32")
    n = int(_prod(x.shape[1:])) if len(x.shape) > 1 else 1
    shape = (1, 2, n)
    data = None if x.data is None else _call(_sequence_bounds, x.data, rows=1)
    written = None
    if x.written is not None:   # every bound depends on the whole row
        written = np.broadcast_to(np.all(x.written), shape).copy()
    if dv is not None:
        if int(_prod(dv.shape)) != 2 * n:
            raise rt.rule_error(api, f"dst {dv.shape} for segment_ids {x.shape}", "sequence_bounds writes [1, 2, n] "
                                "for [1, n] segment ids")
        if dv.shape != shape:
            data = None if data is None else data.reshape(dv.shape)
            written = None if written is None else written.reshape(dv.shape)
            shape = dv.shape
    out = _ops.new_result(rt, api, shape, out_dtype, "sbuf", data, written, None)
    _ops.emit_for(rt, out, "gpsimd", "sequence_bounds", api, [x], {"num_inputs": 1}, free=n)
    return _result_into(api, dst, out)


_GATHER_ELEMS = (1, 2, 4, 8, 16, 32)   # local_gather's num_elem_per_idx values
_GATHER_MAX_INDICES = 4096             # indices per GpSimd core


@_primitive(replay=_REBUILD)
def _gathered_in_cores(src: np.ndarray, idx: np.ndarray, *, rows: int, valid: int, elems: int) -> np.ndarray:
    """Per group of 16 partitions (one GpSimd core): the group's indices, partition first, the first ``valid`` of
    them; every partition of the group reads ``elems`` elements from each index of its own flattened row."""
    s = src.reshape(rows, -1)
    ix = idx.reshape(rows, -1).astype(np.int64)
    out = np.empty((rows, valid * elems), s.dtype)
    span = np.arange(elems, dtype=np.int64)
    for g in range(0, rows, _GPSIMD_CORE_PARTITIONS):
        flat = ix[g:g + _GPSIMD_CORE_PARTITIONS].reshape(-1, order="F")[:valid]
        cols = (flat[:, None] + span[None, :]).reshape(-1)
        out[g:g + _GPSIMD_CORE_PARTITIONS] = s[g:g + _GPSIMD_CORE_PARTITIONS][:, cols]
    return out


def local_gather(src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, *, mask=None, dst=None,
                 **kwargs) -> Tensor | None:
    """GpSimd: each of the 8 cores gathers within its 16 partitions. A core's indices (its 16 partitions of
    ``index``, flattened partition first, the first ``num_valid_indices``) are element offsets into each of its
    partitions' flattened ``src_buffer`` row; each reads ``num_elem_per_idx`` contiguous elements. Partition ``p``
    of the result holds ``num_valid_indices * num_elem_per_idx`` elements, in ``src_buffer``'s dtype."""
    rt = current()
    api = "nisa.local_gather"
    # a gather moves bits (no casting): both read as stored
    s = operand(src_buffer, api, allow_scalar=False, mask=_ops.mask_array(mask), compute=False)
    ix = operand(index, api, allow_scalar=False, compute=False)
    dv = None if dst is None else as_view(dst)
    _ops.check_engine_access(rt, api, "gpsimd", [s, ix], None if dv is None else dv.tensor.buffer)
    rows = s.shape[0]
    if ix.shape[0] != rows or rows % _GPSIMD_CORE_PARTITIONS:
        raise rt.rule_error(api, f"src_buffer has {rows} partitions and index {ix.shape[0]}", "local_gather: "
                            "src_buffer and index have one partition count, a multiple of 16")
    if _dt.name(ix.dtype) != "uint16":
        raise rt.rule_error(api, f"index is {_dt.name(ix.dtype)}", "local_gather indices are uint16")
    elems = int(num_elem_per_idx)
    if elems not in _GATHER_ELEMS:
        raise rt.rule_error(api, f"num_elem_per_idx {num_elem_per_idx!r}", "local_gather's num_elem_per_idx is one "
                            "of 1, 2, 4, 8, 16, 32")
    per_core = _GPSIMD_CORE_PARTITIONS * (int(_prod(ix.shape[1:])) if len(ix.shape) > 1 else 1)
    valid = per_core if num_valid_indices is None else int(num_valid_indices)
    if not 1 <= valid <= per_core:
        raise rt.rule_error(api, f"num_valid_indices {valid} with {per_core} indices per core", "local_gather's "
                            "num_valid_indices is at most the indices in a core's 16 partitions of index")
    if valid > _GATHER_MAX_INDICES:
        raise rt.rule_error(api, f"{valid} indices per core", "local_gather gathers at most 4096 indices per core")
    row = int(_prod(s.shape[1:])) if len(s.shape) > 1 else 1
    shape = (rows, valid, elems)
    if dv is not None:
        if dv.shape[0] != rows or int(_prod(dv.shape)) != rows * valid * elems:
            raise rt.rule_error(api, f"dst {dv.shape} for {rows} partitions of {valid} x {elems} gathered elements",
                                "local_gather's dst holds num_valid_indices * num_elem_per_idx elements per partition")
        if dv.tensor.dtype != s.dtype:
            raise rt.rule_error(api, f"dst is {_dt.name(dv.tensor.dtype)} but src_buffer is {_dt.name(s.dtype)}",
                                "local_gather keeps src_buffer's dtype (no casting)")
        shape = dv.shape
    data = written = None
    if ix.data is not None:
        flat = np.concatenate([ix.data.reshape(rows, -1)[g:g + _GPSIMD_CORE_PARTITIONS].reshape(-1, order="F")[:valid]
                               for g in range(0, rows, _GPSIMD_CORE_PARTITIONS)])
        bad = flat.astype(np.int64) + elems > row
        if bad.any():
            raise rt.rule_error(api, f"index {int(flat[bad][0])} reads {elems} element(s) past the {row} elements of a "
                                "partition of src_buffer", "local_gather: out-of-bounds indices are undefined behaviour")
    if s.data is not None and ix.data is not None:
        data = _call(_gathered_in_cores, s.data, ix.data, rows=rows, valid=valid, elems=elems).reshape(shape)
    if s.written is not None or ix.written is not None:
        sw = np.ones((rows, row), bool) if s.written is None else s.written.reshape(rows, row)
        iw = np.ones((rows, 1), bool) if ix.written is None else ix.written.reshape(rows, -1)
        core_ok = np.repeat(iw.reshape(-1, _GPSIMD_CORE_PARTITIONS * iw.shape[1]).all(axis=1),
                            _GPSIMD_CORE_PARTITIONS)
        written = _broadcast((sw.all(axis=1) & core_ok).reshape((rows,) + (1,) * (len(shape) - 1)), shape)
    out = _ops.new_result(rt, api, shape, s.dtype, "sbuf", data, written, None)
    _ops.emit_for(rt, out, "gpsimd", "local_gather", api, [s, ix], {"num_inputs": 2, "num_valid_indices": valid,
                  "num_elem_per_idx": elems, "dtype_bytes": _dt.itemsize(s.dtype)}, free=valid * elems)
    return _result_into(api, dst, out)


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
    kept = np.array([int(entries[p % _QUADRANT]) != _UNMODIFIED for p in range(p_dst)]).reshape(
        (p_dst,) + (1,) * (len(dv.shape) - 1))
    mask = None if kept.all() else kept
    data = written = None
    if x.data is not None:
        data = _call(_rows_taken, x.data.reshape(p_src, free), rows=tuple(rows)).reshape(dv.shape)
        written = None if x.written is None else x.written.reshape(p_src, free)[rows].reshape(dv.shape)
    write(dv, data, written, mask, api)
    rt.emit("vector", "nc_stream_shuffle", api, (reads,), (dv.region(mask),), p_dst if mask is None else
            int(kept.sum()), free, (_dt.name(x.dtype),), _dt.name(dv.tensor.dtype),
            attrs={"num_inputs": 1, "psum_input": x.buffer == "psum"})


def _in_bounds(view: Any) -> np.ndarray | None:
    """Which elements of an index-array view address its tensor (None: all of them, or not an index view)."""
    if not view.advanced:
        return None
    shape = view.shape
    keys = [k for k in view.key]
    arrays = [k for k in keys if isinstance(k, np.ndarray)]
    if not arrays:
        return None
    full = np.broadcast_shapes(*[a.shape for a in arrays])
    keep = np.ones(full, bool)
    for axis, k in enumerate(keys):
        if isinstance(k, np.ndarray):
            keep &= _broadcast((k >= 0) & (k < view.tensor.shape[axis]), full)
    if keep.all() or keep.size != int(_prod(shape)):
        return None
    return keep.reshape(shape)


_OOB = oob_mode


def dma_copy(*, dst, src, mask=None, dst_rmw_op=None, oob_mode=None, dge_mode=None, **kwargs) -> None:
    """A DMA between HBM and SBUF (either direction, or HBM->HBM); ``dst_rmw_op=np.add`` accumulates.
    ``oob_mode=skip``: an element whose source or destination index lies outside its tensor is not transferred
    (its destination keeps its value), for static and indirect indices alike (dma_copy docs, oob_mode)."""
    rt = current()
    skip = oob_mode is not None and int(oob_mode) == int(_OOB.skip)
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
    m_src = m
    if skip:
        keep_s, keep_d = _in_bounds(sv), _in_bounds(dv)
        if keep_s is not None or keep_d is not None:
            keep = np.ones(dv.shape, bool)
            if keep_s is not None:
                keep &= keep_s.reshape(dv.shape)
            if keep_d is not None:
                keep &= keep_d
            m = keep if m is None else (_broadcast(m, dv.shape) & keep)
            m_src = m.reshape(sv.shape)
    data, written = read(sv, m_src, api)
    if not dv.tensor.on_chip:
        _ops.check_output_valid(rt, api, written, dv.tensor.name)
    accumulate = dst_rmw_op is not None
    if accumulate and op_name(dst_rmw_op) != "add":
        raise rt.rule_error(api, f"unsupported dst_rmw_op {dst_rmw_op!r}", "dma_copy dst_rmw_op is np.add")
    if data is not None:
        if _dt.is_float(sv.tensor.dtype) and (accumulate or sv.tensor.dtype != dv.tensor.dtype):
            data = data.astype(np.float32, copy=False)   # a plain copy of one dtype moves bits (NaN payloads too)
        data = data.reshape(dv.shape)
        written = None if written is None else written.reshape(dv.shape)
    write(dv, data, written, m, api, accumulate=accumulate)
    onchip = dv if dv.tensor.on_chip else sv
    hbm_view = sv if not sv.tensor.on_chip else dv
    shape = onchip.shape
    p = shape[0] if shape else 1
    per_part = (int(_prod(shape[1:])) if len(shape) > 1 else 1) * _dt.itemsize(sv.tensor.dtype)
    index_reads = tuple(v.region() for v in sv.indirect + dv.indirect)   # indirect DMA reads its index tiles
    rt.emit("dma", "dma_copy", api, (sv.region(m_src),) + index_reads, (dv.region(m),), p,
            int(_prod(shape[1:])) if len(shape) > 1 else 1,
            (_dt.name(sv.tensor.dtype),), _dt.name(dv.tensor.dtype), accumulate=accumulate,
            attrs={"bytes": p * per_part, "partitions": p, "bytes_per_partition": per_part,
                   "contiguous_bytes": hbm_view.contiguous_bytes(), "src": sv.tensor.buffer, "dst": dv.tensor.buffer,
                   "transpose": False, "indirect": bool(index_reads)})


@_primitive(replay=_REBUILD)
def _summed(*xs: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    total = np.zeros(shape, np.float32)
    for x in xs:
        total += x.reshape(shape).astype(np.float32, copy=False)
    return total


def _rmw_rules(rt, api: str, dv: Any, views: list, unique_indices: bool) -> None:
    """The read-modify-write (scatter / gather) form of dma_compute: two sources, one of them ``dst`` itself, the
    other the data; scatter: dst in HBM read and written through its indices; gather: dst in SBUF, the data read
    through its indices. ``unique_indices`` must be True (the docs: non-unique not yet supported) and a scatter's
    indices then are ("whether scatter indices are unique")."""
    rule = "dma_compute read-modify-write (scatter/gather)"
    if len(views) != 2:
        raise rt.rule_error(api, f"{len(views)} sources with a vector_offset", rule + ": exactly 2 sources")
    same = [v for v in views if v.tensor is dv.tensor]
    if len(same) != 1:
        raise rt.rule_error(api, "no source is dst itself" if not same else "both sources are dst",
                            rule + ": one source matches dst, the other is the data")
    if not unique_indices:
        raise rt.rule_error(api, "unique_indices=False with a vector_offset", rule + ": unique_indices must be True "
                            "(non-unique indices are not yet supported)")
    if dv.indirect:
        if dv.tensor.on_chip or not same[0].indirect:
            raise rt.rule_error(api, "a scatter's dst and its matching source are the same indexed HBM view",
                                rule + ": scatter RMW dst(HBM)[indices] += src(SBUF)")
        indexed = dv
    else:
        data = next(v for v in views if v is not same[0])
        if not dv.tensor.on_chip or not data.indirect:
            raise rt.rule_error(api, "a gather's dst is in SBUF and its data source is read through indices",
                                rule + ": gather RMW dst(SBUF) += src(HBM)[indices]")
        indexed = data
    for key in (indexed.key if indexed is dv else ()):   # a gather may read one row twice; a scatter's rows are
        if isinstance(key, np.ndarray):                     # read-modified-written once each
            rows = np.unique(key.reshape(key.shape[0], -1), axis=0) if key.ndim > 1 else np.unique(key)
            if len(rows) != (key.shape[0] if key.ndim else 1):
                raise rt.rule_error(api, "an index repeats", rule + ": unique_indices=True promises unique indices")
            break


def dma_compute(dst, srcs, reduce_op, *, scales=None, unique_indices: bool = True, oob_mode=None, **kwargs) -> None:
    """The DMA engines' compute: ``dst = srcs[0] + srcs[1] + ...`` in fp32 (the docs allow only ``nl.add`` and
    scales of 1.0). With a source read through per-partition indices (``vector_offset``) it is a read-modify-write:
    scatter ``dst(HBM)[indices] += src(SBUF)`` or gather ``dst(SBUF) += src(HBM)[indices]``; ``oob_mode=skip``
    leaves the elements of out-of-bounds indices as they were."""
    rt = current()
    api = "nisa.dma_compute"
    skip = oob_mode is not None and int(oob_mode) == int(_OOB.skip)
    dv = as_view(dst)
    views = [as_view(x) for x in (srcs if isinstance(srcs, (list, tuple)) else [srcs])]
    if dv is None or not views or any(v is None for v in views):
        raise rt.rule_error(api, "dst and every src must be tensors or views", "dma_compute moves tensor data")
    if op_name(reduce_op) != "add":
        raise rt.rule_error(api, f"reduce_op {reduce_op!r}", "dma_compute reduces with nl.add only")
    if scales is not None and any(float(x) != 1.0 for x in scales):
        raise rt.rule_error(api, f"scales {list(scales)!r}", "dma_compute scales are all 1.0 (or None)")
    if len(views) > 16:
        raise rt.rule_error(api, f"{len(views)} sources", "dma_compute takes at most 16 sources")
    rmw = bool(dv.indirect or any(v.indirect for v in views))
    for v in [dv] + views:
        if v.tensor.buffer == "psum":
            raise rt.rule_error(api, "DMA cannot access PSUM", "DMA moves data between HBM and SBUF")
        if int(_prod(v.shape)) != int(_prod(dv.shape)):
            raise rt.rule_error(api, f"src {v.shape} and dst {dv.shape} hold different element counts",
                                "dma_compute combines tensors element by element")
    if rmw:
        _rmw_rules(rt, api, dv, views, bool(unique_indices))
    keep = None
    if skip:
        for v in [dv] + views:
            k = _in_bounds(v)
            if k is not None:
                k = k.reshape(dv.shape)
                keep = k if keep is None else keep & k
    reads = [read(v, None if keep is None else keep.reshape(v.shape), api) for v in views]
    total = None
    if all(d is not None for d, _ in reads):
        total = _call(_summed, *[d for d, _ in reads], shape=tuple(dv.shape))
    written = combine_written(*[None if w is None else w.reshape(dv.shape) for _, w in reads], shape=dv.shape)
    if not dv.tensor.on_chip:
        _ops.check_output_valid(rt, api, written if keep is None or written is None else written | ~keep,
                                dv.tensor.name)
    write(dv, total, written, keep, api)
    shape = dv.shape
    p = shape[0] if shape else 1
    per_part = (int(_prod(shape[1:])) if len(shape) > 1 else 1) * _dt.itemsize(dv.tensor.dtype)
    index_reads = tuple(t.region() for t in {id(t): t for v in [dv] + views for t in v.indirect}.values())
    rt.emit("dma", "dma_compute", api, tuple(v.region(None if keep is None else keep.reshape(v.shape))
                                             for v in views) + index_reads,
            (dv.region(keep),), p, per_part // _dt.itemsize(dv.tensor.dtype),
            tuple(_dt.name(v.tensor.dtype) for v in views), _dt.name(dv.tensor.dtype),
            attrs={"bytes": p * per_part * len(views), "partitions": p, "bytes_per_partition": per_part * len(views),
                   "contiguous_bytes": min(v.contiguous_bytes() for v in [dv] + views), "src": views[0].tensor.buffer,
                   "dst": dv.tensor.buffer, "transpose": False, "indirect": rmw})


# the permutations a DMA transpose performs, by rank (dma_transpose docs)
_DMA_TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


@_primitive(replay=_REBUILD)
def _permuted(x: np.ndarray, *, axes: tuple[int, ...]) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(x, axes))


def _indirect_transpose_rules(rt, api: str, sv: Any) -> None:
    """The documented constraints of an indirect (gathering) DMA transpose (Software DGE ``dma_gather_transpose``)."""
    rule = "dma_transpose indirect (Software DGE) constraints"
    _generations.require(rt, api, "the indirect (gathering) dma_transpose", 3, "dma_transpose reference, 'DMA "
                         "Indirect Transpose Constraints': TRN2+ only")
    shape = sv.shape
    if _dt.itemsize(sv.tensor.dtype) != 2:
        raise rt.rule_error(api, f"src is {_dt.name(sv.tensor.dtype)}", rule + ": src dtype is 2 bytes")
    if shape[-1] > 128:
        raise rt.rule_error(api, f"src's last dimension is {shape[-1]}", rule + ": src.shape[-1] <= 128")
    if shape[0] % 16:
        raise rt.rule_error(api, f"src's first dimension is {shape[0]}", rule + ": src.shape[0] divisible by 16")
    if len(shape) == 4 and shape[1] != 1 and shape[2] != 1:
        raise rt.rule_error(api, f"4-D src {shape}", rule + ": a 4-D src has src.shape[1] or src.shape[2] of 1")
    for t in sv.indirect:
        rows = t.shape[0]
        if not (16 <= rows <= 128 and rows % 16 == 0):
            raise rt.rule_error(api, f"indices have {rows} partitions", rule + ": indices.shape[0] in [16, 128], "
                                "divisible by 16")
        if _dt.name(t.tensor.dtype) != "uint32":
            raise rt.rule_error(api, f"indices are {_dt.name(t.tensor.dtype)}", rule + ": indices are uint32")


def dma_transpose(*, src, axes=None, mask=None, dtype=None, dst=None, oob_mode=None, **kwargs) -> Tensor | None:
    """A transpose by the DMA engines: a 2-D tile's ``[1, 0]``, 3-D ``[2, 1, 0]``, 4-D ``[3, 1, 2, 0]``
    (the only permutations the docs list), into ``dst`` or a new SBUF tile (NKI 0.1). A ``src`` read through
    per-partition indices (``.ap(vector_offset=...)``, ``hbm[idx_tile, ...]``) is the indirect form: its rows are
    gathered, then transposed; ``oob_mode=skip`` leaves the destination of rows whose index is out of bounds as
    it is."""
    rt = current()
    api = "nisa.dma_transpose"
    skip = oob_mode is not None and int(oob_mode) == int(_OOB.skip)
    sv = as_view(src)
    if sv is None:
        raise rt.rule_error(api, f"src must be a tensor or a view of one, got {type(src).__name__}",
                            "dma_transpose moves tensor data")
    if sv.indirect:
        _indirect_transpose_rules(rt, api, sv)
    perm = _DMA_TRANSPOSE_AXES.get(len(sv.shape))
    if perm is None:
        raise rt.rule_error(api, f"src has {len(sv.shape)} dimensions", "dma_transpose takes a 2-D, 3-D or 4-D src")
    if axes is not None and tuple(int(a) for a in axes) != perm:
        raise rt.rule_error(api, f"axes {tuple(axes)} for a {len(sv.shape)}-D src; the DMA transposes with {perm}",
                            "dma_transpose permutes 2-D by (1, 0), 3-D by (2, 1, 0), 4-D by (3, 1, 2, 0)")
    shape = tuple(sv.shape[a] for a in perm)
    dv = None if dst is None else as_view(dst)
    if dst is not None and (dv is None or int(_prod(dv.shape)) != int(_prod(shape))):
        raise rt.rule_error(api, f"dst {getattr(dv, 'shape', dst)!r} does not hold the transposed {shape}",
                            "dma_transpose's dst has the transposed shape")
    for v in (sv, dv):
        if v is not None and v.tensor.buffer == "psum":
            raise rt.rule_error(api, "DMA cannot access PSUM", "DMA moves data between HBM and SBUF")
    keep = _in_bounds(sv) if skip else None          # per src element: its index lies inside the tensor
    if keep is not None and dv is None:
        raise rt.rule_error(api, "oob_mode=skip leaves skipped elements of dst as they were, so it needs a dst",
                            "dma_transpose(dst=..., oob_mode=skip)")
    data, written = read(sv, keep, api)
    if data is not None:
        data = _call(_permuted, data, axes=perm)
    if written is not None:
        written = np.transpose(written, perm)
    m_dst = None if keep is None else np.transpose(keep, perm)
    if dv is None:
        out = _ops.new_result(rt, api, shape, _dt.canonical(dtype) if dtype is not None else sv.tensor.dtype, "sbuf",
                              data, written, _ops.mask_array(mask))
        target = out.full_view()
    else:
        out, target = None, dv
        if dv.shape != shape:
            data = None if data is None else data.reshape(dv.shape)
            written = None if written is None else written.reshape(dv.shape)
            m_dst = None if m_dst is None else m_dst.reshape(dv.shape)
        write(dv, data, written, m_dst, api)
    p = shape[0]
    item = _dt.itemsize(sv.tensor.dtype)
    per_part = int(_prod(shape[1:])) * item if len(shape) > 1 else item
    index_reads = tuple(v.region() for v in sv.indirect)   # an indirect transpose reads its index tiles
    ins = rt.emit("dma", "dma_transpose", api, (sv.region(keep),) + index_reads, (target.region(m_dst),), p,
                  per_part // item, (_dt.name(sv.tensor.dtype),), _dt.name(target.tensor.dtype),
                  attrs={"bytes": p * per_part, "partitions": p, "bytes_per_partition": per_part,
                         "contiguous_bytes": item, "src": sv.tensor.buffer, "dst": target.tensor.buffer,
                         "transpose": True, "indirect": bool(index_reads)})
    if out is not None:
        out._producer = ins
    return out


__all__ = [n for n in dir() if not n.startswith("_")]
