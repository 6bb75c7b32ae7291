"""SBUF capacity and spills (notebook 06): exp(x) with every tile on chip at once, or one tile at a time.

``exp_all_at_once`` loads all of x into one SBUF buffer, then computes, then stores: its working
set is the whole input per partition. ``exp_tile_by_tile`` keeps one tile per iteration live (the
compiler may keep a few in flight). Written for accelopt_nb's teaching course.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

TILE = 2048       # float32 columns per tile: 8 KiB per partition


@nki.jit
def exp_all_at_once(x):
    parts, cols = x.shape
    n = cols // TILE
    out = nl.ndarray((parts, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    tiles = nl.ndarray((n, nl.par_dim(parts), TILE), dtype=x.dtype, buffer=nl.sbuf)
    for j in nl.affine_range(n):
        tiles[j] = nl.load(x[0:parts, j * TILE:(j + 1) * TILE])
    for j in nl.affine_range(n):
        tiles[j] = nisa.activation(op=nl.exp, data=tiles[j])
    for j in nl.affine_range(n):
        nl.store(out[0:parts, j * TILE:(j + 1) * TILE], value=tiles[j])
    return out


@nki.jit
def exp_tile_by_tile(x):
    parts, cols = x.shape
    out = nl.ndarray((parts, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for j in nl.affine_range(cols // TILE):
        t = nl.load(x[0:parts, j * TILE:(j + 1) * TILE])
        y = nisa.activation(op=nl.exp, data=t)
        nl.store(out[0:parts, j * TILE:(j + 1) * TILE], value=y)
    return out
