"""Loop-carried write detection without per-element stamps: a log of the boxes a tensor was assigned.

Different iterations of one ``affine_range`` instance must not assign the same element (the hardware
may run them in any order). The exact check keeps, per element, the epoch of its last plain write
(``Tensor._stamps`` as an int32 array): as large as the tensor and touched on every write. Compiler-style
kernels assign whole (possibly strided) boxes, so a tensor starts with a :class:`WriteLog` of
``(box, epoch)`` rows instead; a write that is not a box (a gather, a partly masked box) replays the log
into the per-element array and the tensor continues there.

The log reports every logged box that shares an element with the new one, not only the latest write of
each element. In ``error`` mode that is the same verdict: if an older write in an earlier iteration is
hidden behind a newer one from the current iteration, that newer write already met the older one and
raised. ``warn`` mode, which goes on after a conflict, keeps the per-element stamps.
"""
from __future__ import annotations

import bisect

import numpy as np

from accelopt_nb.sim.core.indexing import broadcast_reps, compact, memo

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
    spans = mask_spans(mask)
    if spans is None or spans is EMPTY:
        return spans
    out = []
    spans_left = iter(spans)
    for k in key:
        if isinstance(k, slice):
            first, last = next(spans_left)
            out.append((k.start + k.step * first, k.start + k.step * last + 1, k.step))
        else:
            out.append((k, k + 1, 1))
    return tuple(out)


def mask_spans(mask: np.ndarray) -> tuple[tuple[int, int], ...] | Box | None:
    """Per axis of ``mask`` the (first, last) position of the box the mask keeps; :data:`EMPTY` when it
    keeps nothing, None when the kept elements form no box.

    It depends on the mask alone, so a kept (read-only) mask answers once for every write of its tile.
    """
    return memo(mask, "spans", _spans, mask)


def _spans(mask: np.ndarray) -> tuple[tuple[int, int], ...] | Box | None:
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
    return tuple(spans) if size == kept else None


