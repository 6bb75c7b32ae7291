"""Baseline NKI kernel for gqa_full: non-causal grouped-query attention, fp32, D <= 128, N % 128 == 0."""
import math

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

TILE = 128
TILE_N = 512


@nki.jit
def kernel(q, k, v):
    """q: (B, QH, N, D); k, v: (B, KH, N, D). Returns (B, QH, N, D)."""
    B, QH, N, D = q.shape
    KH = k.shape[1]
    group = QH // KH
    scale = 1.0 / math.sqrt(D)
    blocks = N // TILE
    out = nl.ndarray((B, QH, N, D), dtype=q.dtype, buffer=nl.shared_hbm)

    for b in nl.affine_range(B):
        for h in nl.affine_range(QH):
            kv = h // group
            k_t = nl.ndarray((nl.par_dim(D), N), dtype=nl.float32, buffer=nl.sbuf)
            v_blocks = nl.ndarray((blocks, nl.par_dim(TILE), D), dtype=nl.float32, buffer=nl.sbuf)
            for j in nl.affine_range(blocks):
                k_block = nl.load(k[b, kv, nl.ds(j * TILE, TILE), :])
                k_t[:, nl.ds(j * TILE, TILE)] = nl.copy(nisa.nc_transpose(k_block, engine=nisa.tensor_engine))
                v_blocks[j] = nl.load(v[b, kv, nl.ds(j * TILE, TILE), :])

            for i in nl.affine_range(blocks):
                q_block = nl.load(q[b, h, nl.ds(i * TILE, TILE), :])
                q_t = nl.copy(nisa.nc_transpose(q_block, engine=nisa.tensor_engine))      # (D, 128)

                scores = nl.ndarray((TILE, N), dtype=nl.float32, buffer=nl.sbuf)
                for n in nl.affine_range(N // TILE_N):
                    _score_tile(scores, q_t, k_t, n * TILE_N, TILE_N, scale)
                if N % TILE_N:
                    _score_tile(scores, q_t, k_t, (N // TILE_N) * TILE_N, N % TILE_N, scale)

                row_max = nl.max(scores, axis=1, keepdims=True)
                expo = nl.exp(nl.subtract(scores, row_max))
                inv_sum = nl.reciprocal(nl.sum(expo, axis=1, keepdims=True))
                probs = nl.multiply(expo, inv_sum)

                acc = nl.zeros((TILE, D), dtype=nl.float32, buffer=nl.psum)
                for j in nl.affine_range(blocks):
                    p_t = nl.copy(nisa.nc_transpose(probs[:, nl.ds(j * TILE, TILE)], engine=nisa.tensor_engine))
                    acc += nisa.nc_matmul(p_t, v_blocks[j])
                nl.store(out[b, h, nl.ds(i * TILE, TILE), :], value=nl.copy(acc))
    return out


def _score_tile(scores, q_t, k_t, col0, width, scale):
    acc = nisa.nc_matmul(q_t, k_t[:, nl.ds(col0, width)])
    scores[:, nl.ds(col0, width)] = nl.multiply(acc, scale)
