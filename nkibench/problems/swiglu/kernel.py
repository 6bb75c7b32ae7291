"""Baseline NKI kernel for swiglu: (silu(x @ Wg) * (x @ Wu)) @ Wd, fp32."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

TILE_N = 512


@nki.jit
def kernel(x, w_gate, w_up, w_down):
    """x: (M/128, 128, K/128, 128); w_gate, w_up: (K/128, 128, N); w_down: (N/128, 128, K). Returns (M, K)."""
    m_tiles, P, k_tiles, _ = x.shape
    N = w_gate.shape[2]
    K = k_tiles * P
    n_blocks = N // P
    out = nl.ndarray((m_tiles * P, K), dtype=x.dtype, buffer=nl.shared_hbm)

    for m in nl.affine_range(m_tiles):
        x_t = nl.ndarray((k_tiles, nl.par_dim(P), P), dtype=nl.float32, buffer=nl.sbuf)
        for k in nl.affine_range(k_tiles):
            x_t[k] = nl.copy(nisa.nc_transpose(nl.load(x[m, :, k, :]), engine=nisa.tensor_engine))

        hidden = nl.ndarray((P, N), dtype=nl.float32, buffer=nl.sbuf)
        for n in nl.affine_range(N // TILE_N):
            _hidden_tile(hidden, x_t, w_gate, w_up, n * TILE_N, TILE_N)
        if N % TILE_N:
            _hidden_tile(hidden, x_t, w_gate, w_up, (N // TILE_N) * TILE_N, N % TILE_N)

        hidden_t = nl.ndarray((n_blocks, nl.par_dim(P), P), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(n_blocks):
            hidden_t[j] = nl.copy(nisa.nc_transpose(hidden[:, nl.ds(j * P, P)], engine=nisa.tensor_engine))

        for c in nl.affine_range(K // TILE_N):
            _output_tile(out, hidden_t, w_down, m * P, c * TILE_N, TILE_N)
        if K % TILE_N:
            _output_tile(out, hidden_t, w_down, m * P, (K // TILE_N) * TILE_N, K % TILE_N)
    return out


def _hidden_tile(hidden, x_t, w_gate, w_up, col0, width):
    k_tiles, P = w_gate.shape[0], w_gate.shape[1]
    gate = nl.zeros((P, width), dtype=nl.float32, buffer=nl.psum)
    up = nl.zeros((P, width), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(k_tiles):
        gate += nisa.nc_matmul(x_t[k], nl.load(w_gate[k, :, nl.ds(col0, width)]))
        up += nisa.nc_matmul(x_t[k], nl.load(w_up[k, :, nl.ds(col0, width)]))
    gate_sb = nl.copy(gate)
    act = nl.multiply(gate_sb, nl.sigmoid(gate_sb))
    hidden[:, nl.ds(col0, width)] = nl.multiply(act, up)


def _output_tile(out, hidden_t, w_down, row0, col0, width):
    n_blocks, P = w_down.shape[0], w_down.shape[1]
    acc = nl.zeros((P, width), dtype=nl.float32, buffer=nl.psum)
    for j in nl.affine_range(n_blocks):
        acc += nisa.nc_matmul(hidden_t[j], nl.load(w_down[j, :, nl.ds(col0, width)]))
    nl.store(out[nl.ds(row0, P), nl.ds(col0, width)], value=nl.copy(acc))
