"""Baseline NKI kernel for mamba: the selective scan, fp32, one pass over the whole sequence."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

TILE_C = 128
TILE_F = 512      # a partition broadcast runs on TensorE into one PSUM bank: 512 fp32 at a time


@nki.jit
def kernel(delta, u, a, b, c_mat):
    """delta, u: (C, M); a: (C, S); b, c_mat: (S, M). Returns (C, M)."""
    C, M = delta.shape
    out = nl.ndarray((C, M), dtype=delta.dtype, buffer=nl.shared_hbm)
    for ct in nl.affine_range(C // TILE_C):
        _channel_block(out, delta, u, a, b, c_mat, ct * TILE_C, TILE_C)
    if C % TILE_C:
        _channel_block(out, delta, u, a, b, c_mat, (C // TILE_C) * TILE_C, C % TILE_C)
    return out


def _channel_block(out, delta, u, a, b, c_mat, ch0, chans):
    M = delta.shape[1]
    S = a.shape[1]
    chs = nl.ds(ch0, chans)
    delta_t = nl.load(delta[chs, :])
    delta_u = nl.multiply(delta_t, nl.load(u[chs, :]))
    acc = nl.zeros((chans, M), dtype=nl.float32, buffer=nl.sbuf)
    for s in nl.affine_range(S):
        a_col = nl.load(a[chs, nl.ds(s, 1)])                                   # (chans, 1)
        decay = nisa.activation(op=nl.exp, data=delta_t, scale=a_col)          # exp(delta * a)
        b_rows = _broadcast_row(nl.load(b[nl.ds(s, 1), :]), chans, M)          # b[s] on every partition
        drive = nl.multiply(delta_u, b_rows)
        state = nisa.tensor_tensor_scan(decay, drive, initial=0.0, op0=nl.multiply, op1=nl.add)
        c_rows = _broadcast_row(nl.load(c_mat[nl.ds(s, 1), :]), chans, M)
        acc += nl.multiply(state, c_rows)
    nl.store(out[chs, :], value=acc)


def _broadcast_row(row, parts, length):
    """Copy a (1, length) row to (parts, length) in SBUF, one PSUM bank's worth at a time."""
    full = nl.ndarray((parts, length), dtype=nl.float32, buffer=nl.sbuf)
    for j in nl.affine_range(length // TILE_F):
        full[:, nl.ds(j * TILE_F, TILE_F)] = nl.broadcast_to(row[:, nl.ds(j * TILE_F, TILE_F)], shape=(parts, TILE_F))
    if length % TILE_F:
        col0 = (length // TILE_F) * TILE_F
        w = length % TILE_F
        full[:, nl.ds(col0, w)] = nl.broadcast_to(row[:, nl.ds(col0, w)], shape=(parts, w))
    return full
