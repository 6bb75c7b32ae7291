import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.typing as nt
from neuronxcc.nki import trace
from neuronxcc.nki.language import par_dim

@nki.jit
def kernel(v1, v2):
    # v1: (M, K) row-major, transposed on chip with an identity; v2: (K, N)
    M, K = v1.shape
    _, N = v2.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    ident = nl.shared_constant(np.identity(128, dtype=np.float32), dtype=nl.float32)
    ident_t = nl.ndarray((par_dim(128), 128), dtype=nl.float32, buffer=nl.sbuf)
    ident_t[...] = nl.load(ident)
    xs = nl.ndarray((M // 128, K // 128, par_dim(128), 128), dtype=nl.float32, buffer=nl.sbuf)
    for i0 in nl.affine_range(M // 128):
        for i1 in nl.affine_range(K // 128):
            t = nl.load(v1[i0 * 128 + nl.arange(128)[:, None], i1 * 128 + nl.arange(128)[None, :]])
            p = nl.ndarray((par_dim(128), 128), dtype=nl.float32, buffer=nl.psum)
            p[...] = nisa.nc_matmul(t, ident_t, is_transpose=True)
            xs[i0, i1, nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.copy(p)
            ' end i1 '
    i_p = nl.arange(128)[:, None]
    for i0 in nl.affine_range(M // 128):
        for j in nl.affine_range((N + 511) // 512):
            acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum, lazy_initialization=True)
            i_f = j * 512 + nl.arange(512)[None, :]
            for i1 in nl.affine_range(K // 128):
                w = nl.load(v2[i1 * 128 + i_p, i_f], mask=(i_f < N))
                acc += nisa.nc_matmul(xs[i0, i1], w, mask=(i_f < N))
            res = nl.ndarray((par_dim(128), 512), dtype=nl.float32, buffer=nl.sbuf)
            res[i_p, nl.arange(512)[None, :]] = nl.copy(acc, mask=(i_f < N))
            nl.store(out[i0 * 128 + i_p, i_f], value=res, mask=(i_f < N))
    return out
