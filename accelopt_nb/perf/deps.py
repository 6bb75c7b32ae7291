"""Dependency tracking: the latest finish time of earlier accesses that overlap a region.

For every tensor the tracker keeps the boxes (``Region.lo``/``Region.hi``) of earlier writes and
reads with their finish times. An instruction must start after

* every earlier overlapping write of what it reads (RAW),
* every earlier overlapping write and read of what it writes (WAW, WAR).

Accumulating PSUM writes (``psum += matmul``) do not wait for each other: the order within an
accumulation group comes from TensorE executing in order.

A store stream can put ~10^4 disjoint boxes into one output tensor, so a set switches from
Python lists to NumPy arrays (vectorized overlap test) once it grows. An entry whose box lies
inside a newer entry's box is merged into it (keeping the later finish time), which keeps the
sets of tiles that are overwritten every loop iteration small.
"""
from __future__ import annotations

import numpy as np

NONE = -1.0          # "no dependency" finish time (all real times are >= 0)
_SMALL = 24          # above this many entries a set uses NumPy


class AccessSet:
    """Boxes with finish times for one tensor (writes or reads)."""

    __slots__ = ("los", "his", "ts", "accs", "L", "H", "T", "A", "n")

    def __init__(self) -> None:
        self.los: list[tuple[int, ...]] = []
        self.his: list[tuple[int, ...]] = []
        self.ts: list[float] = []
        self.accs: list[bool] = []
        self.L: np.ndarray | None = None     # NumPy mode: (cap, ndim) lo corners
        self.H: np.ndarray | None = None
        self.T: np.ndarray | None = None
        self.A: np.ndarray | None = None
        self.n = 0

    def __len__(self) -> int:
        return self.n

    # ---- queries -----------------------------------------------------------------------
    def latest_overlap(self, lo: tuple[int, ...], hi: tuple[int, ...], skip_acc: bool = False) -> float:
        """Latest finish time among entries overlapping [lo, hi) (NONE if there is none)."""
        if self.n == 0:
            return NONE
        if self.L is None:
            best = NONE
            for elo, ehi, et, ea in zip(self.los, self.his, self.ts, self.accs):
                if et <= best or (skip_acc and ea):
                    continue
                for a0, a1, b0, b1 in zip(elo, ehi, lo, hi):
                    if a1 <= b0 or b1 <= a0:
                        break
                else:
                    best = et
            return best
        n = self.n
        m = ((self.L[:n] < np.asarray(hi)) & (self.H[:n] > np.asarray(lo))).all(axis=1)
        if skip_acc:
            m &= ~self.A[:n]
        if not m.any():
            return NONE
        return float(self.T[:n][m].max())

    # ---- updates -----------------------------------------------------------------------
    def add(self, lo: tuple[int, ...], hi: tuple[int, ...], t: float, acc: bool = False) -> None:
        """Record an access; entries inside [lo, hi) are merged into it."""
        t = max(t, self.absorb(lo, hi))
        if self.L is None:
            self.los.append(lo)
            self.his.append(hi)
            self.ts.append(t)
            self.accs.append(acc)
            self.n += 1
            if self.n > _SMALL:
                self._to_numpy()
            return
        if self.n == len(self.T):
            self._grow()
        i = self.n
        self.L[i] = lo
        self.H[i] = hi
        self.T[i] = t
        self.A[i] = acc
        self.n += 1

    def absorb(self, lo: tuple[int, ...], hi: tuple[int, ...]) -> float:
        """Remove entries whose box lies inside [lo, hi); return their latest finish time."""
        if self.n == 0:
            return NONE
        if self.L is None:
            best = NONE
            keep = []
            for k, (elo, ehi) in enumerate(zip(self.los, self.his)):
                inside = all(b0 <= a0 and a1 <= b1 for a0, a1, b0, b1 in zip(elo, ehi, lo, hi))
                if inside:
                    best = max(best, self.ts[k])
                else:
                    keep.append(k)
            if len(keep) != self.n:
                self.los = [self.los[k] for k in keep]
                self.his = [self.his[k] for k in keep]
                self.ts = [self.ts[k] for k in keep]
                self.accs = [self.accs[k] for k in keep]
                self.n = len(keep)
            return best
        n = self.n
        inside = ((self.L[:n] >= np.asarray(lo)) & (self.H[:n] <= np.asarray(hi))).all(axis=1)
        if not inside.any():
            return NONE
        best = float(self.T[:n][inside].max())
        keep = ~inside
        k = int(keep.sum())
        self.L[:k] = self.L[:n][keep]
        self.H[:k] = self.H[:n][keep]
        self.T[:k] = self.T[:n][keep]
        self.A[:k] = self.A[:n][keep]
        self.n = k
        return best

    def _to_numpy(self) -> None:
        cap = 64
        while cap < self.n:
            cap *= 2
        d = len(self.los[0])
        self.L = np.zeros((cap, d), dtype=np.int64)
        self.H = np.zeros((cap, d), dtype=np.int64)
        self.T = np.zeros(cap, dtype=np.float64)
        self.A = np.zeros(cap, dtype=bool)
        self.L[: self.n] = self.los
        self.H[: self.n] = self.his
        self.T[: self.n] = self.ts
        self.A[: self.n] = self.accs
        self.los, self.his, self.ts, self.accs = [], [], [], []

    def _grow(self) -> None:
        cap = 2 * len(self.T)
        for name in ("L", "H", "T", "A"):
            old = getattr(self, name)
            new = np.zeros((cap,) + old.shape[1:], dtype=old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)


