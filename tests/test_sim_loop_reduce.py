"""nl.loop_reduce as documented: reduction over the *named* loops, the destination is the accumulator.

The forms are the ones compiler-generated kernels (the paper's NKIBench baselines) use: the reduced
loop is not the innermost, several loops are named, loops in between index the destination, the
destination is an uninitialized buffer or a zero-filled one, and the named loops are affine.
"""
import numpy as np
import pytest

from accelopt_nb.errors import KernelError

# dst[i, j] = sum over k of x[i, k, j]: the named loop k is inside the affine loop i that indexes the
# destination, and the destination buffer is never initialized (the first iteration restarts it).
NAMED_INNER = """
@nki.jit
def kernel(x):
    out = nl.ndarray((x.shape[0], 128, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((x.shape[0], nl.par_dim(128), 1), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(x.shape[0]):
        for k in nl.affine_range(x.shape[1]):
            t = nl.load(x[i, k, nl.arange(128)[:, None], nl.arange(64)[None, :]])
            part = nisa.tensor_reduce(nl.add, data=t, axis=[1], dtype=nl.float32)
            acc[i, nl.arange(128)[:, None], 0] = nl.loop_reduce(part, op=np.add, loop_indices=[k], dtype=nl.float32)
        nl.store(out[i, nl.arange(128)[:, None], 0], value=acc[i, nl.arange(128)[:, None], 0])
    return out
"""


def test_named_inner_loop_into_uninitialized_buffer(run_kernel, rng):
    x = rng.standard_normal((3, 4, 128, 64)).astype(np.float32)
    out = run_kernel(NAMED_INNER, x).output
    np.testing.assert_allclose(out[..., 0], x.sum(axis=(1, 3)), rtol=1e-5, atol=1e-5)


# max over (a, c) while the loop b between them indexes the destination: the paper's softmax form
TWO_NAMED_LOOPS = """
@nki.jit
def kernel(x):
    A, B, C = x.shape[0], x.shape[1], x.shape[2]
    out = nl.ndarray((B, 128, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    m = nl.ndarray((B, nl.par_dim(128), 1), dtype=nl.float32, buffer=nl.sbuf)
    for a in nl.affine_range(A):
        for b in nl.affine_range(B):
            for c in nl.affine_range(C):
                t = nl.load(x[a, b, c])
                r = nisa.tensor_reduce(nl.max, data=t, axis=[1], dtype=nl.float32)
                m[b, nl.arange(128)[:, None], 0] = nl.loop_reduce(r, op=np.max, loop_indices=[a, c], dtype=nl.float32)
    for b in nl.affine_range(B):
        nl.store(out[b], value=m[b])
    return out
"""


def test_two_named_loops_around_an_unnamed_one(run_kernel, rng):
    x = rng.standard_normal((3, 2, 4, 128, 32)).astype(np.float32)
    out = run_kernel(TWO_NAMED_LOOPS, x).output
    np.testing.assert_array_equal(out[..., 0], x.max(axis=(0, 2, 4)))


# the named loop is an *outer* sequential loop; affine loops inside it index the destination, which
# starts zero-filled (the paper's lora form: an accumulation over K chunks in SBUF)
NAMED_OUTER = """
@nki.jit
def kernel(x):
    K, J = x.shape[0], x.shape[1]
    out = nl.ndarray((J, 128, 256), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.full((J, nl.par_dim(128), 256), fill_value=0.0, dtype=nl.float32, buffer=nl.sbuf)
    for k in nl.sequential_range(K):
        for j in nl.affine_range(J):
            t = nl.load(x[k, j])
            acc[j, nl.arange(128)[:, None], nl.arange(256)[None, :]] = nl.loop_reduce(
                t, op=np.add, loop_indices=[k], mask=None, dtype=nl.float32)
    for j in nl.affine_range(J):
        nl.store(out[j], value=acc[j])
    return out
"""


def test_named_outer_loop_accumulates_over_all_its_iterations(run_kernel, rng):
    x = rng.standard_normal((5, 3, 128, 256)).astype(np.float32)
    res = run_kernel(NAMED_OUTER, x)
    np.testing.assert_allclose(res.output, x.sum(axis=0), rtol=1e-5, atol=1e-5)
    reduces = [i for i in res.trace.instructions if i.api == "nl.loop_reduce"]
    assert len(reduces) == 15 and all(i.engine == "vector" for i in reduces)
    # after the first k, each reduction also reads its destination (the accumulator input)
    acc_id = reduces[0].writes[0].tensor
    assert [any(r.tensor == acc_id for r in i.reads) for i in reduces] == [False] * 3 + [True] * 12


def test_loop_reduce_in_trace_only_mode(run_kernel, rng):
    x = rng.standard_normal((5, 3, 128, 256)).astype(np.float32)
    res = run_kernel(NAMED_OUTER, x, trace_only=True)
    assert sum(i.api == "nl.loop_reduce" for i in res.trace.instructions) == 15


REBOUND = """
@nki.jit
def kernel(x):
    out = nl.ndarray((x.shape[0], 128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0]):
        m = None
        for k in nl.sequential_range(x.shape[1]):   # sequential: the store below rewrites each k
            for j in nl.affine_range(2):    # an inner loop the reduction is not over
                t = nl.load(x[i, k, nl.arange(128)[:, None], 32 * j + nl.arange(32)[None, :]])
                m = nl.loop_reduce(t, op=np.minimum, loop_indices=[k], dtype=nl.float32)
                nl.store(out[i, nl.arange(128)[:, None], 32 * j + nl.arange(32)[None, :]], value=m)
    return out
"""


def test_rebound_result_is_the_call_sites_accumulator(run_kernel, rng):
    x = rng.standard_normal((2, 3, 128, 64)).astype(np.float32)
    np.testing.assert_array_equal(run_kernel(REBOUND, x).output, x.min(axis=1))


MASKED = """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    ip, jf = nl.mgrid[0:128, 0:64]
    for k in nl.affine_range(x.shape[0]):
        t = nl.load(x[k])
        acc[ip, jf] = nl.loop_reduce(t, op=np.add, loop_indices=[k], mask=(jf < 40))
    nl.store(out, value=acc)
    return out
"""


def test_masked_loop_reduce_leaves_the_rest_of_the_destination(run_kernel, rng):
    x = rng.standard_normal((4, 128, 64)).astype(np.float32)
    want = np.zeros((128, 64), np.float32)
    want[:, :40] = x[:, :, :40].sum(axis=0)
    np.testing.assert_allclose(run_kernel(MASKED, x).output, want, rtol=1e-5, atol=1e-5)


NOT_A_LOOP = """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    for k in nl.affine_range(2):
        t = nl.load(x[k])
        m = nl.loop_reduce(t, op=np.add, loop_indices=[7])
    nl.store(out, value=m)
    return out
"""


def test_loop_indices_must_name_an_enclosing_loop(run_kernel, rng):
    x = rng.standard_normal((2, 128, 64)).astype(np.float32)
    with pytest.raises(KernelError, match="enclosing loop") as exc:
        run_kernel(NOT_A_LOOP, x)
    assert exc.value.line == 14
