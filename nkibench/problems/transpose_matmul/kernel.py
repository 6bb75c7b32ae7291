"""Baseline NKI kernel for transpose_matmul: C = lhs_t.T @ rhs, fp32."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

TILE_N = 512


@nki.jit
def kernel(lhs_t, rhs):
    """lhs_t: (128, K/128, M), rhs: (128, K/128, N), contraction index k = p*(K/128) + j. Returns (M, N)."""
    P, k_tiles, M = lhs_t.shape
    N = rhs.shape[2]
    out = nl.ndarray((M, N), dtype=lhs_t.dtype, buffer=nl.shared_hbm)

    for m in nl.affine_range(M // P):
        stationary = nl.ndarray((k_tiles, nl.par_dim(P), P), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(k_tiles):
            stationary[j] = nl.load(lhs_t[:, j, nl.ds(m * P, P)])

        for n in nl.affine_range(N // TILE_N):
            _output_tile(out, stationary, rhs, m * P, n * TILE_N, TILE_N)
        if N % TILE_N:
            _output_tile(out, stationary, rhs, m * P, (N // TILE_N) * TILE_N, N % TILE_N)
    return out


def _output_tile(out, stationary, rhs, row0, col0, width):
    P, k_tiles = rhs.shape[0], rhs.shape[1]
    acc = nl.zeros((P, width), dtype=nl.float32, buffer=nl.psum)
    for j in nl.affine_range(k_tiles):
        moving = nl.load(rhs[:, j, nl.ds(col0, width)])
        acc += nisa.nc_matmul(stationary[j], moving)
    nl.store(out[nl.ds(row0, P), nl.ds(col0, width)], value=nl.copy(acc))
