"""DMA timing: queues, per-transfer efficiency, and shared bandwidth.

Model (sources in nki_hw_facts.md §3 "DMA efficiency rules"):

* A NeuronCore has 16 DMA engines; each serves 8 partitions, so a 128-partition transfer
  drives all 16 engines and a 4-partition transfer one (DMABW).
* Transfers go to hardware queues that are FIFO. The model gives every DMA *statement* of the
  kernel (source file and line, and the HBM tensor it moves) its own queue, spread round-robin
  over the 16 queues in order of first use: a load inside a loop is one FIFO stream, and
  independent load statements proceed in parallel. Spill traffic has its own queue.
* One queue moves a transfer at ``efficiency x engine bandwidth x engines``. Since v3 the efficiency
  is that of packets: each descriptor (one contiguous run: the shorter of the bytes per partition
  and the HBM-side run) costs a fixed ``dma_packet_overhead_s`` of engine time besides its data
  time. The DMAOV curve measures one transfer in isolation, so at small sizes it is the ~1.3 us
  fixed latency (charged separately below, overlapped across transfers in flight); its >= 4 KiB
  points, where that latency is amortized, give the per-packet cost (~10 ns on trn1). With
  ``dma_packet_overhead_s: 0`` the curve itself is the throughput (model v2).
* Completion comes no earlier than the fixed ~1.3 µs per transfer (descriptor, sync and
  semaphore, DMABW); the queue itself is busy only while moving data, so fixed latencies of
  back-to-back transfers overlap ("pipelined").
* The engines start one transfer at a time (ARCH1: "each DMA engine can process one DMA transfer at a
  time"; DMAOV: every transfer ends with a 4 B semaphore write by all 16 engines), so transfers take
  turns: at most one starts per ``hw.dma_issue_interval`` (:class:`IssueSlots`; the DGE's cost in a DGE build). It bounds loops of tiny DMAs.
* All queues drive the same 16 engines, so together they move at most the engines' achievable
  bandwidth (272 GB/s on trn1) and, for transfers touching HBM, the per-NeuronCore HBM bandwidth:
  a fluid ledger in time bins serves each transfer at its queue rate as far as the remaining
  capacity of each bin allows.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from accelopt_nb.perf.hardware import HWConfig
from accelopt_nb.sim.trace import Instruction

SPILL_QUEUE = "spill"


class TransferShape(NamedTuple):
    nbytes: int
    partitions: int
    bytes_per_partition: float
    run_bytes: float            # bytes per descriptor (min of bytes/partition and contiguous run)
    touches_hbm: bool
    hbm_read: int
    hbm_write: int
    transpose: bool


def transfer_shape(ins: Instruction) -> TransferShape:
    a = ins.attrs
    hbm_read = sum(r.nbytes for r in ins.reads if r.buffer == "hbm")
    hbm_write = sum(w.nbytes for w in ins.writes if w.buffer == "hbm")
    if ins.accumulate:   # read-modify-write DMA (dst_rmw_op) also reads its HBM destination
        hbm_read += hbm_write
    nbytes = int(a.get("bytes") or max(sum(r.nbytes for r in ins.reads), sum(w.nbytes for w in ins.writes), 1))
    parts = max(int(a.get("partitions") or ins.partitions or 1), 1)
    bpp = float(a.get("bytes_per_partition") or nbytes / parts)
    contig = a.get("contiguous_bytes")
    run = bpp if not contig else min(bpp, float(contig))
    return TransferShape(nbytes, parts, bpp, max(run, 1.0), bool(hbm_read or hbm_write), hbm_read, hbm_write,
                         bool(a.get("transpose")) or ins.op == "dma_transpose")


def transfer_rate(shape: TransferShape, hw: HWConfig, cache: dict | None = None) -> float:
    """Bytes per second one queue moves this transfer at, on an otherwise idle machine.

    ``cache`` (a dict owned by the caller, for one ``hw``) memoizes the curve lookups.
    """
    if cache is None:
        return _rate(shape, hw)
    key = (shape.partitions, shape.bytes_per_partition, shape.run_bytes, shape.transpose)
    rate = cache.get(key)
    if rate is None:
        rate = cache[key] = _rate(shape, hw)
    return rate


def _rate(shape: TransferShape, hw: HWConfig) -> float:
    engines = min(hw.dma_engines, max(1, math.ceil(shape.partitions / hw.dma_partitions_per_engine)))
    curve = hw.dma_packet_efficiency if hw.dma_packet_overhead_s > 0 else hw.dma_efficiency_at
    if shape.transpose and hw.dma_transpose_efficiency is not None:
        eff = hw.dma_transpose_efficiency * curve(shape.bytes_per_partition)
    else:
        eff = curve(shape.run_bytes)
    return eff * engines * hw.dma_engine_bandwidth


class QueueAssigner:
    """Maps each DMA statement to one of the hardware queues, round-robin by first use."""

    def __init__(self, hw: HWConfig) -> None:
        self.n = hw.dma_queues
        self._keys: dict[tuple, int] = {}

    def queue(self, ins: Instruction) -> int:
        if "queue" in ins.attrs:
            return int(ins.attrs["queue"]) % self.n
        hbm = next((r.tensor for r in (*ins.reads, *ins.writes) if r.buffer == "hbm"), None)
        key = (ins.file, ins.line, ins.op, hbm) if ins.line is not None else (ins.op, hbm)
        q = self._keys.get(key)
        if q is None:
            q = self._keys[key] = len(self._keys) % self.n
        return q


class BandwidthLedger:
    """Fluid sharing of the DMA engines' and HBM bandwidth, in fixed time bins."""

    def __init__(self, hw: HWConfig, bin_s: float = 0.5e-6) -> None:
        self.dt = bin_s
        self.dma_cap = hw.dma_bandwidth * bin_s
        self.hbm_cap = hw.hbm_bandwidth * bin_s
        self.dma = np.zeros(4096)
        self.hbm = np.zeros(4096)

    def _ensure(self, i: int) -> None:
        if i >= len(self.dma):
            size = max(2 * len(self.dma), i + 1)
            self.dma = np.concatenate([self.dma, np.zeros(size - len(self.dma))])
            self.hbm = np.concatenate([self.hbm, np.zeros(size - len(self.hbm))])

    def serve(self, start: float, nbytes: float, rate: float, hbm: bool) -> float:
        """Move ``nbytes`` from ``start`` at up to ``rate`` B/s; returns when the last byte moves."""
        if nbytes <= 0:
            return start
        dt = self.dt
        remaining = float(nbytes)
        t = start
        i = int(t / dt)
        dma, hbm_used = self.dma, self.hbm
        while True:
            if i >= len(dma):
                self._ensure(i)
                dma, hbm_used = self.dma, self.hbm
            bin_end = (i + 1) * dt
            span = bin_end - t
            want = rate * span
            avail = self.dma_cap - dma[i]
            if hbm:
                avail = min(avail, self.hbm_cap - hbm_used[i])
            if avail <= 0:
                i += 1
                t = bin_end
                continue
            if remaining <= want and remaining <= avail:
                dma[i] += remaining
                if hbm:
                    hbm_used[i] += remaining
                return t + remaining / rate
            take = min(want, avail)
            dma[i] += take
            if hbm:
                hbm_used[i] += take
            remaining -= take
            i += 1
            t = bin_end


class IssueSlots:
    """The DMA engines start one transfer per ``interval`` seconds, all queues together, in any order.

    Time is cut into slots of ``interval``; a transfer ready at ``t`` takes the first free slot at or
    after ``t`` (a later-ready transfer earlier in program order does not block an earlier-ready one:
    the queues are served round robin, DMAOV). Next-free lookup with path compression.
    """

    def __init__(self, interval: float) -> None:
        self.dt = interval
        self._next: dict[int, int] = {}      # taken slot -> a candidate for the next free one

    def _find(self, j: int) -> int:
        path = []
        nxt = self._next
        while j in nxt:
            path.append(j)
            j = nxt[j]
        for k in path:
            nxt[k] = j
        return j

    def take(self, ready: float) -> float:
        """Start time of a transfer ready at ``ready``."""
        if self.dt <= 0:
            return ready
        j = self._find(int(ready / self.dt))
        self._next[j] = j + 1
        return max(ready, j * self.dt)


__all__ = ["BandwidthLedger", "IssueSlots", "QueueAssigner", "SPILL_QUEUE", "TransferShape", "transfer_rate", "transfer_shape"]
