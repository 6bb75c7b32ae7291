"""Baseline NKI kernel for lora: out = x @ w + (x @ a) @ b, fp32, R <= 128."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

TILE_N = 512


@nki.jit
def kernel(x, w, a, b):
    """x: (M/128, 128, K/128, 128), w: (K/128, 128, N), a: (K/128, 128, R), b: (R, N). Returns (M, N)."""
    m_tiles, P, k_tiles, _ = x.shape
    N = w.shape[2]
    R = a.shape[2]
    out = nl.ndarray((m_tiles * P, N), dtype=x.dtype, buffer=nl.shared_hbm)

    for m in nl.affine_range(m_tiles):
        x_t = nl.ndarray((k_tiles, nl.par_dim(P), P), dtype=nl.float32, buffer=nl.sbuf)
        for k in nl.affine_range(k_tiles):
            block = nl.load(x[m, :, k, :])
            x_t[k] = nl.copy(nisa.nc_transpose(block, engine=nisa.tensor_engine))

        # (x @ a)^T accumulates a[k]^T @ x_t[k] over k: R partitions, 128 columns.
        xa_acc = nl.zeros((R, P), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(k_tiles):
            a_tile = nl.load(a[k])
            xa_acc += nisa.nc_matmul(a_tile, x_t[k])
        xa_t = nl.copy(xa_acc)

        for n in nl.affine_range(N // TILE_N):
            _output_tile(out, x_t, xa_t, w, b, m * P, n * TILE_N, TILE_N)
        if N % TILE_N:
            _output_tile(out, x_t, xa_t, w, b, m * P, (N // TILE_N) * TILE_N, N % TILE_N)
    return out


def _output_tile(out, x_t, xa_t, w, b, row0, col0, width):
    k_tiles, P = w.shape[0], w.shape[1]
    acc = nl.zeros((P, width), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(k_tiles):
        w_tile = nl.load(w[k, :, nl.ds(col0, width)])
        acc += nisa.nc_matmul(x_t[k], w_tile)
    b_tile = nl.load(b[:, nl.ds(col0, width)])
    acc += nisa.nc_matmul(xa_t, b_tile)
    nl.store(out[nl.ds(row0, P), nl.ds(col0, width)], value=nl.copy(acc))
