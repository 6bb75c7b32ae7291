"""Redundant work the real toolchain keeps on chip instead of redoing: reloads and recomputation.

A kernel often reloads the same HBM data in every iteration of an outer loop (an RMSNorm weight,
the stationary operand of a fused matmul) or recomputes a loop-invariant value (Mamba's
``delta * u`` inside the state loop). The measured trn1 profiles show the compiler does such work
once when it can keep the result resident: for ``add_rmsnorm_matmul`` the measured
``hbm_read_bytes`` equal the *distinct* bytes the kernel loads (42.0 MB against 302 MB issued),
while for ``matmul``, whose reloaded operand (84 MB) cannot stay in SBUF, every reload is real
(docs/perf_model.md §4b derives this from the measured table).

Rule (value numbering over the stream): an instruction is *redundant* when an earlier one did
the same thing to the same values — a DMA load of the same HBM box (nothing wrote that tensor
since; ``nl.load`` and an HBM->SBUF ``nisa.dma_copy`` alike), or a ``tensor_tensor`` /
``nc_matmul`` / copy / transpose with the same op, output dtype and input regions holding the
same values (results of redundant instructions count as the values they duplicate). Immediate operands are not in the trace, so ops that take them
(``tensor_scalar``, ``activation``) never count as redundant. Each statement's (file, line)
redundant instructions are elided only if the distinct results it produces fit, per partition,
in the SBUF space the kernel's own tiles leave free (usable capacity minus their peak demand);
statements get space in order of first use. An elided instruction costs nothing (no engine
time, DMA time or HBM bytes); its result is ready when the first copy was.
"""
from __future__ import annotations

from accelopt_nb.perf.hardware import HWConfig
from accelopt_nb.sim.trace import Instruction, Trace

# ops whose result is determined by the op name, the ALU names and the input values alone
PURE_OPS = frozenset({"tensor_tensor", "nc_matmul", "tensor_copy", "nc_transpose", "transpose"})
_ATTR_KEYS = ("alu", "alu1", "k", "m", "n", "dtype", "is_transpose")


def _candidate(ins: Instruction) -> bool:
    if ins.accumulate or not ins.writes:
        return False
    if ins.engine == "dma":
        return _is_load(ins)
    return ins.op in PURE_OPS and all(w.buffer != "hbm" for w in ins.writes)


def _is_load(ins: Instruction) -> bool:
    """A plain load: one HBM box read, written on chip, whatever API issued it (``nl.load`` records
    ``dma_load``; today's nki style ``nisa.dma_copy`` HBM->SBUF records ``dma_copy``). An indirect
    copy also reads its index tile, and transposing loads were never observed elided: neither counts."""
    return (not ins.attrs.get("transpose") and ins.op != "dma_transpose" and len(ins.reads) == 1
            and ins.reads[0].buffer == "hbm" and all(w.buffer != "hbm" for w in ins.writes))


def redundant_instructions(trace: Trace, hw: HWConfig, sbuf_peak_demand: int) -> dict[int, int]:
    """Elided instruction -> the earlier instruction whose result it reuses (see module docstring)."""
    tensors = trace.tensors
    canon: dict[int, int] = {}              # tensor -> the tensor whose value it duplicates
    version: dict[int, int] = {}            # canonical tensor -> number of writes so far
    first: dict[tuple, int] = {}            # value key -> first instruction computing it
    per_stmt: dict[tuple, dict[int, int]] = {}
    distinct_bpp: dict[tuple, float] = {}
    order: list[tuple] = []
    for ins in trace.instructions:
        if _candidate(ins):
            inputs = tuple((canon.get(r.tensor, r.tensor), version.get(canon.get(r.tensor, r.tensor), 0),
                            r.block, r.lo, r.hi) for r in ins.reads)
            key = (ins.engine == "dma", "load" if ins.engine == "dma" else ins.op, tuple(str(ins.attrs.get(k)) for k in _ATTR_KEYS), inputs,
                   ins.out_dtype, tuple(w.hi[i] - w.lo[i] for w in ins.writes for i in range(len(w.lo))))
            stmt = (ins.file, ins.line, ins.op) if ins.line is not None else (ins.index,)
            if stmt not in per_stmt:
                per_stmt[stmt] = {}
                distinct_bpp[stmt] = 0.0
                order.append(stmt)
            j = first.get(key)
            if j is not None:
                per_stmt[stmt][ins.index] = j
                # a whole fresh tile that duplicates another one: later reads see the same value
                src = trace.instructions[j]
                if len(ins.writes) == len(src.writes) == 1 and _whole_fresh(ins.writes[0], tensors, version, canon):
                    canon[ins.writes[0].tensor] = canon.get(src.writes[0].tensor, src.writes[0].tensor)
                continue
            first[key] = ins.index
            parts = max(min(int(ins.attrs.get("partitions") or ins.partitions or 1), hw.sbuf_partitions), 1)
            distinct_bpp[stmt] += sum(w.nbytes for w in ins.writes) / parts
        for w in ins.writes:
            c = canon.get(w.tensor, w.tensor)
            version[c] = version.get(c, 0) + 1
    free = hw.sbuf_usable_bytes_per_partition - sbuf_peak_demand
    out: dict[int, int] = {}
    for stmt in order:
        if per_stmt[stmt] and distinct_bpp[stmt] <= free:
            free -= distinct_bpp[stmt]
            out.update(per_stmt[stmt])
    return out


def _whole_fresh(region, tensors, version, canon) -> bool:
    info = tensors.get(region.tensor)
    if info is None or region.tensor in canon or version.get(region.tensor, 0):
        return False
    return tuple(region.lo) == (0,) * len(info.shape) and tuple(region.hi) == tuple(info.shape)


__all__ = ["PURE_OPS", "redundant_instructions"]