class DependencyTracker:
    """Per-(tensor, block) write and read sets; answers "when may this instruction start".

    Sets are keyed by the region's block index so that the blocks of one logical tensor (the
    usual way NKI kernels multi-buffer tiles) are checked independently; a region that spans
    several blocks (block index -1) is kept under its own key and checked against all of them.
    """

    def __init__(self, track_reads_of: set[int] | None = None) -> None:
        self.writes: dict[tuple[int, int], AccessSet] = {}
        self.reads: dict[tuple[int, int], AccessSet] = {}
        self._blocks: dict[int, set[int]] = {}     # tensor -> block keys in use
        # tensors written after some read: only their reads matter (WAR); None = track all
        self.track_reads_of = track_reads_of

    def _keys(self, tensor: int, block: int) -> tuple[tuple[int, int], ...]:
        if block < 0:
            return tuple((tensor, b) for b in self._blocks.get(tensor, ()))
        return (tensor, block), (tensor, -1)

    def raw(self, tensor: int, block: int, lo: tuple[int, ...], hi: tuple[int, ...]) -> float:
        t = NONE
        w = self.writes
        for key in self._keys(tensor, block):
            s = w.get(key)
            if s is not None:
                v = s.latest_overlap(lo, hi)
                if v > t:
                    t = v
        return t

    def war_waw(self, tensor: int, block: int, lo: tuple[int, ...], hi: tuple[int, ...], acc: bool) -> float:
        t = NONE
        w, r = self.writes, self.reads
        for key in self._keys(tensor, block):
            s = w.get(key)
            if s is not None:
                v = s.latest_overlap(lo, hi, skip_acc=acc)
                if v > t:
                    t = v
            s = r.get(key)
            if s is not None:
                v = s.latest_overlap(lo, hi)
                if v > t:
                    t = v
        return t

    def _set(self, table: dict, tensor: int, block: int) -> AccessSet:
        key = (tensor, block)
        s = table.get(key)
        if s is None:
            s = table[key] = AccessSet()
            self._blocks.setdefault(tensor, set()).add(block)
        return s

    def record_read(self, tensor: int, block: int, lo: tuple[int, ...], hi: tuple[int, ...], t: float) -> None:
        if self.track_reads_of is not None and tensor not in self.track_reads_of:
            return
        self._set(self.reads, tensor, block).add(lo, hi, t)

    def record_write(self, tensor: int, block: int, lo: tuple[int, ...], hi: tuple[int, ...], t: float,
                     acc: bool, fresh: bool = False) -> None:
        """``fresh``: the write defines a new value in a new place (renamed, schedule.py): the accesses it
        covers are dropped without ordering it after them."""
        s = self._set(self.writes, tensor, block)
        if not acc:
            # reads covered by this write are ordered before it (WAR), so it stands in for them
            r = self.reads.get((tensor, block))
            if r is not None:
                ta = r.absorb(lo, hi)
                if not fresh:
                    t = max(t, ta)
        if fresh:
            s.absorb(lo, hi)
        s.add(lo, hi, t, acc=acc)


__all__ = ["AccessSet", "DependencyTracker", "NONE"]
