"""nisa instructions against NumPy references."""
import numpy as np
import pytest


def test_nc_matmul_flags_and_psum_accumulation(run_kernel, rng):
    body = """
@nki.jit
def kernel(s, m):
    out = nl.ndarray((s.shape[1], m.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((s.shape[1], m.shape[1]), nl.float32, buffer=nl.psum, lazy_initialization=True)
    for k in nl.affine_range(s.shape[0] // 128):
        st = nl.load(s[k * 128:(k + 1) * 128, :])
        mv = nl.load(m[k * 128:(k + 1) * 128, :])
        acc += nisa.nc_matmul(st, mv, is_stationary_onezero=False, is_moving_onezero=False)
    nl.store(out, value=acc)
    return out
"""
    s = rng.standard_normal((384, 128)).astype(np.float32)
    m = rng.standard_normal((384, 512)).astype(np.float32)
    res = run_kernel(body, s, m)
    np.testing.assert_allclose(res.output, s.T @ m, rtol=1e-4, atol=1e-3)
    mm = [i for i in res.trace.instructions if i.op == "nc_matmul"]
    assert len(mm) == 3 and all(i.accumulate for i in mm)
    assert mm[0].attrs["k"] == 128 and mm[0].attrs["m"] == 128 and mm[0].attrs["n"] == 512


def test_nc_matmul_identity_transpose_and_nc_transpose(run_kernel, rng):
    body = """
@nki.jit
def kernel(x):
    o1 = nl.ndarray((x.shape[1], x.shape[0]), dtype=nl.float32, buffer=nl.shared_hbm)
    o2 = nl.ndarray((x.shape[1], x.shape[0]), dtype=nl.float32, buffer=nl.shared_hbm)
    o3 = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    ident = nl.load(nl.shared_constant(np.identity(128, dtype=np.float32), dtype=nl.float32))
    t = nl.load(x)
    p = nl.ndarray((par_dim(x.shape[1]), x.shape[0]), dtype=nl.float32, buffer=nl.psum)
    p[...] = nisa.nc_matmul(t, ident, is_transpose=True)
    nl.store(o1, value=nl.copy(p))
    nl.store(o2, value=nl.copy(nisa.nc_transpose(t)))
    small = nl.load(x[0:16, 0:32])
    nl.store(o3, value=nisa.nc_transpose(small, engine=nisa.vector_engine))
    return o1, o2, o3
"""
    x = rng.standard_normal((128, 96)).astype(np.float32)
    res = run_kernel(body, x)
    np.testing.assert_allclose(res.outputs[0], x.T, rtol=1e-6)
    np.testing.assert_array_equal(res.outputs[1], x.T)
    np.testing.assert_array_equal(res.outputs[2], x[0:16, 0:32].T)


def test_activation_bias_scale_and_reduce(run_kernel, rng):
    body = """
@nki.jit
def kernel(x, b):
    o1 = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    o2 = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    bias = nl.load(b)
    red = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    y = nisa.activation_reduce(op=nl.exp, data=t, bias=bias, scale=0.5, reduce_op=np.add, reduce_res=red)
    nl.store(o1, value=y)
    nl.store(o2, value=red)
    return o1, o2
"""
    x = rng.standard_normal((16, 64)).astype(np.float32)
    b = rng.standard_normal((16, 1)).astype(np.float32)
    o1, o2 = run_kernel(body, x, b).outputs
    ref = np.exp(x * 0.5 + b)
    np.testing.assert_allclose(o1, ref, rtol=1e-6)
    np.testing.assert_allclose(o2, ref.sum(axis=1, keepdims=True), rtol=1e-5)


