"""Baseline NKI kernel for adamw: one AdamW step (step 1, PyTorch defaults), fp32."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

LR = 1e-3
BETA1 = 0.9
BETA2 = 0.999
EPS = 1e-8
WEIGHT_DECAY = 1e-2
TILE_M = 128
TILE_N = 512


@nki.jit
def kernel(param, grad, exp_avg, exp_avg_sq):
    """All inputs (M, N). Returns the updated parameters (M, N)."""
    M, N = param.shape
    out = nl.ndarray((M, N), dtype=param.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TILE_M):
        _row_block(out, param, grad, exp_avg, exp_avg_sq, m * TILE_M, TILE_M)
    if M % TILE_M:
        _row_block(out, param, grad, exp_avg, exp_avg_sq, (M // TILE_M) * TILE_M, M % TILE_M)
    return out


def _row_block(out, param, grad, exp_avg, exp_avg_sq, row0, rows):
    N = param.shape[1]
    for n in nl.affine_range(N // TILE_N):
        _tile(out, param, grad, exp_avg, exp_avg_sq, row0, rows, n * TILE_N, TILE_N)
    if N % TILE_N:
        _tile(out, param, grad, exp_avg, exp_avg_sq, row0, rows, (N // TILE_N) * TILE_N, N % TILE_N)


def _tile(out, param, grad, exp_avg, exp_avg_sq, row0, rows, col0, width):
    rs, cs = nl.ds(row0, rows), nl.ds(col0, width)
    p = nl.load(param[rs, cs])
    g = nl.load(grad[rs, cs])
    m = nl.load(exp_avg[rs, cs])
    v = nl.load(exp_avg_sq[rs, cs])

    m_new = nl.add(nl.multiply(m, BETA1), nl.multiply(g, 1.0 - BETA1))
    v_new = nl.add(nl.multiply(v, BETA2), nl.multiply(nl.multiply(g, g), 1.0 - BETA2))
    m_hat = nl.multiply(m_new, 1.0 / (1.0 - BETA1))
    v_hat = nl.multiply(v_new, 1.0 / (1.0 - BETA2))
    denom = nl.add(nl.sqrt(v_hat), EPS)
    update = nl.multiply(nl.divide(m_hat, denom), LR)
    decayed = nl.multiply(p, 1.0 - LR * WEIGHT_DECAY)
    nl.store(out[rs, cs], value=nl.subtract(decayed, update))
