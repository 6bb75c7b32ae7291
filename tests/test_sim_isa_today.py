"""nki.isa as the hardware runs it (issue 32, the ISA half): accumulation registers, unary ALU operators, TensorE
operands left in PSUM, VectorE transposes over 32x32, oob_mode=skip, PSUM tiles over one bank; against NumPy."""
import numpy as np
import pytest

from accelopt_nb.errors import KernelError
from accelopt_nb.sim import SimOptions, load_kernel, simulate
from accelopt_nb.sim.trace import trace_fields

NKI = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\nimport numpy as np\n\n"


def run(body: str, *inputs, **opts):
    return simulate(load_kernel(source=NKI + body), *inputs, options=SimOptions(**opts))


ROW_SUMS = '''
@nki.jit
def kernel(s):
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    total = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    e = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=e, op=nl.exp, data=t, reduce_cmd=nisa.reduce_cmd.reset)
    for j in nl.sequential_range(s.shape[1]):
        nisa.dma_copy(dst=t, src=s[:, j, :])
        nisa.activation(dst=e, op=nl.exp, data=t, scale=0.5, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reduce)
    nisa.activation(dst=e, op=nl.exp, data=t, reduce_res=total)      # idle: reads the registers out
    nisa.dma_copy(dst=out, src=total)
    return out
'''


def test_scalar_engine_registers_carry_a_sum_over_a_loop_exactly_as_running_every_iteration(rng):
    s = rng.standard_normal((128, 12, 64)).astype(np.float32)
    replayed, full = run(ROW_SUMS, s), run(ROW_SUMS, s, loop_replay=False)
    np.testing.assert_allclose(replayed.output, np.exp(0.5 * s).sum(axis=(1, 2))[:, None], rtol=1e-5)
    np.testing.assert_array_equal(replayed.output, full.output)
    assert trace_fields(replayed.trace) == trace_fields(full.trace)
    acts = [i for i in full.trace.instructions if i.op == "activation"]
    assert [i.attrs["reduce_cmd"] for i in acts] == ["reset"] + ["reduce"] * 12 + ["idle"]
    assert [i.attrs["reduce"] for i in acts] == [False] * 13 + [True]   # only the read-out costs its extra step
    # the registers are engine state, not an allocation of the trace
    assert not any("reduce_regs" in t.name for t in full.trace.tensors.values())
    assert run(ROW_SUMS, s, trace_only=True).trace.instructions


def test_registers_never_reset_are_never_written_memory():
    body = '''
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    r = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    e = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=e, op=nl.exp, data=t, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reduce, reduce_res=r)
    nisa.dma_copy(dst=out, src=r)
    return out
'''
    with pytest.raises(KernelError, match="never.written|unwritten|not written"):
        run(body, np.ones((128, 8), np.float32))


