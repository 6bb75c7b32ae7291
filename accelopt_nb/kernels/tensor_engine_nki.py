"""``matmul_lhsT`` of ``tensor_engine.py`` in today's standalone ``nki`` style (notebook 03).

What differs for TensorE: the kernel allocates the PSUM accumulator itself and ``nisa.nc_matmul``
writes into it (``dst`` first); by default the first write to a PSUM location overwrites and later
ones accumulate, so no zero-fill and no ``+=``. PSUM is copied to SBUF with ``nisa.tensor_copy``
before it can be stored (the DMA does not read PSUM). Written for accelopt_nb's teaching course.
"""
import nki
import nki.isa as nisa
import nki.language as nl

TN = 512          # moving columns per matmul: one PSUM bank of float32


@nki.jit
def matmul_lhsT(aT, b):
    K, M = aT.shape
    N = b.shape[1]
    out = nl.ndarray((M, N), dtype=aT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // TN):
            acc = nl.ndarray((128, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                stat = nl.ndarray((128, 128), dtype=aT.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=stat, src=aT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                mov = nl.ndarray((128, TN), dtype=b.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=mov, src=b[k * 128:(k + 1) * 128, n * TN:(n + 1) * TN])
                nisa.nc_matmul(dst=acc, stationary=stat, moving=mov)
            res = nl.ndarray((128, TN), dtype=aT.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * 128:(m + 1) * 128, n * TN:(n + 1) * TN], src=res)
    return out
