"""On-chip memory kept between launches: a finished launch's buffer arrays serve the next launch's buffers.

Trainium does not clear SBUF or PSUM between kernels, and the simulator never shows a buffer's unwritten
elements (they read as the fill value: validity, see ``tensor._fill_unwritten``), so an array a previous
launch used is as good as a new one. A new one is not free: the OS zeroes its pages on first touch, and
a search loop simulates the same shapes again and again (measured on ``benchmarks/kernels/arange_mask.py``,
whose six 50 MB buffers cost about 14 ms per launch that way; its NumPy math takes 24 ms).

Arrays go back only from a launch that finished (an error's traceback may still show the kernel's tiles),
and only up to :data:`KEEP_BYTES` per thread (simulations in other threads keep their own).
"""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

KEEP_BYTES = 1 << 30    # at most this much memory is kept between launches, per thread

_local = threading.local()


def _kept() -> dict[int, list[np.ndarray]]:
    kept = getattr(_local, "kept", None)
    if kept is None:
        kept = _local.kept = {}
    return kept


def take(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An array of ``shape`` and ``dtype`` whose contents are unspecified (``np.empty``'s contract)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    free = _kept().get(nbytes)
    raw = free.pop() if free else np.empty(nbytes, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def give_back(arrays: list[np.ndarray]) -> None:
    """Keep the arrays of a finished launch for the next (those ``take`` gave, no longer used)."""
    kept = _kept()
    total = sum(a.nbytes for free in kept.values() for a in free)
    for a in arrays:
        raw = a.base if a.base is not None else a
        while raw.base is not None:
            raw = raw.base
        if total + raw.nbytes > KEEP_BYTES:
            break
        kept.setdefault(raw.nbytes, []).append(raw)
        total += raw.nbytes


def release() -> None:
    """Let go of every kept array of this thread."""
    _kept().clear()
