"""On-chip memory pressure: live ranges of tiles, spills, and the capacity limit in time.

Block dimensions are logical (BLOCK): the physical footprint of an SBUF/PSUM tensor follows
the liveness of each block. A *live range* of one block (tensor, block index) runs from an
access that defines its value (a write that does not read it, after the old value has been
read) to the last access before the next such definition, in stream (program) order. Ranges
whose lifetimes do not overlap share space.

**Spills.** Sweeping the stream, when the live bytes per partition exceed capacity (SBUF:
usable bytes per partition; PSUM: 8 banks of 2 KiB, one bank at least per tile, since PSUM
tiles start on a bank boundary) the model spills the live ranges whose next use is farthest
away (Belady's choice, as a compiler's spiller approximates): a spill_save DMA to HBM when the
value changed since it was last loaded, and a spill_reload DMA before its next use. PSUM
overflows are treated the same way. Explicitly allocated tensors (``TensorInfo.allocation``,
nki.compiler ``sbuf``/``psum`` allocators) are pinned: they are never chosen as victims.

**Capacity in time.** :class:`TimedPool` limits how far producers can run ahead: a new live
range may only start once enough earlier ranges have ended in *time* (not just in stream
order). This is what bounds double/multi-buffering of tiles allocated inside loops.
"""
from __future__ import annotations

import heapq
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import product

from accelopt_nb.perf.hardware import HWConfig
from accelopt_nb.sim.trace import Region, TensorInfo, Trace

ON_CHIP = ("sbuf", "psum")


@dataclass(slots=True)
class LiveRange:
    id: int
    tensor: int
    block: int
    buffer: str
    size: int                  # footprint per partition (bytes), bank-rounded for PSUM
    nbytes: int                # bytes of the whole block tile (what a spill moves)
    start: int                 # stream index of the defining access
    end: int                   # stream index of the last access
    accesses: list[int] = field(default_factory=list)
    write_accesses: list[int] = field(default_factory=list)
    pinned: bool = False       # explicitly allocated (nki.compiler): stays resident, never a spill victim


@dataclass(slots=True)
class Spill:
    range_id: int
    trigger: int               # the instruction that needed the space
    reload_at: int             # the victim's next access (reloaded just before it)
    save: bool                 # False when an unchanged copy is already in HBM
    nbytes: int
    buffer: str


@dataclass
class MemoryPlan:
    """Per stream index (lists of length n, ``()`` where nothing happens)."""

    ranges: list[LiveRange]
    starts: list            # ranges defined at this instruction
    ends: list              # ranges whose last access is this instruction
    access_ranges: list     # ranges this instruction accesses
    spills_at: list         # spills triggered here (space needed by this instruction)
    reloads_at: list        # reloads needed before this instruction
    capacity: dict[str, int]
    peak_demand: dict[str, int]           # peak live bytes per partition without spilling
    peak_resident: dict[str, int]         # peak after spilling (<= capacity unless unavoidable)

    @property
    def spills(self) -> list[Spill]:
        return [s for lst in self.spills_at for s in lst]

    @property
    def spill_save_bytes(self) -> int:
        return sum(s.nbytes for s in self.spills if s.save)

    @property
    def spill_reload_bytes(self) -> int:
        return sum(s.nbytes for s in self.spills)


def _blocks(region: Region, info: TensorInfo) -> list[int]:
    """Flat block indices a region touches."""
    if info.par_axis == 0 or region.block >= 0:
        return [max(region.block, 0)]
    dims = info.shape[: info.par_axis]
    ranges = [range(max(lo, 0), min(hi, d)) for lo, hi, d in zip(region.lo, region.hi, dims)]
    out = []
    for idx in product(*ranges):
        flat = 0
        for i, d in zip(idx, dims):
            flat = flat * d + i
        out.append(flat)
    return out


