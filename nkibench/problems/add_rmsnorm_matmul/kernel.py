"""Baseline NKI kernel for add_rmsnorm_matmul: ((x + z) * rsqrt(mean_K (x+z)^2 + eps) * g) @ w, fp32."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

EPS = 1e-5
TILE_M = 128
TILE_N = 512


@nki.jit
def kernel(x, z, g, w):
    """x, z: (M, K); g: (K, 1); w: (K, N). Returns (M, N)."""
    M, K = x.shape
    N = w.shape[1]
    k_tiles = K // 128
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)

    gain = nl.ndarray((k_tiles, nl.par_dim(128), 1), dtype=nl.float32, buffer=nl.sbuf)
    for k in nl.affine_range(k_tiles):
        gain[k] = nl.load(g[nl.ds(k * 128, 128), :])

    for m in nl.affine_range(M // TILE_M):
        _row_block(out, x, z, gain, w, m * TILE_M, TILE_M)
    if M % TILE_M:
        _row_block(out, x, z, gain, w, (M // TILE_M) * TILE_M, M % TILE_M)
    return out


def _row_block(out, x, z, gain, w, row0, rows):
    K = x.shape[1]
    N = w.shape[1]
    k_tiles = K // 128
    y = nl.add(nl.load(x[nl.ds(row0, rows), :]), nl.load(z[nl.ds(row0, rows), :]))
    mean_sq = nl.multiply(nl.sum(nl.multiply(y, y), axis=1, keepdims=True), 1.0 / K)
    inv_rms = nl.rsqrt(nl.add(mean_sq, EPS))
    normed = nl.multiply(y, inv_rms)

    normed_t = nl.ndarray((k_tiles, nl.par_dim(128), rows), dtype=nl.float32, buffer=nl.sbuf)
    for k in nl.affine_range(k_tiles):
        block_t = nisa.nc_transpose(normed[:, nl.ds(k * 128, 128)], engine=nisa.tensor_engine)
        normed_t[k] = nl.multiply(block_t, gain[k])

    for n in nl.affine_range(N // TILE_N):
        _output_tile(out, normed_t, w, row0, rows, n * TILE_N, TILE_N)
    if N % TILE_N:
        _output_tile(out, normed_t, w, row0, rows, (N // TILE_N) * TILE_N, N % TILE_N)


def _output_tile(out, lhs_t, w, row0, rows, col0, width):
    k_tiles = w.shape[0] // 128
    acc = nl.zeros((rows, width), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(k_tiles):
        acc += nisa.nc_matmul(lhs_t[k], nl.load(w[nl.ds(k * 128, 128), nl.ds(col0, width)]))
    nl.store(out[nl.ds(row0, rows), nl.ds(col0, width)], value=nl.copy(acc))