def test_a_reduction_written_beside_an_assigned_result_stays_in_the_trace(run_kernel, rng):
    # e[...] = activation_reduce(...) (and today's nki activation(dst=e, reduce_res=s)) writes two tiles: the
    # store of s must wait for that instruction, so its trace record names both
    body = """
@nki.jit
def kernel(x):
    out = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    s = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    e = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    e[...] = nisa.activation_reduce(op=nl.exp, data=t, reduce_op=nl.add, reduce_res=s)
    nl.store(out, value=s)
    return out
"""
    x = rng.standard_normal((16, 64)).astype(np.float32)
    res = run_kernel(body, x)
    np.testing.assert_allclose(res.outputs[0], np.exp(x).sum(axis=1, keepdims=True), rtol=1e-5)
    act = next(i for i in res.trace.instructions if i.op == "activation_reduce")
    store = next(i for i in res.trace.instructions if i.op == "dma_store")
    assert {w.tensor for w in act.writes} >= {r.tensor for r in store.reads}
    assert len(act.writes) == 2


def test_activation_with_tile_scale_and_np_function(run_kernel, rng):
    body = """
@nki.jit
def kernel(x, s):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.activation(op=np.tanh, data=nl.load(x), scale=nl.load(s)))
    return out
"""
    x = rng.standard_normal((8, 20)).astype(np.float32)
    s = rng.standard_normal((8, 1)).astype(np.float32)
    np.testing.assert_allclose(run_kernel(body, x, s).output, np.tanh(x * s), rtol=1e-6)


def test_tensor_tensor_tensor_scalar_scalar_tensor_tensor(run_kernel, rng):
    body = """
@nki.jit
def kernel(a, b, c):
    o1 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    o2 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    o3 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x, y, col = nl.load(a), nl.load(b), nl.load(c)
    nl.store(o1, value=nisa.tensor_tensor(x, y, op=np.subtract))
    nl.store(o2, value=nisa.tensor_scalar(x, np.multiply, col, op1=np.subtract, operand1=1.0, reverse1=True))
    nl.store(o3, value=nisa.scalar_tensor_tensor(data=x, op0=np.add, operand0=col, op1=nl.multiply, operand1=y))
    return o1, o2, o3
"""
    a, b = (rng.standard_normal((8, 16)).astype(np.float32) for _ in range(2))
    c = rng.standard_normal((8, 1)).astype(np.float32)
    o1, o2, o3 = run_kernel(body, a, b, c).outputs
    np.testing.assert_allclose(o1, a - b, rtol=1e-6)
    np.testing.assert_allclose(o2, 1.0 - a * c, rtol=1e-6)
    np.testing.assert_allclose(o3, (a + c) * b, rtol=1e-6)


def test_tensor_reduce_negate_and_scan(run_kernel, rng):
    body = """
@nki.jit
def kernel(a, b):
    o1 = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    o2 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    nl.store(o1, value=nisa.tensor_reduce(np.max, x, axis=1, negate=True, keepdims=True))
    nl.store(o2, value=nisa.tensor_tensor_scan(x, y, initial=0.5, op0=np.multiply, op1=np.add))
    return o1, o2
"""
    a = rng.uniform(0.5, 1.0, (4, 12)).astype(np.float32)
    b = rng.standard_normal((4, 12)).astype(np.float32)
    o1, o2 = run_kernel(body, a, b).outputs
    np.testing.assert_allclose(o1, -a.max(axis=1, keepdims=True))
    ref = np.empty_like(a)
    prev = np.full(4, 0.5, np.float32)
    for i in range(12):
        prev = a[:, i] * prev + b[:, i]
        ref[:, i] = prev
    np.testing.assert_allclose(o2, ref, rtol=1e-5)


def test_scan_generic_ops_and_tile_initial(run_kernel, rng):
    body = """
@nki.jit
def kernel(a, b, c):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    r = nisa.tensor_tensor_scan(nl.load(a), nl.load(b), initial=nl.load(c), op0=np.maximum, op1=np.add)
    nl.store(out, value=r)
    return out
"""
    a, b = (rng.standard_normal((4, 6)).astype(np.float32) for _ in range(2))
    c = rng.standard_normal((4, 1)).astype(np.float32)
    ref = np.empty_like(a)
    prev = c[:, 0].copy()
    for i in range(6):
        prev = np.maximum(a[:, i], prev) + b[:, i]
        ref[:, i] = prev
    np.testing.assert_allclose(run_kernel(body, a, b, c).output, ref, rtol=1e-6)


