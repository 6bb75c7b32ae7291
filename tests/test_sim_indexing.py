"""Basic and advanced indexing, block dimensions, masks on ragged tiles."""
import numpy as np
import pytest


def test_block_dims_and_arange_indexing(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    T, P, F = a.shape
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((T, par_dim(P), F), dtype=a.dtype, buffer=nl.sbuf)
    i_p, i_f = nl.mgrid[0:P, 0:F]
    for t in nl.affine_range(T):
        buf[t, i_p, i_f] = nl.load(a[t, i_p, i_f])
    for t in nl.affine_range(T):
        nl.store(out[t], value=nl.multiply(buf[t], float(t + 1)))
    return out
"""
    a = rng.standard_normal((3, 16, 24)).astype(np.float32)
    np.testing.assert_allclose(run_kernel(body, a).output, a * np.array([1, 2, 3])[:, None, None])


def test_strided_and_gathered_free_axis(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    P, F = a.shape
    even = nl.ndarray((P, F // 2), dtype=a.dtype, buffer=nl.shared_hbm)
    rev = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    nl.store(even, value=nl.load(a[i_p, 2 * nl.arange(F // 2)[None, :]]))
    nl.store(rev, value=nl.load(a[i_p, F - 1 - nl.arange(F)[None, :]]))
    return even, rev
"""
    a = rng.standard_normal((8, 10)).astype(np.float32)
    even, rev = run_kernel(body, a).outputs
    np.testing.assert_array_equal(even, a[:, 0::2])
    np.testing.assert_array_equal(rev, a[:, ::-1])


def test_index_expression_with_more_dims_than_tensor(run_kernel, rng):
    # the AccelOpt idiom: view the single free dim of a (128, 1024) tile as (128, 8, 128)
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    view = t[nl.arange(128)[:, None, None], 128 * nl.arange(8)[None, :, None] + nl.arange(128)[None, None, :]]
    nl.store(out, value=nl.sum(view, axis=2))
    return out
"""
    a = rng.standard_normal((128, 1024)).astype(np.float32)
    np.testing.assert_allclose(run_kernel(body, a).output, a.reshape(128, 8, 128).sum(axis=2), rtol=1e-5)


def test_loop_variables_in_affine_index_terms(run_kernel, rng):
    body = """
@nki.jit
def kernel(v):
    A, B, P, C, F = v.shape
    out = nl.ndarray((A, B, C, P, F), dtype=v.dtype, buffer=nl.shared_hbm)
    for i0 in nl.affine_range(A):
        for i3 in nl.affine_range(B):
            for i5 in nl.affine_range(C):
                t = nl.load(v[i0, i3, nl.arange(P)[:, None], i5, nl.arange(F)[None, :]])
                nl.store(out[i0, i3, i5], value=t)
    return out
"""
    v = rng.standard_normal((2, 2, 16, 3, 8)).astype(np.float32)
    np.testing.assert_array_equal(run_kernel(body, v).output, v.transpose(0, 1, 3, 2, 4))


def test_masked_ragged_tiles(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    M, N = a.shape
    out = nl.ndarray((M, N), dtype=a.dtype, buffer=nl.shared_hbm)
    i_f = nl.arange(N)[None, :]
    for m in nl.affine_range((M + 127) // 128):
        i_p = m * 128 + nl.arange(128)[:, None]
        t = nl.load(a[i_p, i_f], mask=(i_p < M))
        y = nl.exp(t, mask=(i_p < M))
        nl.store(out[i_p, i_f], value=y, mask=(i_p < M))
    return out
"""
    a = rng.standard_normal((300, 5)).astype(np.float32)
    np.testing.assert_allclose(run_kernel(body, a).output, np.exp(a), rtol=1e-6)


def test_affine_mask_form_used_by_generated_kernels(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    M, N = a.shape
    out = nl.ndarray((M, N), dtype=a.dtype, buffer=nl.shared_hbm)
    for i0 in nl.affine_range((M + 127) // 128):
        t = nl.load(a[i0 * 128 + nl.arange(128)[:, None], nl.arange(N)[None, :]],
                    mask=-128 * i0 - nl.arange(128)[:, None] + (M - 1) >= 0)
        nl.store(out[i0 * 128 + nl.arange(128)[:, None], nl.arange(N)[None, :]], value=t,
                 mask=-128 * i0 - nl.arange(128)[:, None] + (M - 1) >= 0)
    return out
"""
    a = rng.standard_normal((200, 3)).astype(np.float32)
    np.testing.assert_array_equal(run_kernel(body, a).output, a)


def test_ds_slices_and_nested_view_indexing(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((4, 6), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a[nl.ds(2, 4), :])
    nl.store(out, value=t[:, 1:7])
    return out
"""
    a = rng.standard_normal((8, 10)).astype(np.float32)
    np.testing.assert_array_equal(run_kernel(body, a).output, a[2:6, 1:7])


def test_leftmost_sliced_axis_becomes_partition_axis(run_kernel, rng):
    body = """
@nki.jit
def kernel(b):
    o1 = nl.ndarray((1, b.shape[2]), dtype=b.dtype, buffer=nl.shared_hbm)
    o2 = nl.ndarray((b.shape[2], 1), dtype=b.dtype, buffer=nl.shared_hbm)
    t1 = nl.load(b[0, 1:2, 0:b.shape[2]])   # (1, L)
    t2 = nl.load(b[0, 1, 0:b.shape[2]])     # L on partitions
    assert t1.shape == (1, b.shape[2]) and t2.shape[0] == b.shape[2]
    nl.store(o1, value=t1)
    nl.store(o2, value=t2)
    return o1, o2
"""
    b = rng.standard_normal((2, 3, 16)).astype(np.float32)
    o1, o2 = run_kernel(body, b).outputs
    np.testing.assert_array_equal(o1, b[0, 1:2])
    np.testing.assert_array_equal(o2[:, 0], b[0, 1])


def test_mixing_slices_and_arange_is_rejected(run_kernel, rng):
    from accelopt_nb.errors import NKIRuleError
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a[nl.arange(4)[:, None], 0:2]))
    return out
"""
    with pytest.raises(NKIRuleError, match="mixing basic"):
        run_kernel(body, rng.standard_normal((4, 4)).astype(np.float32))


def test_out_of_bounds_index_without_mask(run_kernel, rng):
    from accelopt_nb.errors import NKIRuleError
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 4), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a[nl.arange(128)[:, None], nl.arange(4)[None, :]]))
    return out
"""
    with pytest.raises(NKIRuleError, match="out of bounds") as exc:
        run_kernel(body, rng.standard_normal((100, 4)).astype(np.float32))
    assert exc.value.line is not None and exc.value.api == "nl.load"


def test_assigning_an_arange_view_of_a_fresh_result_copies_it(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((a.shape[0], 4), dtype=a.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((a.shape[0], 4), dtype=nl.float32, buffer=nl.sbuf)
    e = nl.exp(nl.load(a))
    buf[...] = e[nl.arange(a.shape[0])[:, None], 2 * nl.arange(4)[None, :]]
    nl.store(out, value=buf)
    return out
"""
    a = rng.standard_normal((8, 8)).astype(np.float32)
    res = run_kernel(body, a)
    np.testing.assert_allclose(res.output, np.exp(a)[:, 0::2], rtol=1e-6)
    assert res.trace.op_counts()["tensor_copy"] == 1


def test_outer_masks_share_summaries_only_with_equal_values():
    """A mask built as (rows < n) & (cols < m) is named by its operands (far smaller than it): masks of
    equal values share their summaries, masks that differ anywhere never do, whatever the operator and
    operand order."""
    from accelopt_nb.sim.core import indexing as ix

    rows, cols = ix.arange(8)[:, None], ix.arange(16)[None, :]
    builds = [lambda n, m: (rows < n) & (cols < m), lambda n, m: (cols < m) & (rows < n),
              lambda n, m: (rows < n) | (cols < m), lambda n, m: (rows < n) ^ (cols < m),
              lambda n, m: (cols < m).values & (rows < n), lambda n, m: (rows < n).values | (cols < m)]
    for _ in range(2):   # the second pass answers from the summaries the first one kept
        for n, m in [(8, 16), (5, 16), (8, 11), (5, 11), (11, 5), (3, 3)]:
            for build in builds:
                got = build(n, m).values
                want = np.asarray(got)
                assert ix.mask_count(got, (8, 16)) == np.count_nonzero(want)
                assert ix.mask_all(got) == bool(want.all())
                assert ix.mask_rows_cols(got, (8, 16)) == (np.count_nonzero(want.any(axis=1)),
                                                          np.count_nonzero(want.any(axis=0)))
