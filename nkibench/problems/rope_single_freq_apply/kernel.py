"""Baseline NKI kernel for rope_single_freq_apply: [x0*cos - x1*sin ; x0*sin + x1*cos], fp32."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

TILE_N = 512


@nki.jit
def kernel(x, cos, sin):
    """x: (D, C), cos and sin: (D/2, C). Returns (D, C)."""
    D, C = x.shape
    out = nl.ndarray((D, C), dtype=x.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(C // TILE_N):
        _tile(out, x, cos, sin, n * TILE_N, TILE_N)
    if C % TILE_N:
        _tile(out, x, cos, sin, (C // TILE_N) * TILE_N, C % TILE_N)
    return out


def _tile(out, x, cos, sin, col0, width):
    half = x.shape[0] // 2
    cols = nl.ds(col0, width)
    x0 = nl.load(x[nl.ds(0, half), cols])
    x1 = nl.load(x[nl.ds(half, half), cols])
    c = nl.load(cos[:, cols])
    s = nl.load(sin[:, cols])
    out0 = nl.subtract(nl.multiply(x0, c), nl.multiply(x1, s))
    out1 = nl.add(nl.multiply(x0, s), nl.multiply(x1, c))
    nl.store(out[nl.ds(0, half), cols], value=out0)
    nl.store(out[nl.ds(half, half), cols], value=out1)
