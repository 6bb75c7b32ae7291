"""The timing model: list scheduling of the instruction stream onto engines and DMA queues.

Rules (documented in docs/perf_model.md):

* Each compute engine (tensor, vector, scalar, gpsimd) executes its instructions in stream
  (program) order; each DMA queue is FIFO. Engines and queues overlap otherwise.
* An instruction starts after the producers of what it reads (RAW) and the earlier readers and
  writers of what it overwrites (WAR, WAW), by box overlap of :class:`Region` on one tensor.
* ``affine_range`` / ``static_range`` iterations allocate their tiles afresh, so iterations
  overlap as far as dependencies, engines and on-chip capacity allow (multi-buffering bounded by
  :class:`TimedPool`). ``sequential_range`` (and SPMD instances, which run serially on one core)
  keeps order conservatively: a tile allocated inside such a loop reuses the previous
  iteration's buffer, so it is single-buffered (a WAR/WAW wait on the previous instance). Nor does
  it reorder memory accesses: inside such a loop a DMA that reads HBM waits until the HBM writes
  issued before it in the loop have landed (``hw.sequential_hbm_order``). Both are the middle end's: a kernel marked
  ``skip_middle_end_transformations`` (``Trace.skip_middle_end``) keeps only the SPMD ones
  (``hw.sequential_rules_need_middle_end``).
* Renaming (``hw.rename_full_overwrites``): a plain write of a whole on-chip tile starts a new value the allocator
  may place elsewhere, so it does not wait for the readers/writers of the value it replaces (capacity still bounds it).
* ``no_reorder`` blocks (``Instruction.attrs["no_reorder"]``): the compiler puts a dependency edge between every
  two instructions of the block, so each waits for the one before it in program order (on any engine or queue);
  instructions outside the block are not held by it.
* trn1 resource conflicts: VectorE and GpSimdE never access SBUF at the same time; VectorE and
  ScalarE never access PSUM at the same time.
* Fixed overheads: tiny instructions (N < 128) pay ~100 cycles; an instruction that waits for
  a result (back-to-back dependent, or a semaphore wait on another engine) pays
  ``hw.dependent_overhead_cycles`` (documented ~100, fitted). A timer of the whole kernel adds its start/stop, ``hw.launch_overhead_s``; the DMA
  engines start one transfer at a time, at most every ``hw.dma_issue_interval`` (all queues together).
* Spills from :func:`plan_memory` become DMA traffic on the spill queue: the save waits for the
  victim's last use and frees its space, the reload waits for space and delays the next use.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from accelopt_nb.perf.costs import compute_cost, placement_choices
from accelopt_nb.perf.deps import NONE, DependencyTracker
from accelopt_nb.perf.dma import BandwidthLedger, IssueSlots, QueueAssigner, TransferShape, transfer_rate, transfer_shape
from accelopt_nb.perf.hardware import HWConfig
from accelopt_nb.perf.memory import MemoryPlan, TimedPool, plan_memory
from accelopt_nb.perf.reuse import redundant_instructions
from accelopt_nb.sim.trace import Trace

COMPUTE_ENGINES = ("tensor", "vector", "scalar", "gpsimd")
_ENGINE_ROW = {e: i for i, e in enumerate(COMPUTE_ENGINES)}
_EPS = 1e-15
# engines whose instructions pay the dependent-issue overhead (ARCH1: Vector, Scalar, GpSimd)
DEPENDENT_OVERHEAD_ENGINES = ("vector", "scalar", "gpsimd")


@dataclass
class SpillEvent:
    kind: str          # "spill_save" | "spill_reload"
    start: float
    end: float         # data moved
    nbytes: int
    tensor: int
    block: int


@dataclass
class Schedule:
    """When every instruction ran, plus the bookkeeping the profile is computed from."""

    hw: HWConfig
    start: np.ndarray          # seconds, per instruction
    end: np.ndarray            # completion (what dependants wait for)
    busy_end: np.ndarray       # end of the engine/queue occupancy (DMA: last byte moved)
    row: np.ndarray            # 0..3 compute engines, 4 + q for DMA queue q, -1 elided (reuse.py)
    overhead: np.ndarray       # fixed-overhead seconds included in the duration
    spill_events: list[SpillEvent]
    memory: MemoryPlan
    dma_queues: int
    spill_row: int
    transfer: dict[int, TransferShape] = field(default_factory=dict)

    @property
    def total_time(self) -> float:
        """Seconds from the first instruction to the last completion (the launch cost not included)."""
        t = float(self.end.max()) if len(self.end) else 0.0
        for ev in self.spill_events:
            t = max(t, ev.end)
        return t

    @property
    def end_to_end(self) -> float:
        """Seconds a timer of the whole kernel sees (neuron-profile total_time, nki.benchmark / neuron-bench NCL):
        the kernel's time plus its start/stop cost (hw.launch_overhead_s, perf_model.md §2b). ``total_time``, and
        so Profile.latency, is the kernel's time alone: first instruction to last completion."""
        return self.total_time + self.hw.launch_overhead_s if len(self.end) else 0.0

    def row_names(self) -> list[str]:
        return list(COMPUTE_ENGINES) + [f"dma q{q}" for q in range(self.dma_queues)] + ["dma spill"]


