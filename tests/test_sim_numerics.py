"""Numerics as documented: fp32 inside engines, fp32 PSUM accumulation, storage rounded to the tile dtype."""
import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16


def test_bf16_storage_rounds_and_engines_compute_fp32(run_kernel, rng):
    body = """
@nki.jit
def kernel(a, b):
    out = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    x = nl.load(a)                       # bf16 tiles
    y = nl.load(b)
    s = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    s[...] = nl.multiply(x, y, dtype=nl.bfloat16)
    nl.store(out, value=nl.add(s, 1.0, dtype=nl.bfloat16))
    return out
"""
    a = rng.standard_normal((8, 16)).astype(BF16)
    b = rng.standard_normal((8, 16)).astype(BF16)
    out = run_kernel(body, a, b).output
    assert out.dtype == BF16
    prod = (a.astype(np.float32) * b.astype(np.float32)).astype(BF16)
    expected = (prod.astype(np.float32) + 1.0).astype(BF16)
    np.testing.assert_array_equal(out, expected)


def test_psum_accumulates_in_fp32_from_bf16_operands(run_kernel, rng):
    body = """
@nki.jit
def kernel(s, m):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(s.shape[0] // 128):
        acc += nisa.nc_matmul(nl.load(s[k * 128:(k + 1) * 128, :]), nl.load(m[k * 128:(k + 1) * 128, :]))
    nl.store(out, value=acc)
    return out
"""
    s = rng.standard_normal((512, 128)).astype(BF16)
    m = rng.standard_normal((512, 512)).astype(BF16)
    out = run_kernel(body, s, m).output
    assert out.dtype == np.float32
    ref = s.astype(np.float64).T @ m.astype(np.float64)
    assert np.abs(out - ref).max() / np.abs(ref).max() < 1e-5  # fp32 accumulation, not bf16


def test_fp8_and_fp16_storage(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    o8 = nl.ndarray(a.shape, dtype=nl.float8_e4m3, buffer=nl.shared_hbm)
    o16 = nl.ndarray(a.shape, dtype=nl.float16, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.store(o8, value=nl.copy(x, dtype=nl.float8_e4m3))
    nl.store(o16, value=nl.copy(x, dtype=nl.float16))
    return o8, o16
"""
    a = rng.standard_normal((4, 8)).astype(np.float32)
    o8, o16 = run_kernel(body, a).outputs
    np.testing.assert_array_equal(o8, a.astype(ml_dtypes.float8_e4m3))
    np.testing.assert_array_equal(o16, a.astype(np.float16))


def test_result_tile_rounds_once_to_its_destination_dtype(run_kernel, rng):
    # exp writes straight into the fp32 buffer: no intermediate bf16 rounding of the bf16 input's result
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    buf = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    buf[...] = nisa.activation(op=nl.exp, data=nl.load(a), dtype=nl.float32)
    nl.store(out, value=buf)
    return out
"""
    a = rng.standard_normal((4, 8)).astype(BF16)
    np.testing.assert_allclose(run_kernel(body, a).output, np.exp(a.astype(np.float32)), rtol=1e-6)


def test_type_promotion_rules():
    from accelopt_nb.sim.core import dtypes as dt
    assert dt.promote(dt.float16, dt.bfloat16) == dt.float32
    assert dt.promote(dt.float8_e4m3, dt.float8_e5m2) == dt.bfloat16
    assert dt.promote(dt.float8_e4m3, dt.float16) == dt.float16
    assert dt.promote(dt.int8, dt.uint8) == dt.int16
    assert dt.promote(dt.int8, dt.uint16) == dt.int32
    assert dt.promote(dt.int32, dt.uint32) == dt.float32
    assert dt.promote(dt.float16, dt.scalar_dtype(1.2)) == dt.float32   # weakly typed python float
    assert dt.promote(dt.bfloat16, dt.scalar_dtype(3)) == dt.bfloat16   # int scalar keeps the float tile