def test_tensor_scalar_reduce_with_a_unary_operator_load_reduce_and_negated_read_out(rng):
    # the NKI library's rmsnorm_quant: op0=nl.abs with an ignored operand, max-reduced
    x, y = rng.standard_normal((2, 64, 32)).astype(np.float32)
    init = rng.standard_normal((64, 1)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(x, y, init):
    out = nl.ndarray((64, 3), dtype=nl.float32, buffer=nl.shared_hbm)
    tx = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    ty = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    ti = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=tx, src=x)
    nisa.dma_copy(dst=ty, src=y)
    nisa.dma_copy(dst=ti, src=init)
    a = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    r = nl.ndarray((64, 3), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(dst=a, data=tx, op0=nl.abs, operand0=0.0, reduce_op=nl.maximum, reduce_res=r[:, 0:1])
    nisa.tensor_scalar_reduce(dst=a, data=tx, op0=nl.multiply, operand0=2.0, reduce_op=nl.add,
                              reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_init=ti)
    nisa.tensor_scalar_reduce(dst=a, data=ty, op0=nl.add, operand0=1.0, reduce_op=nl.add,
                              reduce_cmd=nisa.reduce_cmd.reduce, reduce_res=r[:, 1:2], reduce_res_negate=True)
    nisa.tensor_scalar(dst=a, data=ty, op0=nl.square, operand0=0.0, op1=nl.add, operand1=1.0)
    nisa.tensor_reduce(dst=r[:, 2:3], op=nl.add, data=a, axis=1)
    nisa.dma_copy(dst=out, src=r)
    return out
''', x, y, init)
    np.testing.assert_allclose(res.output[:, 0], np.abs(x).max(axis=1), rtol=1e-6)
    want = -(init[:, 0] + (2 * x).sum(axis=1) + (y + 1).sum(axis=1))
    np.testing.assert_allclose(res.output[:, 1], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res.output[:, 2], (y * y + 1).sum(axis=1), rtol=1e-5)


def test_activation_copy_in_the_nki_0_1_style_and_nl_copy_as_an_alu_operator(run_kernel, rng):
    x = rng.standard_normal((128, 16)).astype(np.float32)
    res = run_kernel('''
@nki.jit
def kernel(x):
    out = nl.ndarray((2, 128, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out[0], value=nisa.activation(op=nl.copy, data=t, scale=-1.0))
    nl.store(out[1], value=nisa.tensor_scalar(t, nl.copy, 5.0, op1=nl.add, operand1=1.0))
    return out
''', x)
    np.testing.assert_array_equal(res.output[0], -x)
    np.testing.assert_array_equal(res.output[1], x + 1)


def test_a_transpose_left_in_psum_feeds_the_matmul_through_a_copy_the_trace_shows(run_kernel, rng):
    p, v = rng.standard_normal((128, 128)).astype(np.float32), rng.standard_normal((128, 64)).astype(np.float32)
    with pytest.warns(UserWarning, match="PSUM tile"):
        res = run_kernel('''
@nki.jit
def kernel(p, v):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    p_t = nisa.nc_transpose(nl.load(p))
    nl.store(out, value=nl.copy(nisa.nc_matmul(stationary=p_t, moving=nl.load(v))))
    return out
''', p, v)
    np.testing.assert_allclose(res.output, p @ v, rtol=1e-4, atol=1e-4)
    ops = [(i.engine, i.op) for i in res.trace.instructions if i.engine != "dma"]
    assert ops[:3] == [("tensor", "nc_matmul"), ("vector", "tensor_copy"), ("tensor", "nc_matmul")]


def test_an_explicit_psum_operand_of_the_nki_style_is_still_refused(rng):
    with pytest.raises(KernelError, match="cannot read PSUM"):
        run('''
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=a)
    p = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=p, stationary=s, moving=s)
    q = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=q, stationary=p, moving=s)
    return out
''', np.ones((128, 128), np.float32))


def test_vector_engine_transpose_over_32x32_is_costed_as_its_32x32_blocks(run_kernel, rng):
    x = rng.standard_normal((96, 40)).astype(np.float32)
    res = run_kernel('''
@nki.jit
def kernel(x):
    out = nl.ndarray((40, 96), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.nc_transpose(nl.load(x), engine=nisa.vector_engine))
    return out
''', x)
    np.testing.assert_array_equal(res.output, x.T)
    (tr,) = [i for i in res.trace.instructions if i.op == "transpose"]
    assert tr.engine == "vector" and tr.attrs["blocks"] == 3 * 2 and tr.free_elems == 32 * 6
    with pytest.raises(KernelError, match="at most 128x128"):
        run_kernel('''
