"""Baseline NKI kernel for matmul_add_rmsnorm: y = x @ w + z; y * g * rsqrt(mean_N y^2 + eps), fp32."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

EPS = 1e-5
TILE_M = 128
TILE_N = 512


@nki.jit
def kernel(x, w, z, g):
    """x: (M, K), w: (K, N), z: (M, N), g: (1, N). Returns (M, N)."""
    M, K = x.shape
    N = w.shape[1]
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)

    # Broadcast the gain row over the partitions once (a TensorE op, one PSUM bank at a time).
    gain_row = nl.load(g)                                      # (1, N)
    gain = nl.ndarray((TILE_M, N), dtype=nl.float32, buffer=nl.sbuf)
    for n in nl.affine_range(N // TILE_N):
        gain[:, nl.ds(n * TILE_N, TILE_N)] = nl.broadcast_to(gain_row[:, nl.ds(n * TILE_N, TILE_N)],
                                                             shape=(TILE_M, TILE_N))
    if N % TILE_N:
        col0 = (N // TILE_N) * TILE_N
        gain[:, nl.ds(col0, N % TILE_N)] = nl.broadcast_to(gain_row[:, nl.ds(col0, N % TILE_N)],
                                                          shape=(TILE_M, N % TILE_N))

    for m in nl.affine_range(M // TILE_M):
        _row_block(out, x, w, z, gain, m * TILE_M, TILE_M)
    if M % TILE_M:
        _row_block(out, x, w, z, gain, (M // TILE_M) * TILE_M, M % TILE_M)
    return out


def _row_block(out, x, w, z, gain, row0, rows):
    K = x.shape[1]
    N = w.shape[1]
    k_tiles = K // 128
    x_t = nl.ndarray((k_tiles, nl.par_dim(128), rows), dtype=nl.float32, buffer=nl.sbuf)
    for k in nl.affine_range(k_tiles):
        block = nl.load(x[nl.ds(row0, rows), nl.ds(k * 128, 128)])
        x_t[k] = nl.copy(nisa.nc_transpose(block, engine=nisa.tensor_engine))

    y = nl.ndarray((rows, N), dtype=nl.float32, buffer=nl.sbuf)
    for n in nl.affine_range(N // TILE_N):
        _y_tile(y, x_t, w, z, row0, rows, n * TILE_N, TILE_N)
    if N % TILE_N:
        _y_tile(y, x_t, w, z, row0, rows, (N // TILE_N) * TILE_N, N % TILE_N)

    mean_sq = nl.multiply(nl.sum(nl.multiply(y, y), axis=1, keepdims=True), 1.0 / N)
    inv_rms = nl.rsqrt(nl.add(mean_sq, EPS))
    result = nl.multiply(nl.multiply(y, inv_rms), gain[nl.ds(0, rows), :])
    nl.store(out[nl.ds(row0, rows), :], value=result)


def _y_tile(y, x_t, w, z, row0, rows, col0, width):
    k_tiles = w.shape[0] // 128
    acc = nl.zeros((rows, width), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(k_tiles):
        acc += nisa.nc_matmul(x_t[k], nl.load(w[nl.ds(k * 128, 128), nl.ds(col0, width)]))
    y[:, nl.ds(col0, width)] = nl.add(acc, nl.load(z[nl.ds(row0, rows), nl.ds(col0, width)]))
