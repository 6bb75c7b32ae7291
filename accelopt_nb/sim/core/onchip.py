"""On-chip memory kept between launches: a finished launch's buffer arrays serve the next launch's buffers.

Trainium does not clear SBUF or PSUM between kernels, and the simulator never shows a buffer's unwritten
elements (they read as the fill value: validity, see ``tensor._fill_unwritten``), so an array a previous
launch used is as good as a new one. A new one is not free: the OS zeroes its pages on first touch, and
a search loop simulates the same shapes again and again (measured on ``benchmarks/kernels/arange_mask.py``,
whose six 50 MB buffers cost about 14 ms per launch that way; its NumPy math takes 24 ms).

Arrays go back only from a launch that finished (an error's traceback may still show the kernel's tiles),
and only up to :data:`KEEP_BYTES` per thread, the oldest let go first (simulations in other threads keep
their own).
"""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

KEEP_BYTES = 1 << 30    # at most this much memory is kept between launches, per thread (the newest kept)

_local = threading.local()


class _Kept:
    """Arrays by size, each with the count of arrays given back before it (the oldest go first)."""

    def __init__(self) -> None:
        self.by_size: dict[int, list[tuple[int, np.ndarray]]] = {}
        self.given = 0
        self.nbytes = 0


def _kept() -> _Kept:
    kept = getattr(_local, "kept", None)
    if kept is None:
        kept = _local.kept = _Kept()
    return kept


class Launch:
    """The memory one launch took and holds to the end: given back then (``give_back``)."""

    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []
        self.nbytes = 0


def take(shape: tuple[int, ...], dtype: Any, launch: Launch | None) -> np.ndarray:
    """An array of ``shape`` and ``dtype`` whose contents are unspecified (``np.empty``'s contract). With a
    ``launch``, its memory stays the launch's to the end and is given back then, up to :data:`KEEP_BYTES`
    (a buffer allocated in a loop body gets None: each iteration's dies with it)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    kept = _kept()
    free = kept.by_size.get(nbytes)
    if free:
        raw = free.pop()[1]
        kept.nbytes -= nbytes
        if not free:
            del kept.by_size[nbytes]
    else:
        raw = np.empty(nbytes, dtype=np.uint8)
    if launch is not None and launch.nbytes + nbytes <= KEEP_BYTES:
        launch.arrays.append(raw)
        launch.nbytes += nbytes
    return raw.view(dtype).reshape(shape)


def give_back(launch: Launch) -> None:
    """Keep the memory a finished launch took, for the next launch."""
    kept = _kept()
    for raw in launch.arrays:
        kept.by_size.setdefault(raw.nbytes, []).append((kept.given, raw))
        kept.given += 1
        kept.nbytes += raw.nbytes
    launch.arrays.clear()
    launch.nbytes = 0
    while kept.nbytes > KEEP_BYTES:   # let the oldest go
        size = min((free[0][0], size) for size, free in kept.by_size.items())[1]
        free = kept.by_size[size]
        free.pop(0)
        kept.nbytes -= size
        if not free:
            del kept.by_size[size]


def release() -> None:
    """Let go of every kept array of this thread."""
    _local.kept = _Kept()