def _conservative_kinds(trace: Trace, hw: HWConfig) -> tuple[str, ...]:
    """The loop kinds whose iterations the model keeps in order (single-buffered tiles, sequential_hbm_order).

    SPMD instances always run one after another on one core. ``sequential_range`` is the middle end's
    conservative loop handling (LANG26; its API notes: the loop stays rolled until the backend and gets far more
    conservative loop-level optimization than ``affine_range``): a kernel marked
    ``skip_middle_end_transformations`` reaches the backend without it, so there its loops are scheduled like
    any other unrolled stream, by their dependencies (``hw.sequential_rules_need_middle_end``, perf_model.md §3d).
    """
    if hw.sequential_rules_need_middle_end and getattr(trace, "skip_middle_end", False):
        return ("spmd",)
    return ("sequential", "spmd")


def _alias_map(trace: Trace, kinds: tuple[str, ...] = ("sequential", "spmd")) -> dict[int, int]:
    """Tensor -> the previous instance of the same allocation site in a sequential/SPMD loop."""
    last: dict[tuple, int] = {}
    prev: dict[int, int] = {}
    for info in sorted(trace.tensors.values(), key=lambda t: (t.alloc_index, t.id)):
        if info.buffer == "hbm" or not info.loops:
            continue
        k = max((j for j, lp in enumerate(info.loops) if lp[1] in kinds), default=-1)
        if k < 0:
            continue
        loops = info.loops
        key = (info.line, info.kind, info.shape, info.dtype, info.buffer, loops[:k], loops[k][0],
               tuple((kind, it) for _, kind, it in loops[k + 1:]))
        if key in last:
            prev[info.id] = last[key]
        last[key] = info.id
    return prev


def _sequential_loops(trace: Trace, kinds: tuple[str, ...] = ("sequential", "spmd")) -> list[tuple[int, ...]]:
    """Per instruction: the enclosing sequential/SPMD loop instances, numbered (empty if none).

    An instance is one execution of the whole loop: the loop plus the iterations of the loops
    around it, so the same loop inside another outer iteration is another instance.
    """
    ids: dict[tuple, int] = {}
    out: list[tuple[int, ...]] = []
    for ins in trace.instructions:
        out.append(tuple(ids.setdefault((ins.loops[:j], lp[0]), len(ids))
                         for j, lp in enumerate(ins.loops) if lp[1] in kinds))
    return out


def _folded_psum_zeroing(trace: Trace) -> set[int]:
    """Zero-fills of PSUM tiles whose next use is a matmul accumulation into them.

    PSUM accumulation starts by overwriting (the first matmul of a group, ARCH1), so the
    compiler never materializes such a memset: the model makes it free.
    """
    pending: dict[int, int] = {}
    folded: set[int] = set()
    for ins in trace.instructions:
        touched = {r.tensor for r in ins.reads} | {w.tensor for w in ins.writes}
        hits = [t for t in touched if t in pending]
        for t in hits:
            idx = pending.pop(t)
            if ins.engine == "tensor" and ins.accumulate and any(w.tensor == t for w in ins.writes):
                folded.add(idx)
        if (ins.op == "memset" and not ins.reads and len(ins.writes) == 1 and ins.writes[0].buffer == "psum"
                and float(ins.attrs.get("value", 0.0) or 0.0) == 0.0):
            pending[ins.writes[0].tensor] = ins.index
    return folded


def _reads_that_matter(trace: Trace) -> set[int]:
    """Tensors written after they are first read: only their reads can cause a WAR wait."""
    first_read: dict[int, int] = {}
    out: set[int] = set()
    for ins in trace.instructions:
        for r in ins.reads:
            first_read.setdefault(r.tensor, ins.index)
        for w in ins.writes:
            if w.tensor in first_read:
                out.add(w.tensor)
    return out


