"""Redundant HBM loads the real toolchain keeps on chip instead of moving again.

A kernel often reloads the same HBM data in every iteration of an outer loop (an RMSNorm
weight, the stationary matmul operand of a fused kernel). The measured trn1 profiles show the
compiler loads such data once when it can keep it resident: for ``add_rmsnorm_matmul`` the
measured ``hbm_read_bytes`` equal the *distinct* bytes the kernel loads (42.0 MB against 302 MB
issued), while for ``matmul``, whose reloaded operand (84 MB) cannot stay in SBUF, every reload
is real (docs/perf_model.md §4b derives this from the measured table).

Rule: a DMA load is *redundant* when it reads exactly the HBM box an earlier load of the same
statement (file, line, HBM tensor) read and nothing wrote that tensor. Each statement's
redundant loads are elided only if the distinct data the statement loads fits, per partition,
in the SBUF space the kernel's own tiles leave free (usable capacity minus their peak demand);
statements are granted space in order of first use. An elided load costs no DMA time and no
HBM bytes; its destination is ready when the first copy arrived.
"""
from __future__ import annotations

from accelopt_nb.perf.hardware import HWConfig
from accelopt_nb.sim.trace import Trace


def _statement(ins) -> tuple:
    hbm = next(r.tensor for r in ins.reads if r.buffer == "hbm")
    return (ins.file, ins.line, hbm) if ins.line is not None else (ins.index, hbm)


def redundant_loads(trace: Trace, hw: HWConfig, sbuf_peak_demand: int) -> dict[int, int]:
    """Elided load -> the earlier load whose on-chip copy it reuses (see module docstring)."""
    written = {w.tensor for ins in trace.instructions for w in ins.writes if w.buffer == "hbm"}
    first: dict[tuple, int] = {}                      # (tensor, block, lo, hi) -> first load index
    per_stmt: dict[tuple, dict[int, int]] = {}        # statement -> {elided: first}
    distinct_bpp: dict[tuple, float] = {}             # statement -> distinct bytes per partition
    order: list[tuple] = []
    for ins in trace.instructions:
        if ins.engine != "dma" or ins.accumulate or any(w.buffer == "hbm" for w in ins.writes):
            continue
        srcs = [r for r in ins.reads if r.buffer == "hbm"]
        if len(srcs) != 1 or srcs[0].tensor in written:
            continue
        r = srcs[0]
        stmt = _statement(ins)
        if stmt not in per_stmt:
            per_stmt[stmt] = {}
            distinct_bpp[stmt] = 0.0
            order.append(stmt)
        key = (r.tensor, r.block, r.lo, r.hi)
        if key in first:
            per_stmt[stmt][ins.index] = first[key]
        else:
            first[key] = ins.index
            parts = max(int(ins.attrs.get("partitions") or ins.partitions or 1), 1)
            distinct_bpp[stmt] += r.nbytes / min(parts, hw.sbuf_partitions)
    free = hw.sbuf_usable_bytes_per_partition - sbuf_peak_demand
    out: dict[int, int] = {}
    for stmt in order:
        if per_stmt[stmt] and distinct_bpp[stmt] <= free:
            free -= distinct_bpp[stmt]
            out.update(per_stmt[stmt])
    return out


__all__ = ["redundant_loads"]