def _axis_meets(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    """Whether two arithmetic progressions ``range(*a)`` and ``range(*b)`` share an element."""
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    if lo >= hi:
        return False
    if a[2] == 1 and b[2] == 1:
        return True
    return bool(np.intersect1d(np.arange(lo + (a[0] - lo) % a[2], hi, a[2]),
                               np.arange(lo + (b[0] - lo) % b[2], hi, b[2]), assume_unique=True).size)


def _meets(a: Box, b: Box) -> bool:
    """Whether two boxes share an element."""
    for x, y in zip(a, b):
        if x[0] >= y[1] or y[0] >= x[1] or ((x[2] != 1 or y[2] != 1) and not _axis_meets(x, y)):
            return False
    return True


def _contains(a: Box, b: Box) -> bool:
    """Whether box ``a`` holds every element of box ``b``."""
    for x, y in zip(a, b):
        if y[0] < x[0] or y[1] > x[1] or (y[0] - x[0]) % x[2] or (y[1] - y[0] > 1 and y[2] % x[2]):
            return False
    return True


class BoxBuckets:
    """Rows of boxes, bucketed so that a box finds the rows that may meet it without scanning them all.

    Compiler-style kernels write one tile per instruction into a tensor with thousands of tiles. The first box
    fixes the cells: its extent on every axis in an HBM tensor (``tiled``: its tiles, also along a batch axis
    of single elements) or where it has no single-element axis, else its single elements on the axes where it
    has one (the block axes of an on-chip buffer). A box inside one cell can only meet the boxes of its own
    cell and the boxes that span several cells (``wide``).
    """

    __slots__ = ("cells", "buckets", "wide", "rows", "tiled")

    def __init__(self, tiled: bool = False) -> None:
        self.cells: tuple[int, ...] | None = None            # cell extent per axis (0: not cut), by the first box
        self.buckets: dict[tuple[int, ...], list[int]] = {}  # cell coordinates -> rows
        self.wide: list[int] = []                           # rows spanning several cells on some axis
        self.rows = 0
        # an HBM tensor, or a first box without a single-element axis: a box spanning several tiles is asked
        # against every row (a wide read of a tiled output), never sent to the per-element array. Our bmm's output
        # (B, M, N) bucketed only by its batch axis left 256 rows per bucket, checked by arrays: 0.25 s of 1.3
        self.tiled = tiled

    def _coords(self, box: Box) -> tuple[int, ...] | None:
        coords = []
        for (first, stop, _), size in zip(box, self.cells or ()):
            if not size:
                continue
            cell = first // size
            if (stop - 1) // size != cell:
                return None
            coords.append(cell)
        return tuple(coords)

    def add(self, row: int, box: Box) -> None:
        if self.cells is None:
            extents = [max(1, a[1] - a[0]) for a in box]
            self.tiled = self.tiled or 1 not in extents
            self.cells = tuple(extents) if self.tiled else tuple(1 if n == 1 else 0 for n in extents)
        self.rows += 1
        coords = self._coords(box)
        if coords is None:
            self.wide.append(row)
        else:
            self.buckets.setdefault(coords, []).append(row)

    def candidates(self, box: Box) -> list[int] | None:
        """The rows that may meet ``box``, in row order; None when every row may."""
        coords = None if self.cells is None else self._coords(box)
        if coords is None:
            return list(range(self.rows)) if self.tiled else None
        bucket, wide = self.buckets.get(coords, ()), self.wide
        return sorted([*bucket, *wide]) if bucket and wide else list(bucket or wide)


class WriteLog:
    """The boxes one tensor was assigned inside affine loops, in epoch order (bucketed: see BoxBuckets).

    Rows are Python lists (a replayed iteration adds several per instruction); the arrays for testing many
    rows at once are built when a box has too many candidates to test one by one."""

    __slots__ = ("boxes", "epochs", "index", "_arrays", "_filled")

    def __init__(self, ndim: int, tiled: bool = False) -> None:
        self.boxes: list[Box] = []
        self.epochs: list[int] = []    # ascending: a row's epoch is the run's epoch when it was written
        self.index = BoxBuckets(tiled)   # tiled: an HBM tensor's (see BoxBuckets)
        self._arrays = tuple(np.empty((16, ndim), dtype=np.int64) for _ in range(3)) + (np.empty(16, np.int64),)
        self._filled = 0               # rows copied into the arrays so far

    def _rows_as_arrays(self) -> tuple[np.ndarray, ...]:
        """(lo, hi, step, epoch) of every row: the rows added since the last call are copied in (the arrays
        grow by doubling, so a check after every add stays linear overall)."""
        n, have = len(self.boxes), self._filled
        if have < n:
            if n > len(self._arrays[3]):
                cap = max(n, 2 * len(self._arrays[3]))
                self._arrays = tuple(np.concatenate([a[:have], np.empty((cap - have,) + a.shape[1:], a.dtype)])
                                     for a in self._arrays)
            lo, hi, step, epoch = self._arrays
            new = np.array(self.boxes[have:], dtype=np.int64)   # (rows, ndim, 3)
            lo[have:n], hi[have:n], step[have:n] = new[:, :, 0], new[:, :, 1], new[:, :, 2]
            epoch[have:n] = self.epochs[have:]
            self._filled = n
        return tuple(a[:n] for a in self._arrays)

    def meeting_epochs(self, box: Box, since: int) -> np.ndarray:
        """Epochs (>= ``since``) of the logged boxes that share at least one element with ``box``."""
        n = len(self.boxes)
        first = bisect.bisect_left(self.epochs, since)
        if first == n:
            return _NO_EPOCHS
        rows = self.index.candidates(box)
        if rows is not None:
            rows = [i for i in rows if i >= first]
            if not rows:   # a compiler-style tile's first write: its bucket is empty
                return _NO_EPOCHS
            if len(rows) <= 64:  # few candidates: test them one by one
                return np.array([self.epochs[i] for i in rows if _meets(self.boxes[i], box)], dtype=np.int64)
        lo, hi, step, epoch = (a[first:n] for a in self._rows_as_arrays())
        b_lo = np.array([a[0] for a in box], dtype=np.int64)
        b_hi = np.array([a[1] for a in box], dtype=np.int64)
        idx = np.flatnonzero(np.all((lo < b_hi) & (hi > b_lo), axis=1))
        if idx.size == 0:
            return _NO_EPOCHS
        strided = any(a[2] != 1 for a in box) or bool((step[idx] != 1).any())
        if strided:  # bounding boxes meet; the progressions may still interleave
            idx = np.array([i for i in idx.tolist() if _meets(self.boxes[first + i], box)], dtype=np.int64)
            if idx.size == 0:
                return _NO_EPOCHS
        return epoch[idx]

    def add(self, box: Box, epoch: int) -> None:
        self.index.add(len(self.boxes), box)
        self.boxes.append(box)
        self.epochs.append(epoch)

    def stamps(self, shape: tuple[int, ...]) -> np.ndarray:
        """The per-element array of last-write epochs that the logged writes leave."""
        out = np.zeros(shape, dtype=np.int32)  # epochs stay far below 2**31
        for box, epoch in zip(self.boxes, self.epochs):
            out[tuple(slice(a, b, s) for a, b, s in box)] = epoch
        return out


_NO_EPOCHS = np.empty(0, dtype=np.int64)
_NO_EPOCHS.flags.writeable = False


def paint(out: np.ndarray, written: Box, box: Box) -> None:
    """Mark in ``out`` (the validity of an unstrided ``box``) the elements of a ``written`` box."""
    if not _meets(written, box):
        return
    key = []
    for (w0, w1, ws), (b0, b1, _) in zip(written, box):
        first = w0 + -(-(max(w0, b0) - w0) // ws) * ws   # the written progression's first element >= b0
        key.append(slice(first - b0, min(w1, b1) - b0, ws))
    out[tuple(key)] = True


class Cover:
    """The elements of a tensor written so far, as the boxes its writes assigned (validity without a bool
    array as large as the tensor). ``covers`` answers for a box inside one written box, ``local`` paints the
    validity of an unstrided box; any other question is for the per-element array that ``mask`` builds."""

    __slots__ = ("boxes", "index")

    def __init__(self) -> None:
        self.boxes: list[Box] = []
        self.index = BoxBuckets()

    def add(self, box: Box) -> None:
        self.index.add(len(self.boxes), box)
        self.boxes.append(box)

    # a box wide on the key axes (e.g. a whole tensor) meets every row: past this many rows, ask the array
    SCAN_LIMIT = 256

    def _rows(self, box: Box) -> list[int] | range | None:
        rows = self.index.candidates(box)
        if rows is None:
            return range(len(self.boxes)) if len(self.boxes) <= self.SCAN_LIMIT else None
        return rows

    def covers(self, box: Box) -> bool:
        rows = self._rows(box)
        return rows is not None and any(_contains(self.boxes[i], box) for i in rows)

    def local(self, box: Box) -> np.ndarray | None:
        """Validity of the elements of an unstrided ``box`` (one axis per box axis), painted from the written
        boxes that meet it; None for a strided ``box`` or one that meets too many rows to scan."""
        rows = self._rows(box)
        if rows is None or any(a[2] != 1 and a[1] - a[0] > 1 for a in box):
            return None
        out = np.zeros(tuple(a[1] - a[0] for a in box), dtype=bool)
        for i in rows:
            paint(out, self.boxes[i], box)
        return out

    def complete(self, shape: tuple[int, ...]) -> bool:
        """Whether the boxes cover every element of a tensor of ``shape``, decided on the grid their bounds cut
        it into (each cell inside a box or outside all of them); False when a box is strided or the grid would
        be large, where ``mask`` decides."""
        if not self.boxes:
            return 0 in shape
        cuts = [{0, n} for n in shape]
        for box in self.boxes:
            for c, (lo, hi, step) in zip(cuts, box):
                if step != 1 and hi - lo > 1:
                    return False
                c.add(lo)
                c.add(hi)
        edges = [sorted(c) for c in cuts]
        if np.prod([len(e) - 1 for e in edges], dtype=np.float64) > 1 << 20:
            return False
        where = [{v: k for k, v in enumerate(e)} for e in edges]
        grid = np.zeros(tuple(len(e) - 1 for e in edges), dtype=bool)
        for box in self.boxes:
            grid[tuple(slice(w[lo], w[hi]) for w, (lo, hi, _) in zip(where, box))] = True
        return bool(grid.all())

    def mask(self, shape: tuple[int, ...]) -> np.ndarray:
        """The per-element validity the boxes leave."""
        out = np.zeros(shape, dtype=bool)
        for box in self.boxes:
            out[tuple(slice(a, b, s) for a, b, s in box)] = True
        return out
