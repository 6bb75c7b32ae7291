"""``spills.py``'s kernels in today's standalone ``nki`` style (notebook 06).

What differs: NKI 0.2 removed block dimensions (``nl.ndarray((n, nl.par_dim(P), F))``), so the
all-at-once kernel holds its n tiles as a Python list of n tiles; loads and the activation write
into tiles the kernel allocates (``nisa.dma_copy``, ``dst=``). The working sets, and so the spills,
are the same. Written for accelopt_nb's teaching course.
"""
import nki
import nki.isa as nisa
import nki.language as nl

TILE = 2048       # float32 columns per tile: 8 KiB per partition


@nki.jit
def exp_all_at_once(x):
    parts, cols = x.shape
    n = cols // TILE
    out = nl.ndarray((parts, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    tiles = [nl.ndarray((parts, TILE), dtype=x.dtype, buffer=nl.sbuf) for _ in range(n)]
    for j in range(n):
        nisa.dma_copy(dst=tiles[j], src=x[0:parts, j * TILE:(j + 1) * TILE])
    for j in range(n):
        nisa.activation(dst=tiles[j], op=nl.exp, data=tiles[j])
    for j in range(n):
        nisa.dma_copy(dst=out[0:parts, j * TILE:(j + 1) * TILE], src=tiles[j])
    return out


@nki.jit
def exp_tile_by_tile(x):
    parts, cols = x.shape
    out = nl.ndarray((parts, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for j in nl.affine_range(cols // TILE):
        t = nl.ndarray((parts, TILE), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[0:parts, j * TILE:(j + 1) * TILE])
        y = nl.ndarray((parts, TILE), dtype=x.dtype, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.exp, data=t)
        nisa.dma_copy(dst=out[0:parts, j * TILE:(j + 1) * TILE], src=y)
    return out
