"""Baseline NKI kernel for bmm_softmax: softmax(lhs[b] @ rhs[b]) over the last axis, fp32, K <= 128."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

TILE_M = 128
TILE_N = 512


@nki.jit
def kernel(lhs, rhs):
    """lhs: (B, M, K), rhs: (B, K, N). Returns (B, M, N) row-softmax of lhs @ rhs."""
    B, M, K = lhs.shape
    N = rhs.shape[2]
    out = nl.ndarray((B, M, N), dtype=lhs.dtype, buffer=nl.shared_hbm)

    for b in nl.affine_range(B):
        rhs_b = nl.load(rhs[b])                          # (K, N)
        for m in nl.affine_range(M // TILE_M):
            _row_block(out, lhs, rhs_b, b, m * TILE_M, TILE_M)
        if M % TILE_M:
            _row_block(out, lhs, rhs_b, b, (M // TILE_M) * TILE_M, M % TILE_M)
    return out


def _row_block(out, lhs, rhs_b, b, row0, rows):
    N = out.shape[2]
    block = nl.load(lhs[b, nl.ds(row0, rows), :])
    lhs_t = nl.copy(nisa.nc_transpose(block, engine=nisa.tensor_engine))   # (K, rows)

    scores = nl.ndarray((rows, N), dtype=nl.float32, buffer=nl.sbuf)
    for n in nl.affine_range(N // TILE_N):
        _score_tile(scores, lhs_t, rhs_b, n * TILE_N, TILE_N)
    if N % TILE_N:
        _score_tile(scores, lhs_t, rhs_b, (N // TILE_N) * TILE_N, N % TILE_N)

    row_max = nl.max(scores, axis=1, keepdims=True)
    shifted = nl.subtract(scores, row_max)
    expo = nl.exp(shifted)
    row_sum = nl.sum(expo, axis=1, keepdims=True)
    inv_sum = nl.reciprocal(row_sum)
    probs = nl.multiply(expo, inv_sum)
    nl.store(out[b, nl.ds(row0, rows), :], value=probs)


def _score_tile(scores, lhs_t, rhs_b, col0, width):
    acc = nisa.nc_matmul(lhs_t, rhs_b[:, nl.ds(col0, width)])
    scores[:, nl.ds(col0, width)] = nl.copy(acc)
