"""The indexing fast path (SimOptions.fast_indexing) against the general gather/stamp path.

Affine ``nl.arange`` accesses are addressed as slices and loop-carried writes are checked on a log of
written boxes. Each kernel here runs both ways and must give identical outputs (NaN for NaN), identical
instruction streams (regions, sizes, attributes) and identical errors and warnings.
"""
import dataclasses
import re

import numpy as np
import pytest

from accelopt_nb.errors import KernelError, LoopCarriedDependencyError
from accelopt_nb.sim.core.boxes import EMPTY, Cover, WriteLog, box_of, masked_box
from accelopt_nb.sim.core.indexing import arange, basic_key, mask_count, mask_rows_cols


def _stream(res):
    return [dataclasses.replace(ins, file=None) for ins in res.trace.instructions]


def both(run_kernel, body, *inputs, **opts):
    """Run a kernel with and without the fast path; assert they agree; return the fast result."""
    fast = run_kernel(body, *inputs, fast_indexing=True, **opts)
    general = run_kernel(body, *inputs, fast_indexing=False, **opts)
    assert len(fast.outputs) == len(general.outputs)
    for a, b in zip(fast.outputs, general.outputs):
        assert a.dtype == b.dtype
        if a.dtype.kind not in "fiub":  # bfloat16/fp8: NumPy's NaN-aware comparison needs a native float
            a, b = a.astype(np.float32), b.astype(np.float32)
        np.testing.assert_array_equal(a, b)
    assert _stream(fast) == _stream(general)
    assert fast.trace.tensors == general.trace.tensors
    assert [w.split(": ", 1)[1] for w in fast.warnings] == [w.split(": ", 1)[1] for w in general.warnings]
    return fast


def both_raise(run_kernel, body, *inputs, error=KernelError, **opts):
    errors = []
    for fast in (True, False):
        with pytest.raises(error) as e:
            run_kernel(body, *inputs, fast_indexing=fast, **opts)
        errors.append((type(e.value), e.value.message, e.value.line, e.value.api))
    assert errors[0] == errors[1]
    return errors[0]


RAGGED = """
@nki.jit
def kernel(x, g):
    M, N = x.shape
    MT, NT = (M + 127) // 128, (N + 63) // 64
    out = nl.ndarray((M, N), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    xs = nl.ndarray((MT, NT, nl.par_dim(128), 64), dtype=np.float32, buffer=nl.sbuf)
    ys = nl.ndarray((MT, NT, 2, nl.par_dim(128), 32), dtype=np.float32, buffer=nl.sbuf)
    zs = nl.ndarray((MT, NT, nl.par_dim(128), 64), dtype=np.float32, buffer=nl.sbuf)
    for i in nl.affine_range(MT):
        for j in nl.affine_range(NT):
            xs[i, j, nl.arange(128)[:, None], nl.arange(64)[None, :]] = nl.load(
                x[128 * i + nl.arange(128)[:, None], 64 * j + nl.arange(64)[None, :]],
                mask=(-128 * i + -1 * nl.arange(128)[:, None] + (M - 1) >= 0) & (64 * j + nl.arange(64)[None, :] < N))
            for h in nl.affine_range(2):
                ys[i, j, h, nl.arange(128)[:, None], nl.arange(32)[None, :]] = nisa.tensor_scalar(
                    data=xs[i, j, nl.arange(128)[:, None], 32 * h + nl.arange(32)[None, :]], op0=nl.multiply,
                    operand0=2.0, mask=(128 * i + nl.arange(128)[:, None] < M) & (64 * j + 32 * h + nl.arange(32)[None, :] < N))
                zs[i, j, nl.arange(128)[:, None], 32 * h + nl.arange(32)[None, :]] = nl.add(
                    ys[i, j, h, nl.arange(128)[:, None], nl.arange(32)[None, :]],
                    nl.load(g[128 * i + nl.arange(128)[:, None], 0 * nl.arange(32)[None, :]],   # a broadcast gather
                            mask=128 * i + nl.arange(128)[:, None] < M),
                    mask=(128 * i + nl.arange(128)[:, None] < M) & (64 * j + 32 * h + nl.arange(32)[None, :] < N))
            nl.store(out[128 * i + nl.arange(128)[:, None], 64 * j + nl.arange(64)[None, :]],
                     value=zs[i, j, nl.arange(128)[:, None], nl.arange(64)[None, :]],
                     mask=(128 * i + nl.arange(128)[:, None] < M) & (64 * j + nl.arange(64)[None, :] < N))
    return out
"""


def test_compiler_style_ragged_tiles_masked_on_both_axes(run_kernel, rng):
    x = rng.standard_normal((200, 150)).astype(np.float32)
    g = rng.standard_normal((200, 1)).astype(np.float32)
    res = both(run_kernel, RAGGED, x, g)
    np.testing.assert_allclose(res.output.astype(np.float32), 2 * x + g, rtol=1e-2, atol=1e-2)
    assert both(run_kernel, RAGGED, x, g, trace_only=True).trace.instructions


ACCESS_PATTERNS = """
@nki.jit
def kernel(a, b):
    P, F = a.shape
    strided = nl.ndarray((P, F // 2), dtype=a.dtype, buffer=nl.shared_hbm)
    rev = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.shared_hbm)
    tr = nl.ndarray((F, P), dtype=a.dtype, buffer=nl.shared_hbm)
    grid = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.shared_hbm)
    col = nl.ndarray((P, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    ints = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    nl.store(strided, value=nl.load(a[i_p, 2 * nl.arange(F // 2)[None, :] + 1]))
    nl.store(rev, value=nl.load(a[i_p, F - 1 - nl.arange(F)[None, :]]))
    t = nl.ndarray((F, P), dtype=a.dtype, buffer=nl.sbuf)
    t[...] = nl.load(a[nl.arange(P)[None, :], nl.arange(F)[:, None]])
    nl.store(tr[nl.arange(F)[:, None], nl.arange(P)[None, :]], value=t)
    gp, gf = nl.mgrid[0:P, 0:F]
    nl.store(grid[gp, gf], value=nl.load(a[gp, gf]))
    c = nl.ndarray((nl.par_dim(P), 4), dtype=a.dtype, buffer=nl.sbuf)
    c[nl.arange(P)[:, None], 2] = nl.load(a[nl.arange(P)[:, None], 3])
    nl.store(col, value=c[nl.arange(P)[:, None], 2])
    k = nl.ndarray((nl.par_dim(P), F), dtype=nl.int32, buffer=nl.sbuf)
    k[i_p, nl.arange(F)[None, :]] = nl.load(b[i_p, :])
    nl.store(ints[i_p, nl.arange(F)[None, :]], value=k[i_p, nl.arange(F)[None, :]])
    return strided, rev, tr, grid, col, ints
"""


