"""TensorE: stationary and moving operands, transposes, fp32 vs bf16 (notebook 03).

``nisa.nc_matmul(stationary, moving)`` computes stationary.T @ moving: both operands have the
contraction dimension K (<= 128) on partitions; the stationary's free size (<= 128) becomes the
result's partitions, the moving's free size (<= 512) its columns, in PSUM. The moving operand
streams through the 128 x 128 array one column per cycle; loading the stationary takes up to
64 cycles, hidden behind a moving operand of at least 64 columns.

C = A @ B with A (M, K) and B (K, N): the kernels differ in how A's tiles get K onto partitions.
Written for accelopt_nb's teaching course.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

TN = 512          # moving columns per matmul: one PSUM bank of float32


@nki.jit
def matmul_lhsT(aT, b):
    """A arrives transposed (aT = A.T, shape (K, M)): its tiles already have K on partitions."""
    K, M = aT.shape
    N = b.shape[1]
    out = nl.ndarray((M, N), dtype=aT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // TN):
            acc = nl.zeros((128, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                stat = nl.load(aT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                mov = nl.load(b[k * 128:(k + 1) * 128, n * TN:(n + 1) * TN])
                acc += nisa.nc_matmul(stat, mov)
            nl.store(out[m * 128:(m + 1) * 128, n * TN:(n + 1) * TN], value=nl.copy(acc, dtype=aT.dtype))
    return out


@nki.jit
def matmul_pe_transpose(a, b):
    """A arrives as (M, K): each 128 x 128 tile is transposed on TensorE (through PSUM) once per row block."""
    M, K = a.shape
    N = b.shape[1]
    out = nl.ndarray((M, N), dtype=a.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        aT = nl.ndarray((K // 128, nl.par_dim(128), 128), dtype=a.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(K // 128):
            blk = nl.load(a[m * 128:(m + 1) * 128, k * 128:(k + 1) * 128])
            aT[k] = nl.copy(nisa.nc_transpose(blk, engine=nisa.tensor_engine), dtype=a.dtype)
        for n in nl.affine_range(N // TN):
            acc = nl.zeros((128, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                mov = nl.load(b[k * 128:(k + 1) * 128, n * TN:(n + 1) * TN])
                acc += nisa.nc_matmul(aT[k], mov)
            nl.store(out[m * 128:(m + 1) * 128, n * TN:(n + 1) * TN], value=nl.copy(acc, dtype=a.dtype))
    return out


@nki.jit
def matmul_dma_transpose(a, b):
    """A arrives as (M, K): each tile is transposed by the DMA on its way in (nl.load_transpose2d)."""
    M, K = a.shape
    N = b.shape[1]
    out = nl.ndarray((M, N), dtype=a.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        aT = nl.ndarray((K // 128, nl.par_dim(128), 128), dtype=a.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(K // 128):
            aT[k] = nl.load_transpose2d(a[m * 128:(m + 1) * 128, k * 128:(k + 1) * 128])
        for n in nl.affine_range(N // TN):
            acc = nl.zeros((128, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                mov = nl.load(b[k * 128:(k + 1) * 128, n * TN:(n + 1) * TN])
                acc += nisa.nc_matmul(aT[k], mov)
            nl.store(out[m * 128:(m + 1) * 128, n * TN:(n + 1) * TN], value=nl.copy(acc, dtype=a.dtype))
    return out


@nki.jit
def matmul_moving(aT, b, moving=512):
    """matmul_lhsT with the same 512-column loads, cut into matmuls of ``moving`` columns each."""
    K, M = aT.shape
    N = b.shape[1]
    out = nl.ndarray((M, N), dtype=aT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        stat = nl.ndarray((K // 128, nl.par_dim(128), 128), dtype=aT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(K // 128):
            stat[k] = nl.load(aT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
        for n in nl.affine_range(N // TN):
            mov = nl.ndarray((K // 128, nl.par_dim(128), TN), dtype=b.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(K // 128):
                mov[k] = nl.load(b[k * 128:(k + 1) * 128, n * TN:(n + 1) * TN])
            res = nl.ndarray((128, TN), dtype=aT.dtype, buffer=nl.sbuf)
            for c in nl.affine_range(TN // moving):
                acc = nl.zeros((128, moving), dtype=nl.float32, buffer=nl.psum)
                for k in nl.affine_range(K // 128):
                    acc += nisa.nc_matmul(stat[k], mov[k, 0:128, c * moving:(c + 1) * moving])
                res[0:128, c * moving:(c + 1) * moving] = nl.copy(acc, dtype=aT.dtype)
            nl.store(out[m * 128:(m + 1) * 128, n * TN:(n + 1) * TN], value=res)
    return out
