"""Per-instruction compute costs: the NC-v2 cycle formulas of the 2.26 ISA docstrings (ISA26).

``N`` is the number of elements per partition an instruction processes (``Instruction.free_elems``).
Costs are in cycles of the instruction's own engine clock. Partitions are parallel lanes, so an
instruction on fewer than 128 partitions costs the same as one on 128 (ARCH1).

Fixed overheads that depend on the schedule (an instruction that depends on the one just before
it on the same engine) are added by the scheduler; the *tiny* overhead (N < 128) is static and
returned here separately so the profile can report how much time goes to overheads.
"""
from __future__ import annotations

from dataclasses import dataclass

from accelopt_nb.perf.hardware import HWConfig
from accelopt_nb.sim.trace import Instruction

HALF_TYPES = frozenset({"bfloat16", "float16"})
FP32_TYPES = frozenset({"float32"})
ADD_MUL_SUB = frozenset({"add", "multiply", "subtract", "mul", "sub"})
ADD_MAX = frozenset({"add", "max", "maximum"})
_GATHER_T = 4   # local_gather's cost constant t (ISA26: "currently 4, subject to change")


@dataclass(frozen=True, slots=True)
class ComputeCost:
    """Cost of one compute-engine instruction, in seconds."""

    busy_s: float        # the formula cost, e.g. max(MIN_II, 2N) cycles / clock
    overhead_s: float    # static fixed overhead (tiny instructions)


def _alu(ins: Instruction) -> str:
    a = ins.attrs
    for key in ("alu", "op", "op0", "op1", "func"):
        v = a.get(key)
        if isinstance(v, str):
            return v.lower()
    return ""


def _all_half(ins: Instruction) -> bool:
    types = [t for t in ins.in_dtypes if t] + ([ins.out_dtype] if ins.out_dtype else [])
    return bool(types) and all(t in HALF_TYPES for t in types)


def _psum_input(ins: Instruction) -> bool:
    if "psum_input" in ins.attrs:
        return bool(ins.attrs["psum_input"])
    return any(r.buffer == "psum" for r in ins.reads)


def _psum_touch(ins: Instruction) -> bool:
    return _psum_input(ins) or any(w.buffer == "psum" for w in ins.writes)


def matmul_cycles(ins: Instruction, hw: HWConfig) -> float:
    """``nc_matmul``: max(min(64, N_stationary), N_moving) TensorE cycles, x4 for fp32 (ISA26)."""
    a = ins.attrs
    n_st = int(a.get("m", ins.partitions))          # stationary free size = output partitions
    n_mov = int(a.get("n", ins.free_elems))         # moving free size
    cycles = max(min(hw.matmul_min_cycles, n_st), n_mov)
    dtype = str(a.get("dtype") or (ins.in_dtypes[0] if ins.in_dtypes else ""))
    if dtype in FP32_TYPES:
        if a.get("is_transpose"):
            cycles *= hw.transpose_fp32_factor
        elif a.get("stationary_onezero") or a.get("moving_onezero"):
            cycles *= hw.matmul_fp32_onezero_factor
        else:
            cycles *= hw.matmul_fp32_factor
    return float(cycles)


def tensor_transpose_cycles(ins: Instruction, hw: HWConfig) -> float:
    """TensorE ``nc_transpose``: max(P, min(64, F)) cycles (ISA26), a matmul with an identity."""
    p, f = ins.partitions, ins.free_elems
    cycles = max(p, min(hw.matmul_min_cycles, f))
    dtype = ins.in_dtypes[0] if ins.in_dtypes else ""
    return float(cycles * (hw.transpose_fp32_factor if dtype in FP32_TYPES else 1.0))


def _vector_cycles(ins: Instruction, hw: HWConfig) -> float:
    n = max(int(ins.free_elems), 1)
    op = ins.op
    mn = hw.min_ii_cycles
    alu = _alu(ins)
    half = _all_half(ins)
    psum = _psum_input(ins)
    if op == "tensor_tensor":
        if psum:
            return max(mn, n)
        if half and alu in ADD_MUL_SUB:
            return max(mn, n / hw.vector_bf16_tensor_tensor_speedup)
        cyc = hw.tensor_tensor_cycles_per_elem * n
        return max(mn, cyc / hw.vector_bf16_tensor_tensor_speedup if half else cyc)
    if op in ("tensor_scalar", "tensor_copy", "copy", "activation", "nc_stream_shuffle"):
        if half:  # NC-v3 performance mode (ARCH2); the speedups are 1.0 on NC-v2
            speed = hw.vector_bf16_copy_psum_speedup if _psum_touch(ins) else hw.vector_bf16_copy_speedup
            return max(mn, n / speed)
        return max(mn, n)
    if op == "memset":
        zero = float(ins.attrs.get("value", 1.0) or 0.0) == 0.0
        return max(mn, n / 2 if (zero and ins.out_dtype in HALF_TYPES) else n)
    if op == "scalar_tensor_tensor":
        ops = (str(ins.attrs.get("op0", "")).lower(), str(ins.attrs.get("op1", "")).lower())
        if half and ops == ("subtract", "multiply") and n % 2 == 0:
            return max(mn, n)
        return max(mn, 2 * n)
    if op == "tensor_reduce":
        return max(mn, n / 2 if (half and alu in ADD_MAX) else n)
    if op == "tensor_tensor_scan":
        return max(mn, 2 * n)
    if op == "reciprocal":
        return max(mn, hw.reciprocal_cycles_per_elem * n)
    if op == "bn_aggr":
        return max(mn, 13 * n / 3)
    if op == "tensor_scalar_reduce":
        return max(mn, n) + mn
    if op == "tensor_copy_predicated":
        return max(mn, n if psum else 2 * n)
    if op in ("max8", "nc_find_index8", "nc_match_replace8"):
        return max(mn, n)
    if op in ("tensor_copy_dynamic_src", "tensor_copy_dynamic_dst"):
        return max(hw.dynamic_copy_cycles, n)
    # bn_stats, dropout, range_select, select_reduce, nc_transpose (32x32), iota-like fallbacks:
    # the generic max(MIN_II, N) of ISA26
    return max(mn, n)


