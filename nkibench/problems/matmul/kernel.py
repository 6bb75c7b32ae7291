"""Baseline NKI kernel for matmul: C = A @ B, fp32."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

TILE_N = 512      # PSUM bank: 512 fp32 per partition; also the TensorE moving free-size limit


@nki.jit
def kernel(lhs, rhs):
    """lhs: (M/128, 128, K/128, 128) blocks of A; rhs: (K/128, 128, N). Returns C: (M, N)."""
    m_tiles, P, k_tiles, _ = lhs.shape
    N = rhs.shape[2]
    out = nl.ndarray((m_tiles * P, N), dtype=lhs.dtype, buffer=nl.shared_hbm)

    for m in nl.affine_range(m_tiles):
        # TensorE contracts over partitions: put K on partitions by transposing each A block.
        lhs_t = nl.ndarray((k_tiles, nl.par_dim(P), P), dtype=nl.float32, buffer=nl.sbuf)
        for k in nl.affine_range(k_tiles):
            block = nl.load(lhs[m, :, k, :])
            lhs_t[k] = nl.copy(nisa.nc_transpose(block, engine=nisa.tensor_engine))

        for n in nl.affine_range(N // TILE_N):
            _output_tile(out, lhs_t, rhs, m * P, n * TILE_N, TILE_N)
        if N % TILE_N:
            _output_tile(out, lhs_t, rhs, m * P, (N // TILE_N) * TILE_N, N % TILE_N)
    return out


def _output_tile(out, lhs_t, rhs, row0, col0, width):
    """C[row0:row0+128, col0:col0+width] = sum_k lhs_t[k].T @ rhs[k, :, cols]."""
    k_tiles, P = rhs.shape[0], rhs.shape[1]
    acc = nl.zeros((P, width), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(k_tiles):
        rhs_tile = nl.load(rhs[k, :, nl.ds(col0, width)])
        acc += nisa.nc_matmul(lhs_t[k], rhs_tile)
    nl.store(out[nl.ds(row0, P), nl.ds(col0, width)], value=nl.copy(acc))
