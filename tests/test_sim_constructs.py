"""Constructs real NKI kernels use, each in a kernel of our own checked against NumPy: reductions of
ragged tiles without keepdims, re-indexing integer-indexed views, nl.finfo/iinfo, 3-D/4-D nl.mgrid,
masked bn_stats, nc_matmul perf modes, affine_select on PSUM, indirect (gather/scatter) DMA."""
import ml_dtypes
import numpy as np
import pytest

from accelopt_nb.errors import KernelError, NKIRuleError

RAGGED_REDUCE = """
@nki.jit
def kernel(x):
    out = nl.ndarray((x.shape[0], 3), dtype=nl.float32, buffer=nl.shared_hbm)
    n = x.shape[0]
    t = nl.ndarray((nl.par_dim(128), x.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(x.shape[1])[None, :]
    t[i_p, i_f] = nl.load(x[i_p, i_f], mask=(i_p < n))      # rows >= n stay unwritten
    r = nl.ndarray((nl.par_dim(128), 3), dtype=nl.float32, buffer=nl.sbuf)
    r[i_p, 0] = nl.sum(t, axis=1)                           # keepdims=False: a [P] result
    r[i_p, 1] = nl.max(t, axis=[1])
    r[i_p, 2] = nl.mean(t[i_p, i_f], axis=1, keepdims=False)
    nl.store(out[i_p, nl.arange(3)[None, :]], value=r, mask=(i_p < n))
    return out
"""


def test_keepdims_false_reductions_of_a_ragged_tile(run_kernel, rng):
    x = rng.standard_normal((100, 48)).astype(np.float32)
    out = run_kernel(RAGGED_REDUCE, x).output
    np.testing.assert_allclose(out, np.stack([x.sum(1), x.max(1), x.mean(1)], axis=1), rtol=1e-5, atol=1e-5)


INT_VIEW = """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    r = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(4):
        col = t[:, i * 8]                 # an integer index: a [128, 1] tile
        r[:, i] = nl.multiply(col[:, 0], 3.0)
        r[:, i] = nl.add(col[:, 0:1], r[:, i])
    nl.store(out, value=r)
    return out
"""


def test_reindexing_an_integer_indexed_view(run_kernel, rng):
    x = rng.standard_normal((128, 32)).astype(np.float32)
    np.testing.assert_allclose(run_kernel(INT_VIEW, x, affine_write_conflicts="ignore").output, 4 * x[:, ::8],
                               rtol=1e-6)


FINFO = """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    lo = nl.full((128, 1), nl.finfo(nl.float32).min, dtype=nl.float32)
    m = nl.maximum(nl.max(t, axis=1, keepdims=True), lo)
    big = nl.full((128, 1), float(nl.iinfo(nl.int16).max), dtype=nl.float32)
    r = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.sbuf)
    r[:, 0:1] = m
    r[:, 1:2] = nl.minimum(m, big)
    nl.store(out, value=r)
    return out
"""


def test_finfo_and_iinfo(run_kernel, rng):
    x = (rng.standard_normal((128, 16)) * 1e5).astype(np.float32)
    out = run_kernel(FINFO, x).output
    np.testing.assert_array_equal(out[:, 0], x.max(1))
    np.testing.assert_array_equal(out[:, 1], np.minimum(x.max(1), 32767))
    from accelopt_nb.sim.api import language as nl
    assert nl.finfo(nl.bfloat16).max == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    assert nl.finfo(nl.float8_e4m3).max == 240      # trn1/trn2's e4m3 is IEEE style (inf, max 240), not e4m3fn


MGRID_3D = """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.mgrid[0:x.shape[0], 0:x.shape[1], 0:x.shape[2]]
    t = nl.load(x[g.p, g.x, g.y])
    nl.store(out[g.p, g.x, g.y], value=nl.multiply(t, 2.0))
    return out
"""


def test_mgrid_y_and_z(run_kernel, rng):
    x = rng.standard_normal((16, 4, 8)).astype(np.float32)
    np.testing.assert_array_equal(run_kernel(MGRID_3D, x).output, 2 * x)
    from accelopt_nb.sim.core.indexing import mgrid
    g = mgrid[0:2, 0:3, 0:4, 0:5]
    assert g.z.shape == (1, 1, 1, 5) and g.y.shape == (1, 1, 4, 1)
    with pytest.raises(AttributeError, match="no .y"):
        mgrid[0:2, 0:3].y


BN_MASKED = """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    n = 37
    t = nl.load(x)
    i_p, i_f = nl.mgrid[0:128, 0:x.shape[1]]
    stats = nisa.bn_stats(t, mask=(i_f < n))
    nl.store(out, value=nisa.bn_aggr(stats))
    return out
"""


def test_bn_stats_honours_its_mask(run_kernel, rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    out = run_kernel(BN_MASKED, x).output
    kept = x[:, :37]
    np.testing.assert_allclose(out[:, 0], kept.mean(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[:, 1], kept.var(1), rtol=1e-4, atol=1e-6)


MATMUL_MODE = """
@nki.jit
def kernel(a, b):
    out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    at = nl.load(a, dtype=DTYPE)
    bt = nl.load(b, dtype=DTYPE)
    acc = nisa.nc_matmul(at, bt, perf_mode=nisa.matmul_perf_mode.double_row)
    nl.store(out, value=nl.copy(acc))
    return out
"""


def test_matmul_double_row_perf_mode(run_kernel, rng):
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 256)).astype(np.float32)
    res = run_kernel(MATMUL_MODE.replace("DTYPE", "nl.float8_e4m3"), a, b)
    q = lambda v: v.astype(ml_dtypes.float8_e4m3).astype(np.float32)  # noqa: E731
    np.testing.assert_allclose(res.output, q(a).T @ q(b), rtol=1e-4, atol=1e-3)
    mm = next(i for i in res.trace.instructions if i.op == "nc_matmul")
    assert mm.attrs["perf_mode"] == "double_row"
    with pytest.raises(NKIRuleError, match="fp8"):
        run_kernel(MATMUL_MODE.replace("DTYPE", "nl.bfloat16"), a, b)