def test_strided_reversed_transposed_grid_and_column_accesses(run_kernel, rng):
    a = rng.standard_normal((16, 10)).astype(np.float32)
    b = rng.integers(-50, 50, (16, 10)).astype(np.int32)
    strided, rev, tr, grid, col, ints = both(run_kernel, ACCESS_PATTERNS, a, b).outputs
    np.testing.assert_array_equal(strided, a[:, 1::2])
    np.testing.assert_array_equal(rev, a[:, ::-1])
    np.testing.assert_array_equal(tr, a.T)
    np.testing.assert_array_equal(grid, a)
    np.testing.assert_array_equal(col, a[:, 3:4])
    np.testing.assert_array_equal(ints, b)


def test_masked_off_indices_may_leave_the_tensor(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    M, N = a.shape
    out = nl.ndarray((M, N), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range((M + 127) // 128):
        t = nl.load(a[128 * i + nl.arange(128)[:, None], nl.arange(N)[None, :]],
                    mask=128 * i + nl.arange(128)[:, None] < M)
        nl.store(out[128 * i + nl.arange(128)[:, None], nl.arange(N)[None, :]], value=nl.exp(t, mask=128 * i + nl.arange(128)[:, None] < M),
                 mask=128 * i + nl.arange(128)[:, None] < M)
    return out
"""
    a = rng.standard_normal((130, 8)).astype(np.float32)
    np.testing.assert_allclose(both(run_kernel, body, a).output, np.exp(a), rtol=1e-6)


def test_masked_psum_accumulation(run_kernel, rng):
    body = """
@nki.jit
def kernel(lhsT, rhs):
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((nl.par_dim(M), 512), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128):
        acc[nl.arange(M)[:, None], nl.arange(512)[None, :]] += nisa.nc_matmul(
            nl.load(lhsT[128 * k + nl.arange(128)[:, None], nl.arange(M)[None, :]]),
            nl.load(rhs[128 * k + nl.arange(128)[:, None], nl.arange(512)[None, :]], mask=nl.arange(512)[None, :] < N),
            mask=nl.arange(512)[None, :] < N)
    res = nl.copy(acc[nl.arange(M)[:, None], nl.arange(512)[None, :]], mask=nl.arange(512)[None, :] < N)
    nl.store(out[nl.arange(M)[:, None], nl.arange(512)[None, :]], value=res, mask=nl.arange(512)[None, :] < N)
    return out
"""
    lhsT = rng.standard_normal((256, 64)).astype(np.float32)
    rhs = rng.standard_normal((256, 300)).astype(np.float32)
    np.testing.assert_allclose(both(run_kernel, body, lhsT, rhs).output, lhsT.T @ rhs, rtol=1e-4, atol=1e-4)


# ---- loop-carried writes: the box log against per-element stamps ---------------------------------------
CONFLICT = """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((nl.par_dim(128), 64), dtype=a.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(2):
        buf[nl.arange(128)[:, None], WRITE] = nl.load(a[nl.arange(128)[:, None], WRITE], MASK)
    nl.store(out, value=buf)
    return out
"""


@pytest.mark.parametrize("write, mask", [
    ("nl.arange(64)[None, :]", "mask=None"),                                      # same box twice
    ("24 * i + nl.arange(40)[None, :]", "mask=None"),                             # overlapping boxes
    ("i + 2 * nl.arange(32)[None, :]", "mask=None"),                              # even/odd interleave: legal
    ("24 * i + nl.arange(40)[None, :]", "mask=nl.arange(40)[None, :] < 24"),      # the mask removes the overlap
    ("nl.arange(64)[None, :]", "mask=nl.arange(64)[None, :] >= nl.arange(128)[:, None] // 2"),  # triangular, non-box
    ("nl.arange(64)[None, :]", "mask=(nl.arange(64)[None, :] < 32 * i + 32) & (nl.arange(64)[None, :] >= 32 * i)"),
    # ragged tiles whose keys run past the end: the mask keeps a box inside (apart: legal; overlapping)
    ("40 * i + nl.arange(40)[None, :]", "mask=40 * i + nl.arange(40)[None, :] < 64"),
    ("30 * i + nl.arange(40)[None, :]", "mask=30 * i + nl.arange(40)[None, :] < 64"),
])
@pytest.mark.parametrize("mode", ["error", "warn"])
@pytest.mark.filterwarnings("ignore:.*is assigned at the same location")
def test_loop_carried_writes_same_verdict(run_kernel, rng, write, mask, mode):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    body = CONFLICT.replace("WRITE", write).replace("MASK", mask)
    legal = "2 * nl.arange" in write or "< 24" in mask or "< 32 * i + 32" in mask or "40 * i" in write
    if legal or mode == "warn":
        try:
            both(run_kernel, body, a, affine_write_conflicts=mode, check_uninitialized=False)
        except KernelError as exc:  # a kernel that reads unwritten memory fails the same way both ways
            both_raise(run_kernel, body, a, error=type(exc), affine_write_conflicts=mode)
    else:
        err = both_raise(run_kernel, body, a, error=LoopCarriedDependencyError, affine_write_conflicts=mode)
        assert "iteration 1" in err[1]


def test_box_log_switches_to_stamps_after_a_non_box_write(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((nl.par_dim(128), 64), dtype=a.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(2):
        buf[nl.arange(128)[:, None], 32 * i + nl.arange(32)[None, :]] = nl.load(a[nl.arange(128)[:, None], 32 * i + nl.arange(32)[None, :]])
    for j in nl.affine_range(2):
        buf[nl.arange(128)[:, None], nl.arange(64)[None, :]] = nl.load(a, mask=nl.arange(64)[None, :] > nl.arange(128)[:, None] // 4 + 31 * j)
    nl.store(out, value=buf)
    return out
"""
    a = rng.standard_normal((128, 64)).astype(np.float32)
    err = both_raise(run_kernel, body, a, error=LoopCarriedDependencyError)
    assert "iteration 1" in err[1]


# ---- the helpers on their own ---------------------------------------------------------------------------
KEYS = [
    (3, arange(8)[:, None] * 2 + 1, arange(5)[None, :] + 4),
    (2, arange(8)[:, None, None], 4 * arange(3)[None, :, None] + arange(4)[None, None, :]),  # one axis, two dims
    (arange(8)[:, None], 7, arange(5)[None, :]),
    (arange(1)[:, None], arange(6)[None, :] * 3),
    (arange(8)[None, :], arange(5)[:, None]),                 # transposed: no basic key
    (arange(8)[:, None], arange(8)[:, None] + 0 * arange(3)[None, :]),  # two arrays vary on one axis
    (7 - arange(8)[:, None], arange(5)[None, :]),             # descending
    (arange(8)[:, None] + 9, arange(5)[None, :]),             # out of bounds
]


@pytest.mark.parametrize("key", KEYS, ids=range(len(KEYS)))
@pytest.mark.parametrize("known", [True, False], ids=["aff", "inspected"])
def test_basic_key_selects_the_same_elements_in_the_same_order(key, known):
    shape = (10, 16, 10)[:len(key)] if len(key) == 2 else (10, 16, 12)
    a = np.arange(np.prod(shape)).reshape(shape)
    norm = tuple(k.values if hasattr(k, "values") else k for k in key)
    affs = {i: k.aff for i, k in enumerate(key) if hasattr(k, "aff")} if known else None
    basic = basic_key(norm, shape, affs)
    in_bounds = all(not hasattr(k, "values") or (k.values.min() >= 0 and k.values.max() < n) for k, n in zip(key, shape))
    if basic is None:
        return
    assert in_bounds
    expected = a[norm]
    np.testing.assert_array_equal(a[basic].reshape(expected.shape), expected)
    assert np.shares_memory(a[basic], a)


PLANNED_KEYS = [  # (key for loop value i, whether the plan builds it)
    (lambda i: (i, arange(128)[:, None], 512 * (i % 2) + arange(512)[None, :]), True),
    # two varying axes in one expression: no known progression, the general path
    (lambda i: (i, arange(128)[:, None, None], 128 * arange(8)[None, :, None] + arange(128)[None, None, :]), False),
    (lambda i: (i, 2 * arange(64)[:, None] + 1, arange(0, 7)[None, :] * 3), True),     # strided both ways
    (lambda i: (i, arange(5 * i, 5 * i + 1)[:, None], arange(512)[None, :]), True),   # a 1-element expression
    (lambda i: (i, 0, arange(128)), True),                                            # 1-D on chip: [P, 1]
    (lambda i: (i, arange(128)[None, :], arange(512)[:, None]), False),               # transposed
    (lambda i: (i, arange(128)[:, None] + 100, arange(512)[None, :]), False),         # out of bounds
    (lambda i: (i, arange(3, 1)[:, None], arange(512)[None, :]), False),              # empty
    (lambda i: (i + 5, arange(128)[:, None], arange(512)[None, :]), False),           # int out of bounds: error
    (lambda i: (i, arange(128)[:, None] // 2, arange(512)[None, :]), False),          # no known progression
    (lambda i: (i, slice(0, 128), arange(512)[None, :]), False),                      # a slice
]


@pytest.mark.parametrize("buffer", ["sbuf", "hbm"])
@pytest.mark.parametrize("make_key, plans", PLANNED_KEYS, ids=range(len(PLANNED_KEYS)))
def test_planned_views_equal_the_general_views(make_key, plans, buffer):
    """Compiler-style keys take a per-structure plan; the view must be the one the general path builds."""
    from accelopt_nb.sim.core.runtime import Runtime, SimOptions, running
    from accelopt_nb.sim.core.tensor import Tensor
    from accelopt_nb.sim.core.views import View, _compiler_view, normalize_key

    def describe(v):
        return (v.shape, v.advanced, [k.tolist() if isinstance(k, np.ndarray) else k for k in v.key], v.basic,
                v._affs, v.region())

    rt = Runtime(SimOptions(), "k", set())
    with running(rt):
        t = Tensor(rt, (4, 128, 1024), np.float32, buffer, "internal", par_axis=1 if buffer == "sbuf" else 0)
        for i in range(4):
            key = make_key(i)
            try:
                affs: dict = {}
                general = View(t, normalize_key(t, key, affs), affs)
            except KernelError as e:
                with pytest.raises(KernelError, match=re.escape(e.message)):
                    t[key]
                continue
            planned = _compiler_view(t, key)
            assert (planned is not None) == plans
            assert planned is None or describe(planned) == describe(general)
            assert describe(t[key]) == describe(general)


def test_basic_key_refuses_what_slices_cannot_express():
    shape = (10, 16)
    for key in KEYS[4:]:
        norm = tuple(k.values if hasattr(k, "values") else k for k in key)
        assert basic_key(norm, shape, {i: k.aff for i, k in enumerate(key) if hasattr(k, "aff")}) is None
        assert basic_key(norm, shape) is None


def test_basic_key_of_two_dims_on_one_axis_needs_one_progression():
    shape = (10, 16, 12)
    flat = tuple(k.values if hasattr(k, "values") else k for k in KEYS[1])   # 4 * i + j over (3, 4): 0..11
    assert basic_key(flat, shape) == (2, slice(0, 8, 1), slice(0, 12, 1))
    gap = (2, arange(8)[:, None, None], 5 * arange(2)[None, :, None] + arange(4)[None, None, :])     # 0-3, 5-8
    apart = (2, arange(8)[:, None, None, None], 4 * arange(3)[None, :, None, None] + arange(4)[None, None, None, :])
    for key in (gap, apart):
        assert basic_key(tuple(k.values if hasattr(k, "values") else k for k in key), shape) is None


@pytest.mark.parametrize("mshape, shape", [((128, 1), (128, 512)), ((1, 512), (128, 512)), ((128, 512), (128, 512)),
                                           ((512,), (128, 512)), ((4, 1, 6), (4, 5, 6)), ((1,), (3, 4))])
def test_mask_summaries_equal_the_expanded_counts(rng, mshape, shape):
    m = rng.random(mshape) < 0.5
    for mask in (m, np.broadcast_to(m, shape)):
        full = np.broadcast_to(mask, shape)
        assert mask_count(mask, shape) == int(np.count_nonzero(full))
        flat = full.reshape(shape[0], -1)
        assert mask_rows_cols(mask, shape) == (int(np.count_nonzero(flat.any(axis=1))),
                                               int(np.count_nonzero(flat.any(axis=0))))
    with pytest.raises(ValueError):
        mask_count(np.ones((3, 2), bool), (3, 4))


def test_a_mask_is_a_read_only_value_whose_summaries_are_kept():
    from accelopt_nb.sim.core.indexing import broadcast, mask_all
    inside = (5 * 128 + arange(128)[:, None] < 700) & (arange(64)[None, :] < 40)
    m = inside.values
    assert not m.flags.writeable and broadcast(m, (128, 64)) is m
    with pytest.raises(ValueError):
        m[0, 0] = False
    for _ in range(2):   # asked twice: the kept answers equal the expanded ones
        assert mask_count(m, (128, 64)) == 60 * 40
        assert mask_rows_cols(m, (128, 64)) == (60, 40)
        assert mask_all(m) is False
    assert mask_count(m, (2, 128, 64)) == 2 * 60 * 40


@pytest.mark.parametrize("wide_rows", [0.0, 0.2])  # the log buckets boxes by their row; some span rows
def test_write_log_agrees_with_per_element_stamps(rng, wide_rows):
    shape = (6, 40)
    log, stamps = WriteLog(2), np.zeros(shape, np.int64)
    for epoch in range(1, 200):
        r0 = int(rng.integers(0, 6))
        rows = slice(r0, int(rng.integers(r0 + 1, 7)), 1) if epoch > 1 and rng.random() < wide_rows else r0
        c0, step = int(rng.integers(0, 30)), int(rng.integers(1, 4))
        n = int(rng.integers(1, (40 - c0 - 1) // step + 2))
        key = (rows, slice(c0, c0 + step * (n - 1) + 1, step))
        box = box_of(key)
        since = int(rng.integers(0, epoch))
        brute = {int(e) for e in np.unique(_touched(log, shape, since, key))}
        assert set(log.meeting_epochs(box, since).tolist()) == brute
        log.add(box, epoch)
        stamps[key] = epoch
    np.testing.assert_array_equal(log.stamps(shape), stamps)


def test_write_log_buckets_the_tiles_of_a_2d_tensor(rng):
    """An HBM output written tile by tile (no axis of single elements): its tiles are bucketed by the first
    tile's extent, so a tile finds only its own cell's rows; unaligned and ragged boxes still meet correctly."""
    shape = (40, 36)
    log = WriteLog(2)
    for epoch in range(1, 120):
        if epoch == 1 or rng.random() < 0.7:   # a tile of 8 x 12, ragged at the right edge
            r, c = int(rng.integers(0, 5)) * 8, int(rng.integers(0, 3)) * 12
            key = (slice(r, r + 8, 1), slice(c, min(c + 12, shape[1] - 2), 1))
        else:   # anywhere, across tiles
            r0, c0 = int(rng.integers(0, 39)), int(rng.integers(0, 35))
            key = (slice(r0, int(rng.integers(r0 + 1, 41)), 1), slice(c0, int(rng.integers(c0 + 1, 37)), 1))
        box = box_of(key)
        since = int(rng.integers(0, epoch))
        brute = {int(e) for e in np.unique(_touched(log, shape, since, key))}
        assert set(log.meeting_epochs(box, since).tolist()) == brute
        log.add(box, epoch)
    tile = box_of((slice(8, 16, 1), slice(12, 24, 1)))
    rows = log.index.candidates(tile)
    assert rows is not None and len(rows) < len(log.boxes) // 2   # its cell and the wide rows, not every row


@pytest.mark.parametrize("tiled", [False, True])
def test_write_log_of_a_batched_hbm_output_buckets_its_tiles(rng, tiled):
    """An HBM output (B, M, N) written tile by tile, one batch at a time: its first box has a single element on
    the batch axis. As an HBM tensor's log (tiled) its tiles are cells, so a tile finds only its own cell's rows;
    bucketed by the batch axis alone (an on-chip buffer's rule) it finds its whole batch's. Both answer as the
    per-element stamps do, with unaligned boxes mixed in."""
    shape = (3, 32, 36)
    log = WriteLog(3, tiled)
    for epoch in range(1, 150):
        b = int(rng.integers(0, 3))
        if epoch == 1 or rng.random() < 0.9:
            r, c = int(rng.integers(0, 4)) * 8, int(rng.integers(0, 3)) * 12
            key = (b, slice(r, r + 8, 1), slice(c, c + 12, 1))
        else:
            r0, c0 = int(rng.integers(0, 31)), int(rng.integers(0, 35))
            key = (b, slice(r0, int(rng.integers(r0 + 1, 33)), 1), slice(c0, int(rng.integers(c0 + 1, 37)), 1))
        box = box_of(key)
        since = int(rng.integers(0, epoch))
        brute = {int(e) for e in np.unique(_touched(log, shape, since, key))}
        assert set(log.meeting_epochs(box, since).tolist()) == brute
        log.add(box, epoch)
    rows = log.index.candidates(box_of((1, slice(8, 16, 1), slice(12, 24, 1))))
    per_batch = sum(1 for bx in log.boxes if bx[0][0] == 1)
    assert rows is not None and (len(rows) < per_batch / 2 if tiled else len(rows) == per_batch)


def _touched(log, shape, since, key):
    """Epochs >= since of logged boxes that share an element with key, by painting each box."""
    hit = np.zeros(shape, bool)
    hit[key] = True
    out = []
    for box, epoch in zip(log.boxes, log.epochs):
        cover = np.zeros(shape, bool)
        cover[tuple(slice(a, b, s) for a, b, s in box)] = True
        if epoch >= since and (cover & hit).any():
            out.append(epoch)
    return np.array(out, dtype=np.int64)


def test_cover_answers_for_boxes_inside_one_written_box(rng):
    """Validity as written boxes: covers() only when one box holds the query (then every element is valid);
    local() paints an unstrided query box exactly."""
    shape = (6, 40)
    cover, painted = Cover(), np.zeros(shape, bool)
    for step_no in range(150):
        r0 = int(rng.integers(0, 6))
        rows = slice(r0, int(rng.integers(r0 + 1, 7)), 1) if step_no and rng.random() < 0.2 else r0
        c0, step = int(rng.integers(0, 30)), int(rng.integers(1, 4))
        n = int(rng.integers(1, (40 - c0 - 1) // step + 2))
        key = (rows, slice(c0, c0 + step * (n - 1) + 1, step))
        box = box_of(key)
        inside_one = any(np.all(_paint(shape, b)[key]) for b in cover.boxes)
        assert cover.covers(box) == inside_one
        if inside_one:
            assert painted[key].all()
        local = cover.local(box)   # the validity of this box alone, painted from the boxes that meet it
        if step == 1 or n == 1:
            np.testing.assert_array_equal(local, painted[tuple(slice(a, b, s) for a, b, s in box)])
        else:
            assert local is None
        if rng.random() < 0.5:
            cover.add(box)
            painted[key] = True
            assert cover.covers(box)
    np.testing.assert_array_equal(cover.mask(shape), painted)


def test_cover_sends_wide_questions_over_many_boxes_to_the_array():
    cover = Cover()
    for r in range(Cover.SCAN_LIMIT + 1):
        cover.add(((r, r + 1, 1), (0, 4, 1)))
    wide = ((0, Cover.SCAN_LIMIT + 1, 1), (0, 4, 1))   # meets every row: the caller builds the array instead
    assert not cover.covers(wide) and cover.local(wide) is None
    assert cover.covers(((7, 8, 1), (1, 3, 1)))
    assert cover.mask((Cover.SCAN_LIMIT + 1, 4)).all()


def test_a_tiled_cover_answers_a_read_across_tiles_from_its_rows():
    """A 2-D tensor written tile by tile (no single-element axis): a read spanning several tiles is painted from
    every row however many there are, never sent to the per-element array; a read inside one tile asks only
    its own tile's rows."""
    cover = Cover()
    tiles = [(r, c) for r in range(20) for c in range(16)]   # 320 tiles of 4 x 8: past SCAN_LIMIT
    assert len(tiles) > Cover.SCAN_LIMIT
    for r, c in tiles:
        cover.add(((4 * r, 4 * r + 4, 1), (8 * c, 8 * c + 8, 1)))
    across = ((6, 10, 1), (4, 20, 1))
    painted = cover.local(across)
    assert painted is not None and painted.all() and cover.covers(((5, 7, 1), (9, 15, 1)))
    assert cover.index.candidates(((4, 8, 1), (8, 16, 1))) == [17]


def _paint(shape, box):
    out = np.zeros(shape, bool)
    out[tuple(slice(a, b, s) for a, b, s in box)] = True
    return out


def test_masked_box_is_the_kept_sub_box_or_none():
    key = (2, slice(10, 26, 2), slice(0, 8, 1))       # an (8, 8) box
    m = np.zeros((8, 8), bool)
    assert masked_box(key, m) is EMPTY
    m[2:5, 1:7] = True
    assert masked_box(key, m) == ((2, 3, 1), (14, 19, 2), (1, 7, 1))
    m[0, 0] = True
    assert masked_box(key, m) is None
    assert masked_box(key, np.broadcast_to(np.arange(8)[None, :] < 3, (8, 8))) == ((2, 3, 1), (10, 25, 2), (0, 3, 1))


def test_box_copies_of_a_ragged_tile_equal_the_masked_copies(rng):
    # a mask keeping a box is read by copying the box and filling the rest by slabs, and written by copying
    # the box alone: the same arrays as the masked (element by element) copies, for boxes touching any side
    from accelopt_nb.sim.core.memory import _fill_outside, _kept_copy, _local_box, _masked_copy
    for shape in [(8, 8), (5, 7, 3), (4, 1, 6)]:
        for _ in range(40):
            lo = [int(rng.integers(0, n)) for n in shape]
            hi = [int(rng.integers(a + 1, n + 1)) for a, n in zip(lo, shape)]
            keep = np.zeros(shape, bool)
            keep[tuple(slice(a, b) for a, b in zip(lo, hi))] = True
            local = _local_box(keep)
            assert local == tuple(slice(a, b) for a, b in zip(lo, hi))
            data = rng.standard_normal(shape).astype(np.float32)
            fill = np.full((1,) * len(shape), np.nan, np.float32)
            np.testing.assert_array_equal(_kept_copy(fill, data[local], shape=shape, dtype=data.dtype, sub=local),
                                          _masked_copy(data, fill, keep))
            dst, ref = data.copy(), data.copy()
            np.copyto(ref, np.float32(7), where=~keep)
            _fill_outside(dst, np.float32(7), local)
            np.testing.assert_array_equal(dst, ref)
    assert _local_box(np.zeros((4, 4), bool)) is None
    assert _local_box(np.eye(4, dtype=bool)) is None


def test_unwritten_on_chip_memory_reads_as_its_fill_value(run_kernel, rng):
    # on-chip buffers are allocated without a fill pass; reads still see NaN (ints: 4) where nothing was written
    body = """
@nki.jit
def kernel(a, b):
    out_f = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    out_h = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    out_i = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.shared_hbm)
    f = nl.ndarray((2, nl.par_dim(4), 6), dtype=nl.float32, buffer=nl.sbuf)
    h = nl.ndarray((nl.par_dim(4), 6), dtype=nl.bfloat16, buffer=nl.sbuf)
    k = nl.ndarray((nl.par_dim(4), 6), dtype=nl.int32, buffer=nl.sbuf)
    f[1, nl.arange(4)[:, None], nl.arange(3)[None, :]] = nl.load(a[nl.arange(4)[:, None], nl.arange(3)[None, :]])
    h[nl.arange(4)[:, None], 2 * nl.arange(3)[None, :]] = nl.load(a[:, 0:3])
    k[1:3, 0:2] = nl.load(b[1:3, 0:2])
    nl.store(out_f, value=f[1])
    nl.store(out_h, value=h)
    nl.store(out_i, value=k)
    return out_f, out_h, out_i
"""
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.integers(-9, 9, (4, 6)).astype(np.int32)
    out_f, out_h, out_i = both(run_kernel, body, a, b, check_uninitialized=False).outputs
    np.testing.assert_array_equal(out_f[:, :3], a[:, :3])
    assert np.isnan(out_f[:, 3:]).all()
    assert np.isnan(out_h.astype(np.float32)[:, 1::2]).all() and not np.isnan(out_h.astype(np.float32)[:, 0::2]).any()
    expected = np.full((4, 6), 4, np.int32)
    expected[1:3, 0:2] = b[1:3, 0:2]
    np.testing.assert_array_equal(out_i, expected)


def test_validity_kept_as_written_boxes_until_a_question_needs_the_array(run_kernel, rng):
    # written boxes answer for reads inside one box; halves read whole, masked writes, accumulation onto a
    # partly written tile and a reshape switch to the per-element array: the same values, trace and errors
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((6, 8, 16), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((6, nl.par_dim(8), 16), dtype=nl.float32, buffer=nl.sbuf)
    acc = nl.zeros((nl.par_dim(8), 16), dtype=nl.float32, buffer=nl.psum)
    i_p, i_f = nl.arange(8)[:, None], nl.arange(16)[None, :]
    t[0, i_p, i_f] = nl.load(a[0])                                     # one box, read inside it
    t[1, i_p, nl.arange(8)[None, :]] = nl.load(a[1, :, 0:8])           # two halves, read whole
    t[1, i_p, 8 + nl.arange(8)[None, :]] = nl.load(a[1, :, 8:16])
    t[2, i_p, i_f] = nl.load(a[2], mask=i_f < 12)                      # masked: the tail stays unwritten
    t[2, i_p, 12 + nl.arange(4)[None, :]] = nl.load(a[2, :, 12:16])
    t[3, i_p, i_f] = nl.exp(t[0, i_p, i_f])
    acc[i_p, nl.arange(8)[None, :]] += nl.load(a[4, :, 0:8])         # accumulate onto a partly written tile
    acc[i_p, i_f] += nl.load(a[4])
    t[4, i_p, i_f] = nl.copy(acc)
    flat = t.reshape((6 * 8, 16))                                       # an alias shares the validity
    t[5, i_p, i_f] = nl.add(t[1, i_p, i_f], t[2, i_p, i_f])
    for j in nl.affine_range(6):
        nl.store(out[j], value=t[j, i_p, i_f])
    return out
"""
    a = rng.standard_normal((6, 8, 16)).astype(np.float32)
    out = both(run_kernel, body, a).outputs[0]
    np.testing.assert_allclose(out[0], a[0])
    np.testing.assert_allclose(out[1], a[1])
    np.testing.assert_allclose(out[2], a[2])
    np.testing.assert_allclose(out[3], np.exp(a[0]), rtol=1e-6)
    np.testing.assert_allclose(out[4], a[4] + np.pad(a[4, :, :8], ((0, 0), (0, 8))), rtol=1e-6)
    np.testing.assert_allclose(out[5], a[1] + a[2], rtol=1e-6)
    body_unwritten = body.replace("    t[2, i_p, 12 + nl.arange(4)[None, :]] = nl.load(a[2, :, 12:16])\n", "")
    err = both_raise(run_kernel, body_unwritten, a)
    assert "never written" in err[1]


def test_ragged_tile_computed_from_ragged_inputs_keeps_box_validity(run_kernel, rng, monkeypatch):
    # compiler style: the last row tile is loaded, computed and stored under the same mask; the results
    # carry the inputs' partial validity, and every element the mask keeps is valid, so each write stays
    # a box (no per-element array as large as the buffer) and the values match the general path; the
    # load and store index past the tensor's end, and reach the box their mask keeps as a view
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((200, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray((2, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    y = nl.ndarray((2, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    z = nl.ndarray((2, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(2):
        rows = -128 * i - nl.arange(128)[:, None] + 199 >= 0
        x[i, nl.arange(128)[:, None], nl.arange(64)[None, :]] = nl.load(
            a[128 * i + nl.arange(128)[:, None], nl.arange(64)[None, :]], mask=rows)
        y[i, nl.arange(128)[:, None], nl.arange(64)[None, :]] = nisa.tensor_scalar(
            data=x[i, nl.arange(128)[:, None], nl.arange(64)[None, :]], op0=nl.multiply, operand0=3.0, mask=rows)
        z[i, nl.arange(128)[:, None], nl.arange(64)[None, :]] = nl.subtract(
            x[i, nl.arange(128)[:, None], nl.arange(64)[None, :]],
            y[i, nl.arange(128)[:, None], nl.arange(64)[None, :]], mask=rows)
        nl.store(out[128 * i + nl.arange(128)[:, None], nl.arange(64)[None, :]],
                 value=z[i, nl.arange(128)[:, None], nl.arange(64)[None, :]], mask=rows)
    return out
"""
    import accelopt_nb.sim.core.memory as memory
    switched = []
    materialize = memory.materialize

    def spy(t):
        if t._cover is not None:
            switched.append(t.shape)
        materialize(t)

    monkeypatch.setattr(memory, "materialize", spy)
    a = rng.standard_normal((200, 64)).astype(np.float32)
    out = both(run_kernel, body, a).outputs[0]
    np.testing.assert_allclose(out, -2.0 * a, rtol=1e-6)
    # x, y, z; and the output, whose ragged store indexes past its end: the mask keeps a box inside it
    assert switched == []


def test_ragged_read_past_the_end_keeps_validity_and_fill(run_kernel, rng):
    # an on-chip read whose key runs past the buffer's end under a mask: the kept box is read as a view, its
    # unwritten part is reported, masked-off elements carry index 0's value (as the general gather reads them)
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    t[:, 0:WIDTH] = nl.load(a[:, 0:WIDTH])
    e = nl.exp(t[nl.arange(128)[:, None], 16 + nl.arange(64)[None, :]], mask=16 + nl.arange(64)[None, :] < 64)
    nl.store(out[nl.arange(128)[:, None], nl.arange(64)[None, :]], value=e, mask=nl.arange(64)[None, :] < 48)
    return out
"""
    a = rng.standard_normal((128, 64)).astype(np.float32)
    out = both(run_kernel, body.replace("WIDTH", "64"), a).outputs[0]
    np.testing.assert_allclose(out[:, :48], np.exp(a[:, 16:]), rtol=1e-6)
    err = both_raise(run_kernel, body.replace("WIDTH", "32"), a)
    assert "never written" in err[1]


def test_masked_read_of_a_partly_written_tile_never_shows_its_masked_off_elements(run_kernel, rng):
    # the tile's unwritten elements are all masked off, so the fast read skips their NaN fill: what it puts
    # there instead must never reach an output (a masked instruction does not write masked-off elements)
    body = """
@nki.jit
def kernel(a, b):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((2, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    t[0, nl.arange(128)[:, None], nl.arange(64)[None, :]] = nl.load(b)
    keep = (nl.arange(128)[:, None] < 100) & (nl.arange(64)[None, :] < 40)
    t[1, nl.arange(128)[:, None], nl.arange(64)[None, :]] = nl.load(
        a[nl.arange(128)[:, None], nl.arange(64)[None, :]], mask=keep)
    e = nl.exp(t[1, nl.arange(128)[:, None], nl.arange(64)[None, :]], mask=keep)
    nl.store(out[nl.arange(128)[:, None], nl.arange(64)[None, :]], value=e, mask=keep)
    return out
"""
    a, b = (rng.standard_normal((128, 64)).astype(np.float32) for _ in range(2))
    out = both(run_kernel, body, a, b).outputs[0]
    np.testing.assert_allclose(out[:100, :40], np.exp(a[:100, :40]), rtol=1e-6)
    err = both_raise(run_kernel, body.replace(", mask=keep)\n    return", ")\n    return"), a, b)
    assert "4192 element(s)" in err[1] and "never written" in err[1]


def test_kernel_inputs_are_read_in_place_and_copied_before_a_write(run_kernel, rng):
    # inputs are borrowed (no copy at launch); a store into one, directly or through a reshape, copies it
    # first, and an input returned as an output is a copy: the caller's arrays never change
    body = """
@nki.jit
def kernel(a, b):
    t = nl.load(a[0:4, 0:8])
    nl.store(a[4:8, 0:8], value=nl.multiply(t, 2.0))
    flat = b.reshape((4, 16))
    nl.store(flat[0:4, 0:8], value=t)
    return a, b
"""
    a = rng.standard_normal((8, 8)).astype(np.float32)
    b = rng.standard_normal((4, 2, 8)).astype(np.float32)
    a0, b0 = a.copy(), b.copy()
    out_a, out_b = run_kernel(body, a, b).outputs
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)
    np.testing.assert_array_equal(out_a[4:8], 2 * a0[0:4])
    np.testing.assert_array_equal(out_b.reshape(4, 16)[:, 0:8], a0[0:4])
    assert not np.shares_memory(out_a, a) and not np.shares_memory(out_b, b)
    out_a, out_b = run_kernel(body.replace("    nl.store(a[4:8, 0:8], value=nl.multiply(t, 2.0))\n", ""), a, b).outputs
    assert not np.shares_memory(out_a, a)


def test_no_tensor_is_left_in_a_reference_cycle(run_kernel, rng):
    # the collector is paused while a kernel runs: a buffer in a cycle (e.g. with its own whole view) would
    # keep its data alive until the run ends; buffers allocated per iteration and read whole must be freed
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((4, 128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        t = nl.ndarray((nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
        t[...] = nl.load(a[i])
        nl.store(out[i], value=nl.exp(t))
    return out
"""
    import gc

    from accelopt_nb.sim.core.tensor import Tensor
    from accelopt_nb.sim.core.views import View
    a = rng.standard_normal((4, 128, 64)).astype(np.float32)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        res = run_kernel(body, a)
        gc.collect()
        cyclic = [o for o in gc.garbage if isinstance(o, (Tensor, View))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    np.testing.assert_allclose(res.outputs[0], np.exp(a), rtol=1e-6)
    assert cyclic == []


def test_results_computed_into_their_destination_equal_computed_then_copied(run_kernel, rng, monkeypatch):
    # dst[...] = nl.add(a, b) (nisa.tensor_scalar, nisa.activation) computes into dst; a tile kept and read
    # after its destination changed, read
    # after a write elsewhere, dropped unread, or assigned under a mask gives the values it would have had
    body = """
@nki.jit
def kernel(a, b):
    out = nl.ndarray((6, 128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray((nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    y = nl.ndarray((nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    x[...] = nl.load(a)
    y[...] = nl.load(b)
    t = nl.add(x, y)
    x[...] = t                                  # computed into x; t is kept
    x[...] = nl.multiply(x, y)                  # x changes: t keeps a + b
    nl.store(out[0], value=t)
    u = nl.subtract(x, y)                       # u's operands change before it is read
    y[...] = nl.load(a)
    x[...] = nl.maximum(x, 0.0)
    nl.store(out[1], value=u)
    nl.store(out[2], value=x)
    nl.minimum(x, y)                            # dropped unread
    y[nl.arange(128)[:, None], nl.arange(64)[None, :]] = nl.add(x, y, mask=nl.arange(64)[None, :] < 40)
    nl.store(out[3], value=y)
    x[...] = nl.add(x, x)                       # in place
    x[...] = nisa.tensor_scalar(data=x, op0=nl.multiply, operand0=1.5, op1=nl.add, operand1=0.25)
    x[...] = nisa.activation(op=nl.exp, data=x, scale=0.5)
    nl.store(out[4], value=x)
    y[...] = nisa.activation(op=nl.sigmoid, data=y)   # not a ufunc: computed in place all the same
    nl.store(out[5], value=y)
    return out
"""
    import accelopt_nb.sim.api.ops as sim_ops
    import accelopt_nb.sim.core.memory as memory
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(np.float32)
    direct = []   # per deferred tile assigned to a destination of its shape: whether it was computed there
    in_place = memory._in_place

    def spy(*args, **kwargs):
        target = in_place(*args, **kwargs)
        direct.append(target is not None)
        return target

    monkeypatch.setattr(memory, "_in_place", spy)
    res = run_kernel(body, a, b)
    assert direct and all(direct)
    monkeypatch.setattr(sim_ops, "deferrable", lambda *args: False)
    plain = run_kernel(body, a, b)
    np.testing.assert_array_equal(res.outputs[0], plain.outputs[0])
    assert _stream(res) == _stream(plain)
    x = (a + b) * b
    y = np.where(np.arange(64)[None, :] < 40, np.maximum(x, 0) + a, a)
    np.testing.assert_array_equal(res.outputs[0][0], a + b)
    np.testing.assert_array_equal(res.outputs[0][1], x - b)
    np.testing.assert_array_equal(res.outputs[0][2], np.maximum(x, 0))
    np.testing.assert_array_equal(res.outputs[0][3], y)
    x4 = (2 * np.maximum(x, 0)) * np.float32(1.5) + np.float32(0.25)
    np.testing.assert_array_equal(res.outputs[0][4], np.exp(x4 * np.float32(0.5) + np.float32(0)))
    np.testing.assert_array_equal(res.outputs[0][5], np.float32(1) / (np.float32(1) + np.exp(-(y + np.float32(0)))))


def test_activation_default_bias_keeps_the_sign_of_zero(run_kernel, rng, monkeypatch):
    # the default bias adds +0.0, turning -0.0 into +0.0; a deferred activation skips that add only for
    # functions blind to the sign (sigmoid), so tanh(-0.0) stays tanh(+0.0) = +0.0 on both paths
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((2, 128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray((nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    y = nl.ndarray((nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    x[...] = nl.load(a)
    y[...] = nisa.activation(op=nl.tanh, data=x)
    nl.store(out[0], value=y)
    y[...] = nisa.activation(op=nl.sigmoid, data=x)
    nl.store(out[1], value=y)
    return out
"""
    import accelopt_nb.sim.api.ops as sim_ops
    a = np.zeros((128, 64), np.float32)
    a[:, ::2] = -0.0
    a[:, 1::4] = rng.standard_normal((128, 16)).astype(np.float32)
    res = run_kernel(body, a)
    monkeypatch.setattr(sim_ops, "deferrable", lambda *args: False)
    plain = run_kernel(body, a)
    assert res.outputs[0].tobytes() == plain.outputs[0].tobytes()
    assert not np.signbit(res.outputs[0][0][a == 0]).any()   # tanh(-0.0 + 0.0) is +0.0


# ---- whole kernels: every fast path against the general path ---------------------------------------------
def _whole_kernels():
    import nkibench
    cases = [(name, nkibench.get_problem(name)) for name in nkibench.list_problems()]
    return [pytest.param(p, id=name) for name, p in cases]


@pytest.mark.parametrize("problem", _whole_kernels())
def test_nkibench_baselines_same_values_and_trace_on_both_paths(problem):
    """Our baselines (small preset) run with every fast path (key plans, written boxes, bucketed write log,
    lazy buffers) and on the general path: identical outputs, instruction streams and tensors."""
    from accelopt_nb.sim import SimOptions, load_kernel, simulate
    task = problem.task("small")
    inputs = task.to_nki(task.get_inputs(seed=0))
    kernel = load_kernel(problem.baseline_path)
    fast = simulate(kernel, *inputs, options=SimOptions(fast_indexing=True))
    general = simulate(kernel, *inputs, options=SimOptions(fast_indexing=False))
    for a, b in zip(fast.outputs, general.outputs, strict=True):
        np.testing.assert_array_equal(a.astype(np.float32), b.astype(np.float32))
    assert _stream(fast) == _stream(general)
    assert fast.trace.tensors == general.trace.tensors


def test_arange_mask_benchmark_kernel_same_values_and_trace_on_both_paths(rng):
    from pathlib import Path
    from accelopt_nb.sim import SimOptions, load_kernel, simulate
    kernel = load_kernel(Path(__file__).parents[1] / "benchmarks" / "kernels" / "arange_mask.py")
    xs = [rng.standard_normal((300, 700)).astype(np.float32) for _ in range(3)]   # ragged on both axes
    fast = simulate(kernel, *xs, options=SimOptions(fast_indexing=True))
    general = simulate(kernel, *xs, options=SimOptions(fast_indexing=False))
    np.testing.assert_array_equal(fast.outputs[0], general.outputs[0])
    np.testing.assert_allclose(fast.outputs[0], xs[0] / (1 + np.exp(-xs[1])) + xs[2], rtol=1e-5, atol=1e-6)
    assert _stream(fast) == _stream(general)
    assert fast.trace.tensors == general.trace.tensors


def test_two_dim_index_on_one_axis_is_a_box_on_both_paths(run_kernel, rng):
    # the compiler's way of moving a [128, 8, 128] view of a [128, 1024] tile: a slice on the fast path
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((4, 128, 1024), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((4, nl.par_dim(128), 1024), dtype=a.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(4):
        t[i, nl.arange(128)[:, None, None], 128 * nl.arange(8)[None, :, None] + nl.arange(128)[None, None, :]] = nl.load(
            a[i, nl.arange(128)[:, None, None], nl.arange(8)[None, :, None], nl.arange(128)[None, None, :]])
        nl.store(out[i], value=nl.exp(t[i]))
    return out
"""
    a = rng.standard_normal((4, 128, 8, 128)).astype(np.float32)
    res = both(run_kernel, body, a)
    np.testing.assert_allclose(res.outputs[0], np.exp(a.reshape(4, 128, 1024)), rtol=1e-6)