def _full_overwrites(trace: Trace) -> dict[int, frozenset[int]]:
    """Per instruction: which of its write regions (indices into ``writes``) overwrite a whole block.

    A plain (not accumulating) on-chip write whose box spans the tile's partition and free dimensions
    entirely and that writes every element of it (a masked or gathering write leaves some of the old
    value in place): the old value of that block is dead afterwards, so the write can take a new
    address (renaming) instead of waiting for the old value's readers.
    """
    tensors = trace.tensors
    out: dict[int, frozenset[int]] = {}
    for ins in trace.instructions:
        if ins.accumulate or not ins.writes:
            continue
        full = set()
        for k, rg in enumerate(ins.writes):
            if rg.buffer == "hbm":
                continue
            info = tensors.get(rg.tensor)
            if info is None:
                continue
            p = info.par_axis
            whole = all(lo == 0 and hi == d for lo, hi, d in zip(rg.lo[p:], rg.hi[p:], info.shape[p:]))
            if whole and rg.elements == math.prod(hi - lo for lo, hi in zip(rg.lo, rg.hi)):
                full.add(k)
        if full:
            out[ins.index] = frozenset(full)
    return out


def _defines_whole(tensor: int, reads: list, writes: list, fresh: frozenset[int] | tuple) -> bool:
    """Whether an instruction writes ``tensor`` only whole (every written region of it in ``fresh``) without
    reading it: a new value, defined entirely here (``rename_full_overwrites: all``)."""
    mine = [k for k, w in enumerate(writes) if w.tensor == tensor]
    return bool(mine) and all(k in fresh for k in mine) and all(r.tensor != tensor for r in reads)


def _analysis_key(hw: HWConfig) -> tuple:
    """The hardware numbers :func:`analyse` reads (capacities and the elision switch), nothing timed."""
    return (hw.sbuf_usable_bytes_per_partition, hw.sbuf_partitions, hw.psum_banks, hw.psum_bank_bytes,
            hw.elide_redundant_work, hw.sequential_rules_need_middle_end)


@dataclass(frozen=True)
class TraceAnalysis:
    """What the schedule needs from a trace that no timing number changes.

    A fit times one trace under many cost parameters (calibrate.py): it analyses each trace once
    and passes the analysis to :func:`schedule`.
    """

    hw_key: tuple
    plan: MemoryPlan
    alias_prev: dict[int, int]
    folded: set[int]
    reused: dict[int, int]
    reads_that_matter: set[int]
    sequential_loops: list[tuple[int, ...]]
    full_overwrites: dict[int, frozenset[int]] = field(default_factory=dict)


def analyse(trace: Trace, hw: HWConfig) -> TraceAnalysis:
    """Liveness and spills, loop-buffer aliases, sequential loops, folded PSUM zero-fills, elided work."""
    instrs = trace.instructions
    if any(ins.index != k for k, ins in enumerate(instrs)):
        raise ValueError("trace instructions must be numbered 0..n-1 in stream order (Instruction.index)")
    plan = plan_memory(trace, hw)
    reused = redundant_instructions(trace, hw, plan.peak_demand["sbuf"]) if hw.elide_redundant_work else {}
    kinds = _conservative_kinds(trace, hw)
    return TraceAnalysis(_analysis_key(hw), plan, _alias_map(trace, kinds), _folded_psum_zeroing(trace), reused,
                         _reads_that_matter(trace), _sequential_loops(trace, kinds), _full_overwrites(trace))