def test_reciprocal_memset_iota_copy(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    o1 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    o2 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    o3 = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    o4 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.store(o1, value=nisa.reciprocal(x))
    nl.store(o2, value=nisa.memset(a.shape, 7.0, nl.float32, engine=nisa.gpsimd_engine))
    nl.store(o3, value=nisa.iota(nl.arange(a.shape[0])[:, None] * 100 + nl.arange(a.shape[1])[None, :], dtype=nl.int32))
    nl.store(o4, value=nisa.tensor_copy(x, engine=nisa.scalar_engine))
    return o1, o2, o3, o4
"""
    a = rng.uniform(1, 2, (4, 6)).astype(np.float32)
    o1, o2, o3, o4 = run_kernel(body, a).outputs
    np.testing.assert_allclose(o1, 1 / a, rtol=1e-6)
    np.testing.assert_array_equal(o2, 7.0)
    np.testing.assert_array_equal(o3, np.arange(4)[:, None] * 100 + np.arange(6)[None, :])
    np.testing.assert_array_equal(o4, a)


def test_bn_stats_bn_aggr_give_mean_and_population_variance(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((a.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
    stats = nl.ndarray((a.shape[0], 12), dtype=nl.float32, buffer=nl.sbuf)
    for c in nl.affine_range(2):
        stats[:, c * 6:(c + 1) * 6] = nisa.bn_stats(nl.load(a[:, c * 512:(c + 1) * 512]))
    nl.store(out, value=nisa.bn_aggr(stats))
    return out
"""
    a = (rng.standard_normal((8, 1024)) * 2 + 1).astype(np.float32)
    out = run_kernel(body, a).output
    np.testing.assert_allclose(out[:, 0], a.mean(axis=1), rtol=1e-5)
    np.testing.assert_allclose(out[:, 1], a.var(axis=1), rtol=1e-4)


def test_affine_select_and_dma_copy(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    o1 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    o2 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    i_p = nl.arange(a.shape[0])[:, None]
    i_f = nl.arange(a.shape[1])[None, :]
    nl.store(o1, value=nisa.affine_select(i_p - i_f >= 0, x, -9984.0))   # causal mask
    nisa.dma_copy(dst=o2, src=a)                                            # HBM -> HBM
    nisa.dma_copy(dst=o2, src=x, dst_rmw_op=np.add)                         # accumulate SBUF into HBM
    return o1, o2
"""
    a = rng.standard_normal((8, 8)).astype(np.float32)
    o1, o2 = run_kernel(body, a).outputs
    np.testing.assert_array_equal(o1, np.where(np.tril(np.ones((8, 8))) > 0, a, -9984.0))
    np.testing.assert_allclose(o2, 2 * a)


def test_engine_enum_and_unknown_engine(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    assert nisa.engine.vector == 5 and nisa.unknown_engine == 0
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.tensor_scalar(nl.load(a), np.add, 1.0, engine=nki.isa.unknown_engine))
    return out
"""
    a = rng.standard_normal((2, 2)).astype(np.float32)
    np.testing.assert_allclose(run_kernel(body, a).output, a + 1)


def test_accumulating_part_of_a_matmul_result_adds_only_that_part(run_kernel, rng):
    body = """
@nki.jit
def kernel(s, m):
    out = nl.ndarray((64, m.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((64, m.shape[1]), nl.float32, buffer=nl.psum)
    full = nisa.nc_matmul(nl.load(s), nl.load(m))          # (128, N)
    acc += full[0:64, :]
    nl.store(out, value=acc)
    return out
"""
    s = rng.standard_normal((128, 128)).astype(np.float32)
    m = rng.standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_allclose(run_kernel(body, s, m).output, (s.T @ m)[:64], rtol=1e-4, atol=1e-4)


def test_matmul_assigned_whole_is_computed_in_its_destination(run_kernel, rng, monkeypatch):
    """An fp32 nc_matmul assigned whole to a buffer tile is computed there (no tile copied after it), with
    the values computing it first and copying give (bit for bit); read any other way, it is computed on its own."""
    from accelopt_nb.sim.api import ops
    from accelopt_nb.sim.core.prims import PRIMS
    dests = []
    real = ops.ufunc_into

    def counted(dst, *args, ufunc):
        if ufunc is np.matmul:
            dests.append(dst is not None)
        return real(dst, *args, ufunc=ufunc)
    monkeypatch.setattr(ops, "ufunc_into", counted)
    monkeypatch.setitem(PRIMS, counted, PRIMS[real])
    body = """
@nki.jit
def kernel(a, b):
    out = nl.ndarray((3, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(2):
        acc[k, :, :] = nisa.nc_matmul(nl.load(a[k]), nl.load(b[k]))
        nl.store(out[k], value=nl.copy(acc[k, :, :]))
    t = nisa.nc_matmul(nl.load(a[0]), nl.load(b[0]))
    nl.store(out[2], value=nl.copy(t))
    return out
"""
    a = rng.standard_normal((2, 128, 128)).astype(np.float32)
    b = rng.standard_normal((2, 128, 512)).astype(np.float32)
    out = run_kernel(body, a, b).output
    assert dests == [True, True, False]
    np.testing.assert_array_equal(out[0], out[2])
    for k in range(2):
        np.testing.assert_allclose(out[k], a[k].T.astype(np.float64) @ b[k], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("call", ["nisa.nc_matmul(st, st, mask=(ip < 100))", "nl.add(st, st, mask=(ip64 < 10))"])
def test_mask_that_does_not_fit_the_result_tile_is_the_kernels_error(run_kernel, call):
    # nc_matmul's result has 64 partitions (the stationary free size): a 128-row mask cannot predicate it; an
    # elementwise result of 128 partitions cannot take a 64-row mask. Both name the API, the shapes and the rule
    # (it used to surface as a broadcast failure reported as a simulator bug)
    from accelopt_nb.errors import NKIRuleError
    body = f"""
@nki.jit
def kernel(a):
    out = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    ip = nl.arange(128)[:, None]
    ip64 = nl.arange(64)[:, None]
    st = nl.load(a)
    r = {call}
    return out
"""
    with pytest.raises(NKIRuleError) as err:
        run_kernel(body, np.zeros((128, 64), np.float32))
    assert "does not fit the result tile" in str(err.value) and "mask of shape" in str(err.value)
    assert err.value.line is not None


# ---- nisa.nc_stream_shuffle ------------------------------------------------------------------------------------
SHUFFLE = """
@nki.jit
def kernel(a, b):
    out = nl.ndarray((2, 64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    nisa.nc_stream_shuffle(src=t, dst=t, shuffle_mask=[(i - 1) % 32 for i in range(32)])   # in place, 2 quadrants
    nl.store(out[0], value=t)
    u = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.sbuf)
    u[...] = nl.load(b)
    nisa.nc_stream_shuffle(src=nl.load(a[0:1, :]), dst=u[0:32, :], shuffle_mask=[0] * 16 + [255] * 16)
    nl.store(out[1], value=u)
    return out
"""


def test_nc_stream_shuffle_moves_partitions_within_each_quadrant(run_kernel):
    a = np.arange(64 * 128, dtype=np.float32).reshape(64, 128)
    b = -np.ones((64, 128), np.float32)
    res = run_kernel(SHUFFLE, a, b)
    rotated = np.concatenate([np.roll(a[:32], 1, axis=0), np.roll(a[32:], 1, axis=0)])
    np.testing.assert_array_equal(res.output[0], rotated)
    broadcast = b.copy()
    broadcast[:16] = a[0]            # 255 left partitions 16..31 as they were
    np.testing.assert_array_equal(res.output[1], broadcast)
    shuffles = [i for i in res.trace.instructions if i.op == "nc_stream_shuffle"]
    assert [(i.engine, i.partitions, i.free_elems) for i in shuffles] == [("vector", 64, 128), ("vector", 16, 128)]
    assert shuffles[1].writes[0].elements == 16 * 128
    from accelopt_nb.perf import estimate
    assert estimate(res.trace).latency > 0     # the performance model costs it (a VectorE copy)


def test_nc_stream_shuffle_in_the_standalone_nki_style(tmp_path):
    from accelopt_nb.sim import load_kernel, simulate
    path = tmp_path / "k.py"
    path.write_text("""import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def kernel(a):
    out = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf)
    s = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.nc_stream_shuffle(s, t, [31 - i for i in range(32)])
    nisa.dma_copy(dst=out, src=s)
    return out
""")
    a = np.arange(32 * 64, dtype=np.float32).reshape(32, 64)
    np.testing.assert_array_equal(simulate(load_kernel(path), a).output, a[::-1])


@pytest.mark.parametrize("call, message", [
    ("nisa.nc_stream_shuffle(src=t, dst=t, shuffle_mask=[0] * 31)", "shuffle_mask must be a list of 32 ints"),
    ("nisa.nc_stream_shuffle(src=t[0:16, :], dst=t, shuffle_mask=[20] * 32)", "reads partition 20 of src, which has 16"),
    ("nisa.nc_stream_shuffle(src=t, dst=h, shuffle_mask=[0] * 32)", "dst is bfloat16 but src is float32"),
    ("nisa.nc_stream_shuffle(src=t[0:64, :], dst=t[32:96, :], shuffle_mask=[0] * 32)",
     "dst starts at partition 32; with 64 active partitions a shuffle starts at partition 0 or 64"),
    ("nisa.nc_stream_shuffle(src=t, dst=t, shuffle_mask=[0] * 32, dtype=nl.bfloat16)", "dtype"),
])
def test_nc_stream_shuffle_refuses_what_the_hardware_does_not_do(run_kernel, call, message):
    from accelopt_nb.errors import KernelError
    body = f"""
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    h = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
    {call}
    nl.store(out, value=t)
    return out
"""
    with pytest.raises(KernelError, match=message) as e:
        run_kernel(body, np.zeros((128, 64), np.float32))
    assert "nc_stream_shuffle" in str(e.value)


def test_nc_stream_shuffle_in_a_loop_replays_with_values_exactly(tmp_path, rng):
    from conftest import HEADER

    from accelopt_nb.sim import SimOptions, load_kernel, simulate
    from accelopt_nb.sim.trace import trace_fields
    path = tmp_path / "k.py"
    path.write_text(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    spread = [(5 * k) % 32 for k in range(32)]
    for i in nl.affine_range(a.shape[0] // 32):
        t = nl.load(a[i * 32:(i + 1) * 32, :])
        s = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_stream_shuffle(src=t, dst=s, shuffle_mask=spread)
        nl.store(out[i * 32:(i + 1) * 32, :], value=s)
    return out
""")
    kernel = load_kernel(path)
    a = rng.standard_normal((32 * 24, 64)).astype(np.float32)
    replayed, full = simulate(kernel, a), simulate(kernel, a, options=SimOptions(loop_replay=False))
    assert replayed.trace.replayed > 0
    expected = np.concatenate([blk[[(5 * k) % 32 for k in range(32)]] for blk in a.reshape(24, 32, 64)])
    np.testing.assert_array_equal(replayed.output, expected)
    np.testing.assert_array_equal(replayed.output, full.output)
    assert trace_fields(replayed.trace) == trace_fields(full.trace)
