"""Four matmul kernels that follow the documented steps of the NKI matmul tutorial (MMTUT).

result[M, N] = lhsT[K, M].T @ rhs[K, N], bf16 in and out, fp32 accumulation in PSUM.
Written for accelopt_nb's fidelity benchmark in the neuronxcc.nki 0.1 style; the published
trn1 latencies for 4096x8192x8192 are 51.80, 42.96, 22.07 and 6.97 ms.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

TM, TK, TN = 128, 128, 512     # one matmul: stationary 128x128, moving 128x512


@nki.jit
def matmul_tiled(lhsT, rhs):
    """Step 0: every (m, n) output tile loops over K and loads both operand tiles each time."""
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                a = nl.load(lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                b = nl.load(rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                acc += nl.matmul(a, b, transpose_x=True)
            out = nl.copy(acc, dtype=result.dtype)
            nl.store(result[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], value=out)
    return result


@nki.jit
def matmul_hoisted(lhsT, rhs):
    """Step 1: load a whole column of lhsT tiles once per m and reuse it for every n."""
    K, M = lhsT.shape
    _, N = rhs.shape
    nk = K // TK
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        a_col = nl.ndarray((nk, nl.par_dim(TK), TM), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(nk):
            a_col[k] = nl.load(lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
        for n in nl.affine_range(N // TN):
            b_col = nl.ndarray((nk, nl.par_dim(TK), TN), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(nk):
                b_col[k] = nl.load(rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(nk):
                acc += nl.matmul(a_col[k], b_col[k], transpose_x=True)
            out = nl.copy(acc, dtype=result.dtype)
            nl.store(result[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], value=out)
    return result


@nki.jit
def matmul_blocked_free(lhsT, rhs):
    """Step 2: block the free dims, 2 M tiles x 2 N tiles per block, so each load feeds 2 output tiles."""
    BM, BN = 2, 2
    K, M = lhsT.shape
    _, N = rhs.shape
    nk = K // TK
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for mb in nl.affine_range(M // (TM * BM)):
        a_blk = nl.ndarray((BM, nk, nl.par_dim(TK), TM), dtype=lhsT.dtype, buffer=nl.sbuf)
        for i in nl.affine_range(BM):
            col = (mb * BM + i) * TM
            for k in nl.affine_range(nk):
                a_blk[i, k] = nl.load(lhsT[k * TK:(k + 1) * TK, col:col + TM])
        for nb in nl.affine_range(N // (TN * BN)):
            b_blk = nl.ndarray((BN, nk, nl.par_dim(TK), TN), dtype=rhs.dtype, buffer=nl.sbuf)
            for j in nl.affine_range(BN):
                col = (nb * BN + j) * TN
                for k in nl.affine_range(nk):
                    b_blk[j, k] = nl.load(rhs[k * TK:(k + 1) * TK, col:col + TN])
            for i in nl.affine_range(BM):
                for j in nl.affine_range(BN):
                    acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(nk):
                        acc += nl.matmul(a_blk[i, k], b_blk[j, k], transpose_x=True)
                    out = nl.copy(acc, dtype=result.dtype)
                    r0 = (mb * BM + i) * TM
                    c0 = (nb * BN + j) * TN
                    nl.store(result[r0:r0 + TM, c0:c0 + TN], value=out)
    return result


@nki.jit
def matmul_blocked_mnk(lhsT, rhs):
    """Step 3: block M (16 tiles), N (2 tiles) and K (8 tiles); wide DMAs; partial sums kept in SBUF.

    The K-block loop is a sequential_range (it carries the partial sums); each DMA moves a
    128 x BLOCK row band (2-4 KiB per partition) instead of a single tile.
    """
    BM, BN, BK = 16, 2, 8
    K, M = lhsT.shape
    _, N = rhs.shape
    block_m, block_n, block_k = TM * BM, TN * BN, TK * BK
    n_mb, n_nb, n_kb = M // block_m, N // block_n, K // block_k
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for nb in nl.affine_range(n_nb):
        partial = nl.zeros((n_mb, BM, BN, nl.par_dim(TM), TN), dtype=lhsT.dtype, buffer=nl.sbuf)
        for kb in nl.sequential_range(n_kb):
            b_band = nl.ndarray((BK, nl.par_dim(TK), block_n), dtype=rhs.dtype, buffer=nl.sbuf)
            for kk in nl.affine_range(BK):
                r0 = (kb * BK + kk) * TK
                b_band[kk] = nl.load(rhs[r0:r0 + TK, nb * block_n:(nb + 1) * block_n])
            for mb in nl.affine_range(n_mb):
                a_band = nl.ndarray((BK, nl.par_dim(TK), block_m), dtype=lhsT.dtype, buffer=nl.sbuf)
                for kk in nl.affine_range(BK):
                    r0 = (kb * BK + kk) * TK
                    a_band[kk] = nl.load(lhsT[r0:r0 + TK, mb * block_m:(mb + 1) * block_m])
                for j in nl.affine_range(BN):
                    for i in nl.affine_range(BM):
                        acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
                        for kk in nl.affine_range(BK):
                            acc += nisa.nc_matmul(a_band[kk, 0:TK, i * TM:(i + 1) * TM],
                                                  b_band[kk, 0:TK, j * TN:(j + 1) * TN])
                        partial[mb, i, j, 0:TM, 0:TN] += acc
        for mb in nl.affine_range(n_mb):
            for i in nl.affine_range(BM):
                row_band = nl.ndarray((nl.par_dim(TM), block_n), dtype=result.dtype, buffer=nl.sbuf)
                for j in nl.affine_range(BN):
                    row_band[0:TM, j * TN:(j + 1) * TN] = nl.copy(partial[mb, i, j, 0:TM, 0:TN])
                r0 = (mb * BM + i) * TM
                nl.store(result[r0:r0 + TM, nb * block_n:(nb + 1) * block_n], value=row_band)
    return result
