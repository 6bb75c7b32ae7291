"""The standalone `nki` package style (NKI 0.2+): explicit dst arguments, on the same simulator core."""
import numpy as np

from accelopt_nb.sim import load_kernel, simulate

KERNEL = '''
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np


@nki.jit
def kernel(lhsT, rhs, bias):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    b = nl.ndarray((M, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=b, src=bias)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128):
        a = nl.ndarray((128, M), dtype=nl.float32, buffer=nl.sbuf)
        w = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(dst=w, src=rhs[k * 128:(k + 1) * 128, :])
        nisa.nc_matmul(acc, a, w)                      # accumulate=None: the first write overwrites
    y = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(y, op=nl.exp, data=acc, bias=b, scale=0.5)
    z = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(z, y, np.multiply, 2.0)
    nisa.dma_copy(dst=out, src=z)
    return out
'''


def test_standalone_nki_kernel_runs(rng):
    lhsT = rng.standard_normal((256, 64)).astype(np.float32) * 0.1
    rhs = rng.standard_normal((256, 96)).astype(np.float32) * 0.1
    bias = rng.standard_normal((64, 1)).astype(np.float32)
    res = simulate(load_kernel(source=KERNEL), lhsT, rhs, bias)
    expected = 2.0 * np.exp(0.5 * (lhsT.T @ rhs) + bias)
    np.testing.assert_allclose(res.output, expected, rtol=1e-5)
    mm = [i for i in res.trace if i.op == "nc_matmul"]
    assert len(mm) == 2 and all(i.accumulate for i in mm)
    # results are written into dst directly: no extra copies beyond the instructions the kernel wrote
    assert res.trace.op_counts().get("tensor_copy", 0) == 0


def test_nc_matmul_accumulate_false_overwrites(rng):
    # overwriting one PSUM tile from every iteration is a loop-carried dependency: sequential_range
    src = KERNEL.replace("nisa.nc_matmul(acc, a, w)", "nisa.nc_matmul(acc, a, w, accumulate=False)").replace(
        "for k in nl.affine_range(K // 128):", "for k in nl.sequential_range(K // 128):")
    lhsT = rng.standard_normal((256, 64)).astype(np.float32) * 0.1
    rhs = rng.standard_normal((256, 96)).astype(np.float32) * 0.1
    bias = np.zeros((64, 1), np.float32)
    res = simulate(load_kernel(source=src), lhsT, rhs, bias)
    last = lhsT[128:].T @ rhs[128:]
    np.testing.assert_allclose(res.output, 2.0 * np.exp(0.5 * last), rtol=1e-5)
