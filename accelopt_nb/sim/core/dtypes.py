"""NKI data types on NumPy: names, storage dtypes, rounding and type promotion.

bf16 and fp8 are real narrow types (``ml_dtypes``), so storing into a bf16 tile rounds the
way hardware storage does. ``tfloat32`` has no NumPy type: it is stored as float32 with the
mantissa rounded to 10 bits.

fp8: ``float8_e4m3`` is the format of trn1/trn2, IEEE-754 style (it has inf and NaN; largest finite 240), not
the OCP ``float8_e4m3fn`` (no inf; largest finite 448), which only NeuronCore-v4 (trn3) computes natively
(Neuron docs: compiler error EVRF051 "F8E4M3FN is not supported on TRN1/TRN2"; vLLM-Neuron's KV-cache
quantization notes "TRN2 FP8 E4M3 has a max finite value of 240.0"). Both are nameable and both are simulated
as their own formats. The NeuronCore-v4 block-scaling types (``float8_e8m0fnu``, and the 4-packed
``float8_e5m2_x4``, ``float8_e4m3fn_x4``, ``float4_e2m1fn_x4`` of ``nc_matmul_mx`` / ``quantize_mx``) are
names only: a tensor of one is refused (:class:`NC4Only`).
"""
from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from accelopt_nb.errors import UnsupportedAPIError

float32 = np.dtype(np.float32)
float16 = np.dtype(np.float16)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)        # trn1/trn2's e4m3: IEEE style, max 240
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)    # OCP e4m3fn: max 448, no inf (natively NeuronCore-v4)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
_NARROW_FLOATS = (bfloat16, float8_e4m3, float8_e4m3fn, float8_e5m2)   # float types NumPy's kind does not tell
int8, int16, int32 = np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32)
uint8, uint16, uint32 = np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32)
bool_ = np.dtype(np.uint8)  # NKI stores bool as uint8


class _TF32:
    """Marker for tfloat32 (1-8-10): float32 storage, 10-bit mantissa."""

    name = "tfloat32"
    itemsize = 4

    def __repr__(self) -> str:
        return "tfloat32"


tfloat32 = _TF32()


class NC4Only:
    """A NeuronCore-v4 (trn3) data type: nameable (kernels list dtypes in module-level tables), never a tensor's."""

    coverage_note = "NeuronCore-v4 (trn3) only: nameable; a tensor of this dtype is refused"

    def __init__(self, name: str, itemsize: int) -> None:
        self.name = name
        self.itemsize = itemsize

    def __repr__(self) -> str:
        return self.name


float8_e8m0fnu = NC4Only("float8_e8m0fnu", 1)
float8_e5m2_x4 = NC4Only("float8_e5m2_x4", 4)
float8_e4m3fn_x4 = NC4Only("float8_e4m3fn_x4", 4)
float4_e2m1fn_x4 = NC4Only("float4_e2m1fn_x4", 2)
NC4_ONLY = {t.name: t for t in (float8_e8m0fnu, float8_e5m2_x4, float8_e4m3fn_x4, float4_e2m1fn_x4)}

_BY_NAME: dict[str, Any] = {
    "float32": float32, "fp32": float32, "float16": float16, "fp16": float16,
    "bfloat16": bfloat16, "bf16": bfloat16, "float8_e4m3": float8_e4m3, "float8_e4m3fn": float8_e4m3fn,
    "fp8_e4m3": float8_e4m3, "float8_e5m2": float8_e5m2, "fp8_e5m2": float8_e5m2,
    "int8": int8, "int16": int16, "int32": int32, "uint8": uint8, "uint16": uint16,
    "uint32": uint32, "bool": bool_, "bool_": bool_, "tfloat32": tfloat32, "tf32": tfloat32,
}

FLOAT_WIDTH = {"float8_e4m3": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float16": 2, "bfloat16": 2,
               "tfloat32": 4, "float32": 4}


class UnknownDTypeError(UnsupportedAPIError, TypeError):
    """A dtype NKI does not have: the kernel's error (and a TypeError, for callers that probe)."""

    def __init__(self, dtype: Any) -> None:
        if isinstance(dtype, NC4Only):
            super().__init__(f"dtype {dtype.name} exists only on NeuronCore-v4 (trn3, for nc_matmul_mx and "
                             "quantize_mx): the simulator models trn1/trn2 tensors", api="dtype")
            return
        super().__init__(f"unknown dtype {dtype!r} (NKI dtypes: float32, bfloat16, float16, tfloat32, float8_e4m3, "
                         "float8_e4m3fn, float8_e5m2, int8/16/32, uint8/16/32, bool_)", api="dtype")


_CANON_CACHE: dict[Any, Any] = {}
_NAME_CACHE: dict[Any, str] = {}
_ITEMSIZE_CACHE: dict[Any, int] = {}


def canonical(dtype: Any) -> Any:
    """Map anything a kernel may pass as a dtype (np types, strings, nl names) to ours."""
    try:
        return _CANON_CACHE[dtype]
    except (KeyError, TypeError):
        pass
    out = _canonical(dtype)
    try:
        _CANON_CACHE[dtype] = out
    except TypeError:
        pass
    return out


