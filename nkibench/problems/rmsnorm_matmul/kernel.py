"""Baseline NKI kernel for rmsnorm_matmul: (x / sqrt(mean_K x^2)) @ w, fp32."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

TILE_N = 512


@nki.jit
def kernel(x, w):
    """x: (M/128, 128, K), w: (K/128, 128, N). Returns (M, N)."""
    m_tiles, P, K = x.shape
    k_tiles, _, N = w.shape
    out = nl.ndarray((m_tiles * P, N), dtype=x.dtype, buffer=nl.shared_hbm)

    for m in nl.affine_range(m_tiles):
        rows = nl.load(x[m])                                         # (128, K)
        sum_sq = nl.sum(nl.multiply(rows, rows), axis=1, keepdims=True)
        inv_rms = nl.rsqrt(nl.multiply(sum_sq, 1.0 / K))
        normed = nl.multiply(rows, inv_rms)

        normed_t = nl.ndarray((k_tiles, nl.par_dim(P), P), dtype=nl.float32, buffer=nl.sbuf)
        for k in nl.affine_range(k_tiles):
            normed_t[k] = nl.copy(nisa.nc_transpose(normed[:, nl.ds(k * P, P)], engine=nisa.tensor_engine))

        for n in nl.affine_range(N // TILE_N):
            _output_tile(out, normed_t, w, m * P, n * TILE_N, TILE_N)
        if N % TILE_N:
            _output_tile(out, normed_t, w, m * P, (N // TILE_N) * TILE_N, N % TILE_N)
    return out


def _output_tile(out, lhs_t, w, row0, col0, width):
    k_tiles, P = w.shape[0], w.shape[1]
    acc = nl.zeros((P, width), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(k_tiles):
        acc += nisa.nc_matmul(lhs_t[k], nl.load(w[k, :, nl.ds(col0, width)]))
    nl.store(out[nl.ds(row0, P), nl.ds(col0, width)], value=nl.copy(acc))