SELECT_PSUM = """
@nki.jit
def kernel(q, k):
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    scores = nisa.nc_matmul(nl.load(q), nl.load(k))           # PSUM
    i_q, i_k = nl.mgrid[0:128, 0:128]
    causal = nisa.affine_select(pred=(i_q - i_k >= 0), on_true_tile=scores, on_false_value=-9984.0)
    nl.store(out, value=causal)
    return out
"""


def test_affine_select_reads_psum_through_a_copy(run_kernel, rng):
    q = rng.standard_normal((64, 128)).astype(np.float32)
    k = rng.standard_normal((64, 128)).astype(np.float32)
    res = run_kernel(SELECT_PSUM, q, k)
    want = np.where(np.tril(np.ones((128, 128), bool)), q.T @ k, -9984.0)
    np.testing.assert_allclose(res.output, want, rtol=1e-4, atol=1e-4)
    ops = [(i.engine, i.op) for i in res.trace.instructions]
    sel = ops.index(("gpsimd", "affine_select"))
    assert ops[sel - 1] == ("vector", "tensor_copy")
    assert res.trace.instructions[sel - 1].reads[0].buffer == "psum"


GATHER_SCATTER = """
@nki.jit
def kernel(data, idx):
    rows = nl.ndarray((idx.shape[0], data.shape[1]), dtype=data.dtype, buffer=nl.shared_hbm)
    scattered = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.shared_hbm)
    ids = nl.load(idx)                                        # [P, 1] int32
    g = nl.load(data[ids, nl.arange(data.shape[1])[None, :]])  # gather rows
    nl.store(rows, value=g)
    nl.store(scattered[ids, :], value=nl.add(g, 1.0))          # scatter them back, plus one
    nisa.dma_copy(dst=scattered[ids, :], src=data[ids, :], dst_rmw_op=np.add)   # and accumulate the originals
    return rows, scattered
"""


def test_indirect_dma_gather_and_scatter(run_kernel, rng):
    data = rng.standard_normal((100, 32)).astype(np.float32)
    idx = rng.permutation(100)[:64].astype(np.int32).reshape(64, 1)
    res = run_kernel(GATHER_SCATTER, data, idx)
    rows, scattered = res.outputs
    np.testing.assert_array_equal(rows, data[idx[:, 0]])
    np.testing.assert_allclose(scattered[idx[:, 0]], 2 * data[idx[:, 0]] + 1.0, rtol=1e-5, atol=1e-6)
    untouched = np.setdiff1d(np.arange(100), idx[:, 0])
    assert np.isnan(scattered[untouched]).all()
    indirect = [i for i in res.trace.instructions if i.attrs.get("indirect")]
    ids_tile = indirect[0].reads[1].tensor      # every indirect DMA reads the index tile (a dependency)
    assert len(indirect) == 3 and all(any(r.tensor == ids_tile for r in i.reads) for i in indirect)


def test_indirect_index_must_be_an_integer_tile(run_kernel, rng):
    data = rng.standard_normal((100, 32)).astype(np.float32)
    idx = np.arange(64, dtype=np.float32).reshape(64, 1)
    with pytest.raises(KernelError, match="integer SBUF tile"):
        run_kernel(GATHER_SCATTER, data, idx)


def test_indirect_index_out_of_bounds_is_reported(run_kernel, rng):
    data = rng.standard_normal((100, 32)).astype(np.float32)
    idx = np.full((64, 1), 100, np.int32)
    with pytest.raises(KernelError, match="out of bounds"):
        run_kernel(GATHER_SCATTER, data, idx)


DOUBLE_ROW_3D = """
@nki.jit
def kernel(a, b):
    # a: [128, 2, 128] and b: [128, 2, 512] fp8: two K-rows per PE pass, K = 256 in all
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    at = nl.load(a)
    bt = nl.load(b)
    acc = nisa.nc_matmul(at, bt, perf_mode="double_row_gen3")
    scale = nl.load(a[:, 0, 0:1], dtype=nl.float32)
    nl.store(out, value=nisa.tensor_tensor(nl.copy(acc), scale, nl.multiply))   # a [P, 1] operand broadcasts
    return out
"""


def test_double_row_matmul_on_paired_rows_and_column_broadcast(run_kernel, rng):
    q = lambda v: v.astype(ml_dtypes.float8_e4m3)  # noqa: E731
    a, b = q(rng.standard_normal((128, 2, 128))), q(rng.standard_normal((128, 2, 512)))
    res = run_kernel(DOUBLE_ROW_3D, a, b)
    af, bf = a.astype(np.float32), b.astype(np.float32)
    want = np.einsum("kim,kin->mn", af, bf) * af[:, 0, 0:1]
    np.testing.assert_allclose(res.output, want, rtol=1e-4, atol=1e-3)
    mm = next(i for i in res.trace.instructions if i.op == "nc_matmul")
    assert mm.attrs["rows"] == 2 and mm.attrs["perf_mode"] == "double_row"