@nki.jit
def kernel(x):
    out = nl.ndarray((40, 96), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
    nl.store(out, value=nisa.nc_transpose(t, engine=nisa.vector_engine))
    return out
''', x)


def test_oob_mode_skip_on_a_store_and_trace_only(run_kernel, rng):
    # a 128-row tile stored into a 100-row output: rows 100..127 are skipped
    x = rng.standard_normal((128, 8)).astype(np.float32)
    body = '''
@nki.jit
def kernel(x):
    out = nl.ndarray((100, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(8)[None, :]
    nisa.dma_copy(dst=out[i_p, i_f], src=t[i_p, i_f], oob_mode=nisa.oob_mode.skip)
    return out
'''
    np.testing.assert_array_equal(run_kernel(body, x).output, x[:100])
    (dma,) = [i for i in run_kernel(body, x, trace_only=True).trace.instructions if i.api == "nisa.dma_copy"]
    assert dma.writes[0].elements == 100 * 8
    with pytest.raises(KernelError, match="out of bounds"):
        run_kernel(body.replace(", oob_mode=nisa.oob_mode.skip", ""), x)


def test_a_psum_tile_over_one_bank_takes_matmuls_bank_by_bank(rng):
    a, b = rng.standard_normal((128, 128)).astype(np.float32), rng.standard_normal((128, 2048)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(a, b):
    out = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.shared_hbm)
    ta = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    tb = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=a)
    nisa.dma_copy(dst=tb, src=b)
    p = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.psum)      # 4 of the 8 banks
    for j in nl.affine_range(4):
        nisa.nc_matmul(dst=p[:, j * 512:(j + 1) * 512], stationary=ta, moving=tb[:, j * 512:(j + 1) * 512])
    y = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=y, src=p)
    nisa.dma_copy(dst=out, src=y)
    return out
''', a, b)
    np.testing.assert_allclose(res.output, a.T @ b, rtol=1e-4, atol=1e-4)
    with pytest.raises(KernelError, match="crosses a 2 KiB PSUM bank"):
        run('''
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=a)
    p = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=p[:, 448:576], stationary=s, moving=s)
    return out
''', np.ones((128, 128), np.float32))


# ---- instructions of today's production kernels ------------------------------------------------------------
def test_nc_match_replace8_and_find_index8_pair_repeated_values_as_the_docs_say():
    # the nc_match_replace8 doc's example: slot 7 is matched first, so the earliest 8 lands in the highest slot;
    # nc_find_index8 pairs repeated values with their matches in ascending order
    d = np.array([[1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8, 0, 0, 0, 0, 0]], np.float32)
    v = np.array([[3, 8, 8, 8, 8, 8, 8, 8]], np.float32)
    res = run('''
@nki.jit
def kernel(d, v):
    o = nl.ndarray((3, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    td = nl.ndarray((1, 16), dtype=nl.float32, buffer=nl.sbuf)
    tv = nl.ndarray((1, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=td, src=d)
    nisa.dma_copy(dst=tv, src=v)
    found = nl.ndarray((1, 8), dtype=nl.uint32, buffer=nl.sbuf)
    matched = nl.ndarray((1, 8), dtype=nl.uint32, buffer=nl.sbuf)
    r = nl.ndarray((1, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.nc_find_index8(dst=found, data=td, vals=tv)
    nisa.nc_match_replace8(dst=r, data=td, vals=tv, imm=-5.0, dst_idx=matched)
    f = nl.ndarray((1, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=f, value=0.0)
    nisa.tensor_copy(dst=f[:, 0:8], src=found)
    nisa.tensor_copy(dst=f[:, 8:16], src=matched)
    nisa.dma_copy(dst=o[0:1, :], src=f)
    nisa.dma_copy(dst=o[1:2, :], src=r)
    nisa.dma_copy(dst=o[2:3, :], src=f)
    return o
''', d, v)
    np.testing.assert_array_equal(res.output[0, :8], [2, 4, 5, 6, 7, 8, 9, 10])
    np.testing.assert_array_equal(res.output[0, 8:], [2, 10, 9, 8, 7, 6, 5, 4])
    np.testing.assert_array_equal(res.output[1], [1, 2, -5, 4, -5, -5, -5, -5, -5, -5, -5, 0, 0, 0, 0, 0])


def test_nc_find_index8_marks_a_missing_value_with_all_ones_and_max8_runs_in_nki_0_1(run_kernel, rng):
    x = rng.permutation(16 * 40).reshape(16, 40).astype(np.float32)
    res = run_kernel('''
@nki.jit
def kernel(x):
    out = nl.ndarray((2, 16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    top = nisa.max8(src=t)
    probe = nisa.tensor_scalar(top, nl.add, 0.5)          # no element of x is a half
    i = nisa.nc_find_index8(data=t, vals=probe, dtype=nl.uint16)
    nl.store(out[0], value=top)
    nl.store(out[1], value=nl.copy(i, dtype=nl.float32))
    return out
''', x)
    np.testing.assert_array_equal(res.output[0], -np.sort(-x, axis=1)[:, :8])
    np.testing.assert_array_equal(res.output[1], np.full((16, 8), 0xFFFF, np.float32))
    ops = {i.op: (i.engine, i.free_elems) for i in res.trace.instructions}
    assert ops["max8"] == ("vector", 40) and ops["nc_find_index8"] == ("vector", 40)


def test_iota_and_affine_select_with_patterns_in_a_loop_replay_exactly(rng):
    body = '''
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
        y = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        # keep column j of row p where p - 2 j + 3 > 0
        nisa.affine_select(dst=y, pattern=[[-2, 64]], channel_multiplier=1, on_true_tile=t, on_false_value=-1.0,
                           cmp_op=nl.greater, offset=3)
        k = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=k, pattern=[[8, 8], [1, 8]], offset=i)
        z = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=z, data1=y, data2=k, op=nl.add)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=z)
    return out
'''
    x = rng.standard_normal((128 * 6, 64)).astype(np.float32)
    replayed, full = run(body, x), run(body, x, loop_replay=False)
    p, j = np.ogrid[:128, :64]
    want = np.concatenate([np.where(p - 2 * j + 3 > 0, blk, -1.0) + (i + j) for i, blk in
                           enumerate(x.reshape(6, 128, 64))])
    np.testing.assert_array_equal(full.output, want.astype(np.float32))
    np.testing.assert_array_equal(replayed.output, full.output)
    assert trace_fields(replayed.trace) == trace_fields(full.trace)
    with pytest.raises(KernelError, match="describes 32 elements per partition, dst holds 64"):
        run(body.replace("[[8, 8], [1, 8]]", "[[8, 4], [1, 8]]"), x)


SELECTIONS = """
@nki.jit
def kernel(x, pred, b0, b1, idx):
    o = nl.ndarray((6, 64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    p = nl.ndarray((64, 32), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.dma_copy(dst=p, src=pred)
    tb0 = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
    tb1 = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=tb0, src=b0)
    nisa.dma_copy(dst=tb1, src=b1)
    ti = nl.ndarray((64, 32), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ti, src=idx)
    a = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=a, value=7.0)
    nisa.tensor_copy_predicated(dst=a, src=t, predicate=p)
    nisa.dma_copy(dst=o[0], src=a)
    r = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    mx = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.range_select(dst=r, on_true_tile=t, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=tb0, bound1=tb1,
                      reduce_res=mx, range_start=4, on_false_value=-1e30)
    nisa.dma_copy(dst=o[1], src=r)
    s = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    mx2 = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.select_reduce(dst=s, predicate=p, on_true=t, on_false=-2.0, reduce_res=mx2, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.dma_copy(dst=o[2], src=s)
    g = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.nc_n_gather(dst=g, data=t, indices=ti)
    nisa.dma_copy(dst=o[3], src=g)
    pr = nl.ndarray((1, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_partition_reduce(dst=pr, op=nl.add, data=t)
    z = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=z, value=0.0)
    nisa.tensor_copy(dst=z[0:1, :], src=pr)
    nisa.tensor_copy(dst=z[:, 0:1], src=mx)
    nisa.tensor_copy(dst=z[:, 1:2], src=mx2)
    nisa.dma_copy(dst=o[4], src=z)
    nisa.dma_copy(dst=o[5], src=z)
    return o
"""


@pytest.mark.parametrize("trace_only", [False, True])
def test_predicated_copy_range_and_select_reduce_gather_and_partition_reduce(rng, trace_only):
    x = rng.standard_normal((64, 32)).astype(np.float32)
    pred = (rng.random((64, 32)) > 0.5).astype(np.uint8)
    b0 = rng.integers(0, 20, (64, 1)).astype(np.float32)
    b1 = b0 + rng.integers(1, 15, (64, 1))
    idx = rng.integers(0, 32, (64, 32)).astype(np.uint32)
    res = run(SELECTIONS, x, pred, b0, b1, idx, trace_only=trace_only)
    ops = [i.op for i in res.trace.instructions if i.engine != "dma"]
    assert ops[1:6] == ["tensor_copy_predicated", "range_select", "select_reduce", "nc_n_gather",
                        "tensor_partition_reduce"]
    if trace_only:
        return
    o = res.output
    np.testing.assert_array_equal(o[0], np.where(pred != 0, x, 7.0))
    i = 4 + np.arange(32)[None, :]
    kept = np.where((i >= b0) & (i < b1), x, np.float32(-1e30))
    np.testing.assert_array_equal(o[1], kept)
    selected = np.where(pred != 0, x, -2.0).astype(np.float32)
    np.testing.assert_array_equal(o[2], selected)
    np.testing.assert_array_equal(o[3], np.take_along_axis(x, idx.astype(np.int64), 1))
    np.testing.assert_allclose(o[4][0, 2:], x.sum(0)[2:], rtol=1e-5)
    np.testing.assert_array_equal(o[4][1:, 0], kept.max(1)[1:])
    np.testing.assert_array_equal(o[4][1:, 1], selected.max(1)[1:])


def test_dma_transpose_in_both_front_ends(run_kernel, rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    y = rng.standard_normal((16, 4, 8)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(x, y):
    o1 = nl.ndarray((64, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    o2 = nl.ndarray((8, 4, 16), dtype=y.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((64, 128), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=x)
    nisa.dma_copy(dst=o1, src=t)
    u = nl.ndarray((8, 4, 16), dtype=y.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(u, y, axes=(2, 1, 0))
    nisa.dma_copy(dst=o2, src=u)
    return o1, o2
''', x, y)
    np.testing.assert_array_equal(res.outputs[0], x.T)
    np.testing.assert_array_equal(res.outputs[1], y.transpose(2, 1, 0))
    tr = [i for i in res.trace.instructions if i.op == "dma_transpose"]
    assert [(i.engine, i.partitions, i.attrs["transpose"]) for i in tr] == [("dma", 64, True), ("dma", 8, True)]
    res01 = run_kernel('''
@nki.jit
def kernel(x):
    out = nl.ndarray((64, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.dma_transpose(x))
    return out
''', x)
    np.testing.assert_array_equal(res01.output, x.T)
    with pytest.raises(KernelError, match="permutes 2-D by"):
        run_kernel('''
@nki.jit
def kernel(x):
    out = nl.ndarray((64, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.dma_transpose(x, axes=(0, 1)))
    return out
''', x)


def test_nonzero_with_count_writes_each_gpsimd_cores_first_partition_only():
    x = np.zeros((32, 8), np.float32)
    x[0] = [0, 1, 1, 0, 0, 1, 0, 0]                  # the docs' example
    x[16, 7], x[3] = 2.0, 1.0                         # partition 3 belongs to core 0 but is not its first
    res = run('''
@nki.jit
def kernel(x):
    out = nl.ndarray((32, 9), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    d = nl.ndarray((32, 9), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=d, value=5)
    nisa.nonzero_with_count(dst=d, src=t, index_offset=16, padding_val=-1)
    nisa.dma_copy(dst=out, src=d)
    return out
''', x)
    want = np.full((32, 9), 5, np.int32)
    want[0] = [17, 18, 21, -1, -1, -1, -1, -1, 3]
    want[16] = [23, -1, -1, -1, -1, -1, -1, -1, 1]
    np.testing.assert_array_equal(res.output, want)


def test_nc_stream_shuffle_into_a_three_dimensional_tile_leaves_unmasked_partitions(rng):
    # the NKI library's find_nonzero_indices: partition 16 of each quadrant moved to its first, the rest kept
    x = rng.standard_normal((128, 1, 5)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 1, 5), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 1, 5), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.nc_stream_shuffle(dst=t, src=t, shuffle_mask=[16] + [255] * 31)
    nisa.dma_copy(dst=out, src=t)
    return out
''', x)
    want = x.copy()
    want[0::32] = x[16::32]
    np.testing.assert_array_equal(res.output, want)


@pytest.mark.parametrize("call, why", [
    ("nisa.quantize_mx(dst=t, src=t, dst_scale=t)", "NeuronCore-v4 (trn3) only"),
    ("nisa.core_barrier(data=t, cores=(0, 1))", "runs SPMD programs one after another"),
    ("nisa.rng(dst=t)", "not documented bit-exactly"),
])
def test_an_isa_call_that_cannot_be_simulated_says_why(call, why):
    from accelopt_nb.errors import UnsupportedAPIError
    with pytest.raises(UnsupportedAPIError, match="does not implement") as e:
        run(f'''
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    {call}
    return out
''', np.ones((4, 4), np.float32))
    assert why in str(e.value) and e.value.api == "nki.isa." + call.split("(")[0].split(".")[1]


def test_dma_compute_adds_its_sources_in_fp32_and_nonzero_with_count_takes_its_defaults(rng):
    a, b = rng.standard_normal((2, 64, 16)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    cnt = nl.ndarray((64, 17), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_compute(s, [t, b], nl.add)
    nisa.dma_compute(dst=out, srcs=[s, b], reduce_op=nl.add, scales=[1.0, 1.0])
    c = nl.ndarray((64, 17), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=c, value=0)
    nisa.nonzero_with_count(dst=c, src=t)
    nisa.dma_copy(dst=cnt, src=c)
    return out, cnt
''', a, b)
    np.testing.assert_allclose(res.outputs[0], a + 2 * b, rtol=1e-6)
    np.testing.assert_array_equal(res.outputs[1][0], list(range(16)) + [16])
    assert [i.op for i in res.trace.instructions if i.engine == "dma"].count("dma_compute") == 2
    from accelopt_nb.perf import estimate
    assert estimate(res.trace).latency > 0