def _scalar_cycles(ins: Instruction, hw: HWConfig) -> float:
    n = max(int(ins.free_elems), 1)
    mn = hw.min_ii_cycles
    cyc = max(mn, n)
    reduces = ins.op == "activation_reduce" or bool(ins.attrs.get("reduce_op")) or bool(ins.attrs.get("reduce"))
    if reduces:  # Activate + ActReadAccumulator: the second costs ~MIN_II (ARCH1)
        cyc += mn
    return float(cyc)


def _gpsimd_cycles(ins: Instruction, hw: HWConfig) -> float:
    n = max(int(ins.free_elems), 1)
    if ins.op in ("tensor_copy_dynamic_src", "tensor_copy_dynamic_dst"):
        return max(hw.dynamic_copy_cycles, n)
    a = ins.attrs
    if ins.op == "local_gather" and "num_elem_per_idx" in a:
        # ISA26 local_gather: 150 + (num_valid_indices * num_elem_per_idx) / C,
        # C = ((28 + t e) / (t e)) / min(4 / dtype_size, e), t = 4 (the software's constant today)
        e, valid, size = int(a["num_elem_per_idx"]), int(a["num_valid_indices"]), int(a["dtype_bytes"])
        c = ((28 + _GATHER_T * e) / (_GATHER_T * e)) / min(4 / size, e)
        return hw.gpsimd_fixed_cycles + valid * e / c
    per_elem = 4.0 if _alu(ins) == "rsqrt" else 1.0   # SHARED: GpSimd rsqrt ~4x slower than ScalarE
    return hw.gpsimd_fixed_cycles + per_elem * n


# ScalarE computes func(x * scale + bias) with a scalar or per-partition scale and bias, so a
# tensor_scalar made of multiplies and adds, or a copy, can run there as well (ISA26 §2.5).
SCALAR_AFFINE = frozenset({"multiply", "mul", "add", "subtract", "sub"})


def placement_choices(ins: Instruction) -> tuple[str, ...]:
    """Engines the compiler may run this instruction on (the kernel left the engine to it)."""
    a = ins.attrs
    if ins.engine != "vector" or not (a.get("compiler_engine") or ins.api == "nl.copy"):
        return (ins.engine,)
    if ins.op == "tensor_copy":
        return ("vector", "scalar")
    if ins.op == "tensor_scalar" and str(a.get("alu", "")).lower() in SCALAR_AFFINE and \
            (a.get("alu1") is None or str(a.get("alu1")).lower() in SCALAR_AFFINE):
        return ("vector", "scalar")
    return (ins.engine,)


def compute_cost(ins: Instruction, hw: HWConfig, engine: str | None = None) -> ComputeCost:
    """Cost of a TensorE / VectorE / ScalarE / GpSimdE instruction (on ``engine`` if given)."""
    engine = engine or ins.engine
    if engine == "tensor":
        if ins.op == "nc_transpose" or ins.op == "transpose":
            cyc = tensor_transpose_cycles(ins, hw)
        else:
            cyc = matmul_cycles(ins, hw)
        return ComputeCost(cyc / hw.tensor_clock_hz, 0.0)
    if engine == "vector":
        cyc = _vector_cycles(ins, hw)
    elif engine == "scalar":
        cyc = _scalar_cycles(ins, hw)
    elif engine == "gpsimd":
        cyc = _gpsimd_cycles(ins, hw)
    else:
        raise ValueError(f"compute_cost: {engine!r} is not a compute engine")
    clock = hw.clock(engine)
    tiny = hw.tiny_overhead_cycles if (engine != "gpsimd" and ins.free_elems < hw.tiny_free_elems) else 0.0
    return ComputeCost(cyc / clock, tiny / clock)


def matmul_flops(ins: Instruction) -> float:
    """2 * active rows (K) * active columns (M) * moving elements (N), the profiler's definition."""
    a = ins.attrs
    k = int(a.get("k", 0)) or (ins.reads[0].elements // max(int(a.get("m", ins.partitions)), 1) if ins.reads else 0)
    m = int(a.get("m", ins.partitions))
    n = int(a.get("n", ins.free_elems))
    return 2.0 * k * m * n


__all__ = ["ComputeCost", "compute_cost", "matmul_cycles", "matmul_flops", "placement_choices",
           "tensor_transpose_cycles"]