def schedule(trace: Trace, hw: HWConfig, analysis: TraceAnalysis | None = None) -> Schedule:
    """Assign a start and end time to every instruction of ``trace`` on ``hw``.

    ``analysis`` is :func:`analyse` of the same trace on hardware with the same capacities.
    """
    if analysis is None:
        analysis = analyse(trace, hw)
    elif analysis.hw_key != _analysis_key(hw):
        raise ValueError("schedule: the trace analysis was made for other on-chip capacities")
    instrs = trace.instructions
    n = len(instrs)
    start = np.zeros(n)
    end = np.zeros(n)
    busy_end = np.zeros(n)
    row = np.zeros(n, dtype=np.int32)
    overhead = np.zeros(n)

    plan = analysis.plan
    ranges = plan.ranges
    pools = {"sbuf": TimedPool(plan.capacity["sbuf"]), "psum": TimedPool(plan.capacity["psum"])}
    range_last_end = [0.0] * len(ranges)
    alias_prev = analysis.alias_prev
    tensor_last_end: dict[int, float] = {}
    first_touch_done: set[int] = set()

    deps = DependencyTracker(analysis.reads_that_matter)
    queues = QueueAssigner(hw)
    ledger = BandwidthLedger(hw)
    n_queues = hw.dma_queues
    spill_row = 4 + n_queues
    queue_free = [0.0] * n_queues
    spill_free = 0.0
    engine_free = [0.0] * 4
    sbuf_port = 0.0     # trn1: VectorE / GpSimdE SBUF port
    psum_port = 0.0     # trn1: VectorE / ScalarE PSUM access
    share_sbuf = hw.vector_gpsimd_share_sbuf_port
    share_psum = hw.vector_scalar_share_psum
    latency = hw.dma_fixed_latency_s
    issue = IssueSlots(hw.dma_issue_interval)   # the DMA engines take transfers in turn (all queues together)
    transfers: dict[int, TransferShape] = {}
    rate_cache: dict = {}
    spill_events: list[SpillEvent] = []
    save_end: dict[int, float] = {}      # id(spill) -> when its save finished
    tensors = trace.tensors
    dep_over = {e: hw.dependent_overhead_cycles / hw.clock(e) for e in DEPENDENT_OVERHEAD_ENGINES}

    def spill_dma(kind: str, rid: int, ready: float) -> float:
        nonlocal spill_free
        r = ranges[rid]
        info = tensors[r.tensor]
        shape = TransferShape(r.nbytes, max(info.partitions, 1), info.bytes_per_partition,
                              max(info.bytes_per_partition, 1), True,
                              r.nbytes if kind == "spill_reload" else 0, r.nbytes if kind == "spill_save" else 0,
                              False)
        s = issue.take(max(ready, spill_free))
        data_end = ledger.serve(s, r.nbytes, transfer_rate(shape, hw, rate_cache), True)
        spill_free = data_end
        spill_events.append(SpillEvent(kind, s, data_end, r.nbytes, r.tensor, r.block))
        return max(s + latency, data_end)

    alias_sources = set(alias_prev.values())
    folded, reused = analysis.folded, analysis.reused
    place = hw.compiler_engine_placement
    # sequential_hbm_order: per sequential loop instance, when its HBM writes issued so far have landed
    seq_loops = analysis.sequential_loops if hw.sequential_hbm_order else None
    hbm_written: dict[int, float] = {}
    # rename_full_overwrites (perf_model.md §3d): "tiles" — a write of a whole on-chip tile does not wait for the
    # readers of the value it replaces; "all" — nor does the first (whole) write of a tile allocated in a
    # sequential loop wait for its previous iteration's instance
    rename = hw.rename_full_overwrites        # validated by HWConfig
    full_ow = analysis.full_overwrites if rename != "none" else None
    rename_alias = rename == "all"
    block_end: dict[tuple, float] = {}   # no_reorder block instance -> when its latest instruction finished
    spills_at, reloads_at, starts = plan.spills_at, plan.reloads_at, plan.starts
    access_ranges, ends = plan.access_ranges, plan.ends
    for i, ins in enumerate(instrs):
        ready = 0.0
        # spills triggered here free space before this instruction allocates
        for sp in spills_at[i]:
            r = ranges[sp.range_id]
            t_free = range_last_end[r.id]
            if sp.save:
                t_free = spill_dma("spill_save", r.id, t_free)
            save_end[id(sp)] = t_free
            pools[r.buffer].release(r.size, t_free)
        for sp in reloads_at[i]:
            r = ranges[sp.range_id]
            t_space = pools[r.buffer].allocate(r.size, save_end.get(id(sp), 0.0))
            ready = max(ready, spill_dma("spill_reload", r.id, t_space))
        for rid in starts[i]:
            r = ranges[rid]
            ready = max(ready, pools[r.buffer].allocate(r.size, ready))

        # dependencies
        reads, writes = ins.reads, ins.writes
        raw = NONE
        for rg in reads:
            t = deps.raw(rg.tensor, rg.block, rg.lo, rg.hi)
            if t > raw:
                raw = t
        acc = ins.accumulate
        fresh = full_ow.get(i, ()) if full_ow else ()
        for k, rg in enumerate(writes):
            if k in fresh:                  # a new value of the whole block: a new address, no WAR/WAW wait
                continue
            t = deps.war_waw(rg.tensor, rg.block, rg.lo, rg.hi, acc and rg.buffer == "psum")
            if t > ready:
                ready = t
            if acc and rg.buffer != "psum":     # a non-PSUM += reads its destination
                t = deps.raw(rg.tensor, rg.block, rg.lo, rg.hi)
                if t > raw:
                    raw = t
        if alias_prev:
            for rg in (*reads, *writes):
                tid = rg.tensor
                if tid in alias_prev and tid not in first_touch_done:
                    first_touch_done.add(tid)
                    if rename_alias and _defines_whole(tid, reads, writes, fresh):
                        continue            # defined whole by its first access: it need not reuse the old buffer
                    ready = max(ready, tensor_last_end.get(alias_prev[tid], 0.0))
        block = ins.attrs.get("no_reorder")
        if block is not None:        # (site, depth, entry) + the iterations of the loops around the `with`
            block = (block, tuple((uid, it) for uid, _, it in ins.loops[:block[1]]))
            t = block_end.get(block, NONE)
            if t > raw:
                raw = t              # a dependency edge: waited for like a result (dependent-issue overhead)
        if raw > ready:
            ready = raw

        engine = ins.engine
        if i in folded:                       # costs nothing; occupies no engine
            s = e = ready
            row[i] = _ENGINE_ROW.get(engine, 0)
            busy_end[i] = e
        elif i in reused:                     # the result is still on chip: nothing runs
            s = e = max(ready, end[reused[i]])
            if engine == "dma":
                transfers[i] = transfer_shape(ins)._replace(nbytes=0, hbm_read=0, hbm_write=0, touches_hbm=False)
            row[i] = -1
            busy_end[i] = e
        elif engine == "dma":
            shape = transfer_shape(ins)
            transfers[i] = shape
            q = queues.queue(ins)
            s = max(ready, queue_free[q])
            if seq_loops and seq_loops[i] and shape.hbm_read:
                for lp in seq_loops[i]:
                    s = max(s, hbm_written.get(lp, 0.0))
            s = issue.take(s)
            data_end = ledger.serve(s, shape.nbytes, transfer_rate(shape, hw, rate_cache), shape.touches_hbm)
            queue_free[q] = data_end
            e = max(s + latency, data_end)
            row[i] = 4 + q
            busy_end[i] = data_end
            if seq_loops and seq_loops[i] and shape.hbm_write:
                for lp in seq_loops[i]:
                    hbm_written[lp] = max(hbm_written.get(lp, 0.0), e)
        else:
            best = None
            for engine in (placement_choices(ins) if place else (engine,)):
                k = _ENGINE_ROW.get(engine)
                if k is None:
                    raise ValueError(f"instruction {i} ({ins.op}) runs on unknown engine {engine!r}")
                cost = compute_cost(ins, hw, engine)
                s = max(ready, engine_free[k])
                uses_sbuf = uses_psum = False
                if share_sbuf and (engine == "vector" or engine == "gpsimd"):
                    uses_sbuf = any(rg.buffer == "sbuf" for rg in reads) or any(rg.buffer == "sbuf" for rg in writes)
                    if uses_sbuf and sbuf_port > s:
                        s = sbuf_port
                if share_psum and (engine == "vector" or engine == "scalar"):
                    uses_psum = any(rg.buffer == "psum" for rg in reads) or any(rg.buffer == "psum" for rg in writes)
                    if uses_psum and psum_port > s:
                        s = psum_port
                over = cost.overhead_s
                if k and raw > NONE and raw >= engine_free[k] - _EPS:
                    over += dep_over[engine]
                e = s + cost.busy_s + over
                # the compiler's choice: the engine that finishes it first (the default on a tie)
                if best is None or e < best[1] - _EPS:
                    best = (s, e, k, over, uses_sbuf, uses_psum)
            s, e, k, over, uses_sbuf, uses_psum = best
            engine_free[k] = e
            if uses_sbuf:
                sbuf_port = e
            if uses_psum:
                psum_port = e
            row[i] = k
            busy_end[i] = e
            overhead[i] = over
        start[i] = s
        end[i] = e
        if block is not None and block_end.get(block, NONE) < e:
            block_end[block] = e

        # bookkeeping for later instructions
        for rg in reads:
            deps.record_read(rg.tensor, rg.block, rg.lo, rg.hi, e)
        for k, rg in enumerate(writes):
            deps.record_write(rg.tensor, rg.block, rg.lo, rg.hi, e, acc and rg.buffer == "psum", k in fresh)
        if alias_sources:
            for rg in (*reads, *writes):
                if rg.tensor in alias_sources and tensor_last_end.get(rg.tensor, 0.0) < e:
                    tensor_last_end[rg.tensor] = e
        for rid in access_ranges[i]:
            if range_last_end[rid] < e:
                range_last_end[rid] = e
        for rid in ends[i]:
            r = ranges[rid]
            pools[r.buffer].release(r.size, range_last_end[rid])

    return Schedule(hw, start, end, busy_end, row, overhead, spill_events, plan, n_queues, spill_row, transfers)


__all__ = ["COMPUTE_ENGINES", "DEPENDENT_OVERHEAD_ENGINES", "Schedule", "SpillEvent", "TraceAnalysis", "analyse",
           "schedule"]
