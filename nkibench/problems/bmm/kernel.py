"""Baseline NKI kernel for bmm: out[b] = lhs[b] @ rhs[b], fp32, K <= 128."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

TILE_M = 128
TILE_N = 512


@nki.jit
def kernel(lhs, rhs):
    """lhs: (B, M, K), rhs: (B, K, N). Returns (B, M, N)."""
    B, M, K = lhs.shape
    N = rhs.shape[2]
    out = nl.ndarray((B, M, N), dtype=lhs.dtype, buffer=nl.shared_hbm)

    for b in nl.affine_range(B):
        rhs_b = nl.load(rhs[b])                          # (K, N): K partitions
        for m in nl.affine_range(M // TILE_M):
            _row_block(out, lhs, rhs_b, b, m * TILE_M, TILE_M)
        if M % TILE_M:
            _row_block(out, lhs, rhs_b, b, (M // TILE_M) * TILE_M, M % TILE_M)
    return out


def _row_block(out, lhs, rhs_b, b, row0, rows):
    K = lhs.shape[2]
    N = out.shape[2]
    block = nl.load(lhs[b, nl.ds(row0, rows), :])                       # (rows, K)
    lhs_t = nl.copy(nisa.nc_transpose(block, engine=nisa.tensor_engine))  # (K, rows)
    for n in nl.affine_range(N // TILE_N):
        _output_tile(out, lhs_t, rhs_b, b, row0, rows, n * TILE_N, TILE_N)
    if N % TILE_N:
        _output_tile(out, lhs_t, rhs_b, b, row0, rows, (N // TILE_N) * TILE_N, N % TILE_N)


def _output_tile(out, lhs_t, rhs_b, b, row0, rows, col0, width):
    acc = nisa.nc_matmul(lhs_t, rhs_b[:, nl.ds(col0, width)])             # (rows, width) in PSUM
    nl.store(out[b, nl.ds(row0, rows), nl.ds(col0, width)], value=nl.copy(acc))