def _canonical(dtype: Any) -> Any:
    if dtype is None:
        return None
    if isinstance(dtype, _TF32):
        return dtype
    if isinstance(dtype, str):
        try:
            return _BY_NAME[dtype]
        except KeyError:
            raise UnknownDTypeError(NC4_ONLY.get(dtype, dtype)) from None
    if dtype is bool or dtype is np.bool_:
        return bool_
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise UnknownDTypeError(dtype) from None
    if dt.kind in "cOSUMm" or (dt.kind == "f" and dt.itemsize > 8):  # complex, text, objects, times: not NKI
        raise UnknownDTypeError(dtype)
    if dt == np.bool_:
        return bool_
    if dt == np.float64:  # engines are fp32 at most
        return float32
    if dt == np.int64:
        return int32
    if dt == np.uint64:
        return uint32
    return dt


def name(dtype: Any) -> str:
    try:
        return _NAME_CACHE[dtype]
    except (KeyError, TypeError):
        pass
    c = canonical(dtype)
    out = c.name if isinstance(c, _TF32) else str(c)
    try:
        _NAME_CACHE[dtype] = out
    except TypeError:
        pass
    return out


def storage(dtype: Any) -> np.dtype:
    dtype = canonical(dtype)
    return float32 if isinstance(dtype, _TF32) else dtype


def itemsize(dtype: Any) -> int:
    try:  # asked for every region of every instruction; a dtype's size never changes
        return _ITEMSIZE_CACHE[dtype]
    except (KeyError, TypeError):
        pass
    c = canonical(dtype)
    out = 4 if isinstance(c, _TF32) else c.itemsize
    try:
        _ITEMSIZE_CACHE[dtype] = out
    except TypeError:
        pass
    return out


def is_float(dtype: Any) -> bool:
    dtype = canonical(dtype)
    return isinstance(dtype, _TF32) or dtype.kind == "f" or dtype in _NARROW_FLOATS


def is_int(dtype: Any) -> bool:
    return not is_float(dtype)


def cast(values: np.ndarray, dtype: Any) -> np.ndarray:
    """Round values to `dtype` storage (hardware write-back rounding, saturating ints)."""
    dtype = canonical(dtype)
    if isinstance(dtype, _TF32):
        bits = np.asarray(values, dtype=np.float32).view(np.uint32)
        rounded = (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
        return rounded.view(np.float32)
    if values.dtype == dtype:
        return values
    if dtype.kind == "f" or dtype in _NARROW_FLOATS:
        with np.errstate(over="ignore", invalid="ignore"):  # saturation to inf is the hardware result
            return values.astype(dtype)
    if dtype.kind in "iu" and values.dtype.kind == "f":
        info = np.iinfo(dtype)
        with np.errstate(invalid="ignore"):
            values = np.clip(np.nan_to_num(np.trunc(values), nan=0.0), info.min, info.max)
    return values.astype(dtype)


def compute_dtype(*dtypes: Any) -> np.dtype:
    """The engine arithmetic type: fp32 unless every operand is an integer."""
    if dtypes and all(is_int(d) for d in dtypes):
        return np.dtype(np.int64)
    return float32


def promote(a: Any, b: Any) -> Any:
    """NKI promotion of two tile dtypes (nki.api.shared 'type promotion')."""
    a, b = canonical(a), canonical(b)
    if a is None:
        return b
    if b is None or name(a) == name(b):
        return a
    fa, fb = is_float(a), is_float(b)
    if fa and not fb:
        return a
    if fb and not fa:
        return b
    if fa and fb:
        na, nb = name(a), name(b)
        pair = {na, nb}
        if pair == {"float16", "bfloat16"}:
            return float32
        if len(pair) == 2 and pair <= {"float8_e4m3", "float8_e4m3fn", "float8_e5m2"}:
            return bfloat16
        wa, wb = FLOAT_WIDTH[na], FLOAT_WIDTH[nb]
        if wa != wb:
            return a if wa > wb else b
        return float32
    # two integers
    sa, sb = a.kind == "i", b.kind == "i"
    if sa == sb:
        return a if a.itemsize >= b.itemsize else b
    signed, unsigned = (a, b) if sa else (b, a)
    if unsigned.itemsize >= 4:
        return float32
    if signed.itemsize > unsigned.itemsize:
        return signed
    return {1: int16, 2: int32}[unsigned.itemsize]


def scalar_dtype(value: Any) -> Any:
    """Python scalars are weakly typed: bool->uint8, int->int32, float->fp32."""
    if isinstance(value, (bool, np.bool_)):
        return uint8
    if isinstance(value, (int, np.integer)):
        return int32
    return float32


def nan_fill(dtype: Any) -> Any:
    """The value new tensors start with, so reads of unwritten memory stand out."""
    return np.nan if is_float(dtype) else 4  # AWS's simulator fills ints with 4