def footprint(info: TensorInfo, hw: HWConfig) -> int:
    """Bytes per partition one block occupies (PSUM: whole banks)."""
    bpp = max(info.bytes_per_partition, 1)
    if info.buffer == "psum":
        bank = hw.psum_bank_bytes
        return -(-bpp // bank) * bank
    return bpp


def live_ranges(trace: Trace, hw: HWConfig) -> tuple[list[LiveRange], dict[int, list[int]]]:
    """Split every on-chip block's accesses into live ranges (see module docstring)."""
    # per block: list of (index, reads, writes)
    # per block: accesses (index, reads, writes); one instruction may appear twice (read, then write)
    per_block: dict[tuple[int, int], list[tuple[int, bool, bool]]] = {}
    tensors = trace.tensors
    for ins in trace.instructions:
        idx = ins.index
        acc = ins.accumulate
        for regions, rd, wr in ((ins.reads, True, False), (ins.writes, acc, True)):   # += reads the old value
            for r in regions:
                if r.buffer == "hbm":
                    continue
                if r.block >= 0:
                    blocks: "list[int] | tuple[int]" = (r.block,)
                else:
                    info = tensors.get(r.tensor)
                    if info is None:
                        continue
                    blocks = _blocks(r, info)
                for b in blocks:
                    lst = per_block.get((r.tensor, b))
                    if lst is None:
                        per_block[(r.tensor, b)] = [(idx, rd, wr)]
                    elif lst[-1][0] == idx:
                        last = lst[-1]
                        lst[-1] = (idx, last[1] or rd, last[2] or wr)
                    else:
                        lst.append((idx, rd, wr))

    ranges: list[LiveRange] = []
    access_ranges: dict[int, list[int]] = {}
    sizes: dict[int, tuple[int, int]] = {}
    for (tid, blk), accs in per_block.items():
        if tid not in sizes:
            info = tensors.get(tid)
            if info is None:
                continue
            sizes[tid] = (footprint(info, hw), info.block_bytes, info.allocation is not None)
        size, nbytes, pinned = sizes[tid]
        cur: LiveRange | None = None
        has_read = False
        for idx, rd, wr in accs:
            if cur is None or (wr and not rd and has_read):
                cur = LiveRange(len(ranges), tid, blk, tensors[tid].buffer, size, nbytes, idx, idx, pinned=pinned)
                ranges.append(cur)
                has_read = False
            cur.accesses.append(idx)
            cur.end = idx
            if wr:
                cur.write_accesses.append(idx)
            if rd:
                has_read = True
            access_ranges.setdefault(idx, []).append(cur.id)
    return ranges, access_ranges


def _per_index(n: int, pairs: dict[int, list]) -> list:
    out: list = [()] * n
    for i, v in pairs.items():
        out[i] = v
    return out


def plan_memory(trace: Trace, hw: HWConfig) -> MemoryPlan:
    """Live ranges plus the spills needed to keep each buffer within capacity."""
    n = len(trace.instructions)
    ranges, access_ranges = live_ranges(trace, hw)
    capacity = {"sbuf": hw.sbuf_usable_bytes_per_partition, "psum": hw.psum_banks * hw.psum_bank_bytes}
    starts: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    for r in ranges:
        starts.setdefault(r.start, []).append(r.id)
        ends.setdefault(r.end, []).append(r.id)

    spills_at: dict[int, list[Spill]] = {}
    reloads_at: dict[int, list[Spill]] = {}
    used = {"sbuf": 0, "psum": 0}
    demand = {"sbuf": 0, "psum": 0}
    peak_demand = {"sbuf": 0, "psum": 0}
    peak_resident = {"sbuf": 0, "psum": 0}
    resident: set[int] = set()
    restored_at = [-1] * len(ranges)          # index of the last reload (or -1: never spilled)
    heaps: dict[str, list[tuple[int, int]]] = {"sbuf": [], "psum": []}   # (-next_use, range id)
    next_use = [0] * len(ranges)

    for i in sorted(set(starts) | set(access_ranges) | set(ends)):
        # reload indices are accesses of the spilled range, so they are visited here
        grew = False
        for sp in reloads_at.get(i, ()):
            r = ranges[sp.range_id]
            resident.add(r.id)
            used[r.buffer] += r.size
            restored_at[r.id] = i
            grew = True
        for rid in starts.get(i, ()):
            r = ranges[rid]
            resident.add(rid)
            used[r.buffer] += r.size
            demand[r.buffer] += r.size
            next_use[rid] = i
            if not r.pinned:
                heapq.heappush(heaps[r.buffer], (-i, rid))
            grew = True
        if grew:
            for buf in ON_CHIP:
                if demand[buf] > peak_demand[buf]:
                    peak_demand[buf] = demand[buf]
                heap = heaps[buf]
                while used[buf] > capacity[buf] and heap:
                    neg, rid = heap[0]
                    if rid not in resident or -neg != next_use[rid]:
                        heapq.heappop(heap)          # stale entry
                        continue
                    if -neg <= i:
                        break                        # every resident range is used right here
                    heapq.heappop(heap)
                    r = ranges[rid]
                    resident.discard(rid)
                    used[buf] -= r.size
                    w = bisect_right(r.write_accesses, i - 1)
                    dirty = w > 0 and r.write_accesses[w - 1] > restored_at[rid]
                    spill = Spill(rid, i, -neg, dirty or restored_at[rid] < 0, r.nbytes, buf)
                    spills_at.setdefault(i, []).append(spill)
                    reloads_at.setdefault(-neg, []).append(spill)
                if used[buf] > peak_resident[buf]:
                    peak_resident[buf] = used[buf]
        for rid in access_ranges.get(i, ()):
            r = ranges[rid]
            if r.end > i and rid in resident and not r.pinned:
                k = bisect_right(r.accesses, i)
                next_use[rid] = r.accesses[k]
                heapq.heappush(heaps[r.buffer], (-next_use[rid], rid))
        for rid in ends.get(i, ()):
            r = ranges[rid]
            if rid in resident:
                resident.discard(rid)
                used[r.buffer] -= r.size
            demand[r.buffer] -= r.size
    return MemoryPlan(ranges, _per_index(n, starts), _per_index(n, ends), _per_index(n, access_ranges),
                      _per_index(n, spills_at), _per_index(n, reloads_at), capacity, peak_demand, peak_resident)


class TimedPool:
    """Capacity in time: an allocation waits until enough earlier ranges have been released.

    Releases are reclaimed in time order, as an allocator that recycles the oldest freed
    buffers would. Allocations that cannot fit even after every pending release (the stream
    itself overflows; :func:`plan_memory` adds spills for that) proceed without waiting.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.occupied = 0
        self._pending: list[tuple[float, int, int]] = []
        self._seq = 0

    def allocate(self, size: int, ready: float) -> float:
        t = ready
        while self.occupied + size > self.capacity and self._pending:
            rt, _, s = heapq.heappop(self._pending)
            self.occupied -= s
            if rt > t:
                t = rt
        self.occupied += size
        return t

    def release(self, size: int, at: float) -> None:
        self._seq += 1
        heapq.heappush(self._pending, (at, self._seq, size))


__all__ = ["LiveRange", "MemoryPlan", "Spill", "TimedPool", "footprint", "live_ranges", "plan_memory"]
