"""Loop-carried write detection without per-element stamps: a log of the boxes a tensor was assigned.

Different iterations of one ``affine_range`` instance must not assign the same element (the hardware
may run them in any order). The exact check keeps, per element, the epoch of its last plain write
(``tensor._stamps`` as an int32 array): as large as the tensor and touched on every write. Compiler-style
kernels assign whole (possibly strided) boxes, so a tensor starts with a :class:`WriteLog` of
``(box, epoch)`` rows instead; a write that is not a box (a gather, a partly masked box) replays the log
into the per-element array and the tensor continues there.

The log reports every logged box that shares an element with the new one, not only the latest write of
each element. In ``error`` mode that is the same verdict: if an older write in an earlier iteration is
hidden behind a newer one from the current iteration, that newer write already met the older one and
raised. ``warn`` mode, which goes on after a conflict, keeps the per-element stamps.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from accelopt_nb.sim.indexing import broadcast_reps, compact

Box = tuple[tuple[int, int, int], ...]  # per axis (first, last + 1, step), tight


def box_of(key: tuple) -> Box | None:
    """The box a basic key selects; None unless it is ints and non-empty slices with step > 0."""
    out = []
    for k in key:
        if isinstance(k, slice):
            start, stop, step = k.start, k.stop, k.step
            if stop <= start or step <= 0:
                return None
            last = start + step * ((stop - 1 - start) // step)
            out.append((start, last + 1, step))
        else:
            out.append((k, k + 1, 1))
    return tuple(out)


EMPTY: Box = ((0, 0, 1),)  # marker: a write that keeps no element


def masked_box(key: tuple, mask: np.ndarray) -> Box | None:
    """The box of the elements a mask keeps of the box a basic ``key`` selects; None if they form no box.

    ``mask`` has the shape of ``t[key]`` (one axis per slice of ``key``). Returns :data:`EMPTY` when
    the mask keeps nothing.
    """
    c = compact(mask)
    kept = int(np.count_nonzero(c))
    if kept == 0:
        return EMPTY
    kept *= broadcast_reps(c.shape, mask.shape)
    spans = []
    size = 1
    for d in range(c.ndim):
        others = tuple(x for x in range(c.ndim) if x != d)
        idx = np.flatnonzero(c.any(axis=others) if others else c)
        first, last = (0, mask.shape[d] - 1) if c.shape[d] == 1 else (int(idx[0]), int(idx[-1]))
        spans.append((first, last))
        size *= last - first + 1
    if size != kept:
        return None
    out = []
    spans_left = iter(spans)
    for k in key:
        if isinstance(k, slice):
            first, last = next(spans_left)
            out.append((k.start + k.step * first, k.start + k.step * last + 1, k.step))
        else:
            out.append((k, k + 1, 1))
    return tuple(out)


def _axis_meets(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    """Whether two arithmetic progressions ``range(*a)`` and ``range(*b)`` share an element."""
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    if lo >= hi:
        return False
    if a[2] == 1 and b[2] == 1:
        return True
    return bool(np.intersect1d(np.arange(lo + (a[0] - lo) % a[2], hi, a[2]),
                               np.arange(lo + (b[0] - lo) % b[2], hi, b[2]), assume_unique=True).size)


class WriteLog:
    """The boxes one tensor was assigned inside affine loops, in epoch order.

    Compiler-style kernels write one tile per instruction into a tensor with thousands of tiles, so a scan of
    every logged box per write is quadratic. The rows are also bucketed by their coordinates on the *key axes*
    (the axes on which the first logged box is a single element, usually the block axes): a box that is a single
    element on every key axis can only meet boxes of its own bucket and the boxes wide on some key axis.
    """

    __slots__ = ("lo", "hi", "step", "epoch", "n", "boxes", "key_axes", "buckets", "wide")

    def __init__(self, ndim: int) -> None:
        cap = 16
        self.lo = np.empty((cap, ndim), dtype=np.int64)
        self.hi = np.empty((cap, ndim), dtype=np.int64)
        self.step = np.empty((cap, ndim), dtype=np.int64)
        self.epoch = np.empty(cap, dtype=np.int64)
        self.n = 0
        self.boxes: list[Box] = []                          # the rows as tuples, for one-by-one tests
        self.key_axes: tuple[int, ...] | None = None      # fixed by the first box
        self.buckets: dict[tuple[int, ...], list[int]] = {}  # key-axis coordinates -> rows
        self.wide: list[int] = []                           # rows wide on some key axis

    def _bucket(self, box: Box) -> tuple[int, ...] | None:
        coords = []
        for d in self.key_axes or ():
            first, stop, _ = box[d]
            if stop - first != 1:
                return None
            coords.append(first)
        return tuple(coords)

    def meeting_epochs(self, box: Box, since: int) -> np.ndarray:
        """Epochs (>= ``since``) of the logged boxes that share at least one element with ``box``."""
        n = self.n
        first = int(np.searchsorted(self.epoch[:n], since, side="left"))
        if first == n:
            return self.epoch[:0]
        coords = None if self.key_axes is None else self._bucket(box)
        if coords is not None:
            rows = [i for i in self.buckets.get(coords, ()) if i >= first] + [i for i in self.wide if i >= first]
            if len(rows) <= 64:  # few candidates: test them one by one
                return np.array([self.epoch[i] for i in sorted(rows) if self._meets(i, box)], dtype=np.int64)
        b_lo = np.array([a[0] for a in box], dtype=np.int64)
        b_hi = np.array([a[1] for a in box], dtype=np.int64)
        lo, hi = self.lo[first:n], self.hi[first:n]
        idx = np.flatnonzero(np.all((lo < b_hi) & (hi > b_lo), axis=1))
        if idx.size == 0:
            return self.epoch[:0]
        strided = any(a[2] != 1 for a in box) or bool((self.step[first:n][idx] != 1).any())
        if strided:  # bounding boxes meet; the progressions may still interleave
            idx = np.array([i for i in idx.tolist() if self._meets(first + i, box)], dtype=np.int64)
            if idx.size == 0:
                return self.epoch[:0]
        return self.epoch[first:n][idx]

    def _meets(self, i: int, box: Box) -> bool:
        for a, b in zip(self.boxes[i], box):
            if a[0] >= b[1] or b[0] >= a[1] or ((a[2] != 1 or b[2] != 1) and not _axis_meets(a, b)):
                return False
        return True

    def add(self, box: Box, epoch: int) -> None:
        if self.n == len(self.epoch):
            self.lo, self.hi, self.step, self.epoch = (np.concatenate([a, np.empty_like(a)])
                                                       for a in (self.lo, self.hi, self.step, self.epoch))
        i = self.n
        self.lo[i] = [a[0] for a in box]
        self.hi[i] = [a[1] for a in box]
        self.step[i] = [a[2] for a in box]
        self.epoch[i] = epoch
        self.n += 1
        self.boxes.append(box)
        if self.key_axes is None:
            self.key_axes = tuple(d for d, a in enumerate(box) if a[1] - a[0] == 1)
        coords = self._bucket(box)
        if coords is None:
            self.wide.append(i)
        else:
            self.buckets.setdefault(coords, []).append(i)

    def stamps(self, shape: tuple[int, ...]) -> np.ndarray:
        """The per-element array of last-write epochs that the logged writes leave."""
        out = np.zeros(shape, dtype=np.int32)  # epochs stay far below 2**31
        for i in range(self.n):
            key: tuple[Any, ...] = tuple(slice(int(a), int(b), int(s))
                                         for a, b, s in zip(self.lo[i], self.hi[i], self.step[i]))
            out[key] = self.epoch[i]
        return out
