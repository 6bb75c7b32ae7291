"""matmul with B resident in SBUF (loaded once, not once per row block) and each row block of A moved in
one DMA (k_tiles x 512 B per partition instead of 512 B transfers), each output row block stored in
one DMA: the fake model's faster variant."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

TILE_N = 512


@nki.jit
def kernel(lhs, rhs):
    m_tiles, P, k_tiles, _ = lhs.shape
    N = rhs.shape[2]
    out = nl.ndarray((m_tiles * P, N), dtype=lhs.dtype, buffer=nl.shared_hbm)
    # All of B stays resident in SBUF: loaded once instead of once per row block.
    rhs_all = nl.ndarray((k_tiles, nl.par_dim(P), N), dtype=nl.float32, buffer=nl.sbuf)
    # column block by column block, so the first output tiles can start before all of B has arrived
    for n in nl.affine_range((N + TILE_N - 1) // TILE_N):
        width = min(TILE_N, N - n * TILE_N)
        for k in nl.affine_range(k_tiles):
            rhs_all[k, :, nl.ds(n * TILE_N, width)] = nl.load(rhs[k, :, nl.ds(n * TILE_N, width)])
    for m in nl.affine_range(m_tiles):
        lhs_t = nl.ndarray((k_tiles, nl.par_dim(P), P), dtype=nl.float32, buffer=nl.sbuf)
        rows = nl.load(lhs[m])                      # [P, k_tiles, P] in one transfer
        for k in nl.affine_range(k_tiles):
            lhs_t[k] = nl.copy(nisa.nc_transpose(rows[:, k, :], engine=nisa.tensor_engine))
        row = nl.ndarray((nl.par_dim(P), N), dtype=nl.float32, buffer=nl.sbuf)
        for n in nl.affine_range(N // TILE_N):
            _output_tile(row, lhs_t, rhs_all, n * TILE_N, TILE_N)
        if N % TILE_N:
            _output_tile(row, lhs_t, rhs_all, (N // TILE_N) * TILE_N, N % TILE_N)
        nl.store(out[nl.ds(m * P, P), :], value=row)     # the whole row block in one transfer
    return out


def _output_tile(row, lhs_t, rhs_all, col0, width):
    k_tiles, P = rhs_all.shape[0], lhs_t.shape[1]
    acc = nl.zeros((P, width), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(k_tiles):
        acc += nisa.nc_matmul(lhs_t[k], rhs_all[k, :, nl.ds(col0, width)])
    row[:, nl.ds(col0, width)] = nl.copy(acc)
