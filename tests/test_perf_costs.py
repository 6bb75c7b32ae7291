"""Per-instruction cost formulas of the performance model (ISA26 cycle costs, nki_hw_facts.md §2.5/§3)."""
import pytest

from accelopt_nb.perf.calibrate import documented_overrides
from accelopt_nb.perf import load_hw
from accelopt_nb.perf.costs import compute_cost, matmul_cycles
from perf_builders import TraceBuilder

TRN1 = load_hw("trn1", documented_overrides())   # the ISA26/ARCH1 formulas as documented, before the fit
TRN2 = load_hw("trn2")


def _mm(m=128, n=512, dtype="bfloat16", **attrs):
    b = TraceBuilder()
    st = b.tensor("st", (128, m), dtype)
    mv = b.tensor("mv", (128, n), dtype)
    out = b.tensor("out", (m, n), "float32", "psum")
    return b.matmul(b.region(out), b.region(st), b.region(mv), 128, m, n, dtype=dtype, **attrs)


def _vec(op, n, dtype="float32", engine="vector", psum=False, inputs=1, **attrs):
    b = TraceBuilder()
    srcs = [b.tensor(f"in{i}", (128, n), dtype, "psum" if (psum and i == 0) else "sbuf") for i in range(inputs)]
    dst = b.tensor("dst", (128, n), dtype)
    return b.vector(op, [b.region(s) for s in srcs], [b.region(dst)], n, dtype=dtype, engine=engine, **attrs)


def cycles(ins, hw=TRN1):
    c = compute_cost(ins, hw)
    return round((c.busy_s + c.overhead_s) * hw.clock(ins.engine), 6)


def test_matmul_full_tile_is_moving_size_cycles():
    # 128x128 stationary, 128x512 moving, bf16: max(min(64, 128), 512) = 512 cycles at 2.8 GHz
    ins = _mm()
    assert matmul_cycles(ins, TRN1) == 512
    assert compute_cost(ins, TRN1).busy_s == pytest.approx(512 / 2.8e9)


def test_matmul_short_moving_is_bounded_by_init_latency():
    assert matmul_cycles(_mm(m=128, n=16), TRN1) == 64          # min(64, 128) = 64 > 16
    assert matmul_cycles(_mm(m=32, n=16), TRN1) == 32           # min(64, 32) = 32 > 16


def test_matmul_fp32_is_four_times_slower_and_onezero_halves_that():
    assert matmul_cycles(_mm(dtype="float32"), TRN1) == 4 * 512
    assert matmul_cycles(_mm(dtype="float32", stationary_onezero=True), TRN1) == 2 * 512
    assert matmul_cycles(_mm(dtype="float32", is_transpose=True), TRN1) == 4 * 512
    assert matmul_cycles(_mm(dtype="float32", is_transpose=True), TRN2) == 2 * 512   # trn2 transpose mode


def test_tensor_tensor_costs():
    assert cycles(_vec("tensor_tensor", 512, inputs=2, alu="multiply")) == 2 * 512          # fp32: 2N
    assert cycles(_vec("tensor_tensor", 512, inputs=2, psum=True, alu="multiply")) == 512   # one input in PSUM: N
    assert cycles(_vec("tensor_tensor", 512, "bfloat16", inputs=2, alu="add")) == 512       # all bf16 add: N
    assert cycles(_vec("tensor_tensor", 512, "bfloat16", inputs=2, alu="divide")) == 1024   # other ALU ops: 2N


def test_single_input_vector_costs():
    assert cycles(_vec("tensor_scalar", 512, alu="multiply")) == 512
    assert cycles(_vec("tensor_copy", 1000)) == 1000
    assert cycles(_vec("tensor_tensor_scan", 512, inputs=2)) == 1024
    assert cycles(_vec("reciprocal", 512)) == 8 * 512
    assert cycles(_vec("bn_aggr", 300)) == pytest.approx(13 * 300 / 3)
    assert cycles(_vec("tensor_reduce", 512, alu="add")) == 512
    assert cycles(_vec("tensor_reduce", 512, "bfloat16", alu="add")) == 256
    assert cycles(_vec("tensor_scalar_reduce", 512)) == 512 + 64
    assert cycles(_vec("memset", 512, "bfloat16", inputs=0, value=0.0)) == 256
    assert cycles(_vec("memset", 512, inputs=0, value=1.0)) == 512


def test_small_instructions_pay_min_ii_and_the_tiny_overhead():
    # max(MIN_II, N) = 64, plus ~100 cycles of static overhead for N < 128 (ARCH1)
    assert cycles(_vec("tensor_scalar", 8)) == 64 + 100
    assert cycles(_vec("tensor_scalar", 128)) == 128


def test_scalar_engine_activation_costs():
    act = _vec("activation", 512, engine="scalar", func="exp")
    assert cycles(act) == 512
    assert compute_cost(act, TRN1).busy_s == pytest.approx(512 / 1.4e9)
    assert cycles(_vec("activation_reduce", 512, engine="scalar")) == 512 + 64


def test_gpsimd_costs_have_a_fixed_start():
    assert cycles(_vec("iota", 512, engine="gpsimd", inputs=0)) == 150 + 512
    assert cycles(_vec("affine_select", 4, engine="gpsimd")) == 150 + 4


def test_trn2_vector_performance_mode_for_bf16():
    ins = _vec("tensor_scalar", 1024, "bfloat16")
    assert cycles(ins, TRN2) == 256                       # 4x faster, SBUF to SBUF
    assert cycles(_vec("tensor_scalar", 1024, "bfloat16", psum=True), TRN2) == 512   # 2x with a PSUM side
    assert cycles(ins, TRN1) == 1024                      # no performance mode on NC-v2
    assert compute_cost(ins, TRN2).busy_s == pytest.approx(256 / 0.96e9)


def test_unknown_vector_op_falls_back_to_generic_cost():
    assert cycles(_vec("some_future_op", 700)) == 700
