"""What ``kernels/arange_mask.py`` costs in NumPy alone: the floor under any simulator of it.

The sim_speed goal compares the simulator with NumPy computing the same math (``x * sigmoid(g) + r``,
four passes over the data). The kernel does more than that math: it copies its three inputs into
on-chip buffers, keeps every intermediate in a full-size buffer of its own (six, each that memory's
first touch) and stores the result. This script times, side by side in one process (CPU seconds,
best of ``--repeat`` interleaved rounds):

* ``math``: the math (sim_speed's NumPy column);
* ``tiles``: the kernel's own data movement in plain NumPy, tile by tile as the kernel issues it
  (what a simulator running each instruction as one NumPy call cannot go below);
* ``tiles_kept``: ``tiles`` with its six buffers allocated once and used by every call, as the simulator
  keeps on-chip memory between launches (``accelopt_nb/sim/core/onchip.py``): no fresh pages to fault in;
* ``blocks``: the same data movement with each instruction done for all full tiles in one NumPy
  call (the ragged edge tiles skipped, so a little less work than the kernel).

    python benchmarks/arange_mask_floor.py [--shape 4000x3000] [--repeat 3] [--heap as-is|reuse]
"""
from __future__ import annotations

import argparse
import gc
import time

import numpy as np

from sim_speed import HEAPS, pin_heap

TP, TF = 128, 512   # the kernel's tile


def math(x: np.ndarray, g: np.ndarray, r: np.ndarray) -> np.ndarray:
    return x / (np.float32(1) + np.exp(-g)) + r


def _sigmoid_into(src: np.ndarray, dst: np.ndarray) -> None:
    np.negative(src, out=dst)
    np.exp(dst, out=dst)
    dst += np.float32(1)
    np.reciprocal(dst, out=dst)


def _buffers(m: int, n: int) -> list[np.ndarray]:
    mt, nt = -(-m // TP), -(-n // TF)
    return [np.empty((mt, nt, TP, TF), np.float32) for _ in range(6)]


def tiles(x: np.ndarray, g: np.ndarray, r: np.ndarray, buffers: list[np.ndarray] | None = None) -> np.ndarray:
    m, n = x.shape
    xs, gs, rs, sg, xg, ys = buffers or _buffers(m, n)
    out = np.empty((m, n), np.float32)
    for i in range(xs.shape[0]):
        for j in range(xs.shape[1]):
            rows, cols = min(TP, m - TP * i), min(TF, n - TF * j)
            src = (slice(TP * i, TP * i + rows), slice(TF * j, TF * j + cols))
            blk = (i, j, slice(0, rows), slice(0, cols))
            xs[blk], gs[blk], rs[blk] = x[src], g[src], r[src]
            _sigmoid_into(gs[blk], sg[blk])
            np.multiply(xs[blk], sg[blk], out=xg[blk])
            np.add(xg[blk], rs[blk], out=ys[blk])
            out[src] = ys[blk]
    return out


def blocks(x: np.ndarray, g: np.ndarray, r: np.ndarray) -> np.ndarray:
    m, n = x.shape
    xs, gs, rs, sg, xg, ys = _buffers(m, n)
    out = np.empty((m, n), np.float32)
    fm, fn = m // TP, n // TF
    full = (slice(0, fm), slice(0, fn))

    def tiled(a: np.ndarray) -> np.ndarray:   # (fm, fn, TP, TF) view of the full tiles of an (m, n) array
        return a[:fm * TP, :fn * TF].reshape(fm, TP, fn, TF).transpose(0, 2, 1, 3)

    xs[full], gs[full], rs[full] = tiled(x), tiled(g), tiled(r)
    _sigmoid_into(gs[full], sg[full])
    np.multiply(xs[full], sg[full], out=xg[full])
    np.add(xg[full], rs[full], out=ys[full])
    tiled(out)[...] = ys[full]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="4000x3000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--heap", choices=["as-is", *HEAPS], default="as-is", help="see sim_speed.pin_heap")
    args = ap.parse_args()
    heap = pin_heap(args.heap)
    m, n = (int(v) for v in args.shape.lower().split("x"))
    rng = np.random.default_rng(0)
    x, g, r = (rng.standard_normal((m, n), dtype=np.float32) for _ in range(3))
    assert np.allclose(tiles(x, g, r), math(x, g, r), rtol=1e-5, atol=1e-6)
    kept = _buffers(m, n)

    def tiles_kept(x: np.ndarray, g: np.ndarray, r: np.ndarray) -> np.ndarray:
        return tiles(x, g, r, kept)

    tiles_kept(x, g, r)   # the buffers' pages, touched once
    best: dict[str, float] = {}
    for _ in range(args.repeat):
        for fn in (math, tiles, tiles_kept, blocks):
            gc.collect()
            t0 = time.process_time()
            fn(x, g, r)
            t = time.process_time() - t0
            best[fn.__name__] = min(t, best.get(fn.__name__, t))
    base = best["math"]
    print(f"# arange_mask {m}x{n}: NumPy CPU seconds, best of {args.repeat} interleaved rounds, {heap}")
    for name, t in best.items():
        print(f"{name:10s} {t:7.3f} s  {t / base:5.2f}x the math")


if __name__ == "__main__":
    main()
