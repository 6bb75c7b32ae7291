"""Timing model: engine overlap, dependencies, DMA queues and bandwidth, conflicts, loop kinds."""
import pytest

from accelopt_nb.perf.calibrate import documented_overrides
from accelopt_nb.perf import estimate, load_hw
from perf_builders import TraceBuilder

# the ISA26/ARCH1 formulas as documented, before the fit; the fixed costs of §2b (launch, DMA issue
# slots) off, so each test sees the one rule it is about (they have their own tests below)
NO_FIXED = {"launch_overhead_s": 0.0, "dma_issue_s": 0.0, "dma_packet_overhead_s": 0.0}   # and the v2 DMA curve
TRN1 = load_hw("trn1", {**documented_overrides(), **NO_FIXED})
SHIPPED1, SHIPPED2 = load_hw("trn1", NO_FIXED), load_hw("trn2", NO_FIXED)   # the shipped fit, fixed costs off
US = 1e-6


def vec_time(cycles, hw=TRN1):
    return cycles / hw.vector_clock_hz


def test_independent_engines_overlap():
    b = TraceBuilder()
    x, y = b.tensor("x", (128, 4096)), b.tensor("y", (128, 4096))
    ox, oy = b.tensor("ox", (128, 4096)), b.tensor("oy", (128, 4096))
    b.vector("tensor_scalar", [b.region(x)], [b.region(ox)], 4096)
    b.vector("activation", [b.region(y)], [b.region(oy)], 4096, engine="scalar", func="exp")
    p = estimate(b.trace, TRN1)
    t_vec, t_act = 4096 / 1.12e9, 4096 / 1.4e9
    assert p.total_time == pytest.approx(max(t_vec, t_act))
    assert p.vector_engine_active_time_percent == pytest.approx(1.0)
    assert p.scalar_engine_active_time_percent == pytest.approx(t_act / t_vec)


def test_a_dependency_serializes_engines():
    b = TraceBuilder()
    x, mid, out = b.tensor("x", (128, 4096)), b.tensor("mid", (128, 4096)), b.tensor("out", (128, 4096))
    b.vector("tensor_scalar", [b.region(x)], [b.region(mid)], 4096)
    b.vector("activation", [b.region(mid)], [b.region(out)], 4096, engine="scalar")
    p = estimate(b.trace, TRN1)
    # RAW: the activation starts when the vector op ends, and pays the dependent-issue overhead
    expected = 4096 / 1.12e9 + (4096 + TRN1.dependent_overhead_cycles) / 1.4e9
    assert p.total_time == pytest.approx(expected)


def test_each_engine_runs_in_order():
    b = TraceBuilder()
    tiles = [b.tensor(f"t{i}", (128, 1024)) for i in range(4)]
    for i in range(2):
        b.vector("tensor_scalar", [b.region(tiles[2 * i])], [b.region(tiles[2 * i + 1])], 1024)
    assert estimate(b.trace, TRN1).total_time == pytest.approx(2 * 1024 / 1.12e9)


def test_write_after_read_waits_for_the_reader():
    b = TraceBuilder()
    x, y, z = b.tensor("x", (128, 8192)), b.tensor("y", (128, 8192)), b.tensor("z", (128, 512))
    b.vector("activation", [b.region(x)], [b.region(y)], 8192, engine="scalar")      # reads x for a while
    b.vector("tensor_scalar", [b.region(z)], [b.region(x, (0, 0), (128, 512))], 512)  # overwrites part of x
    p = estimate(b.trace, TRN1)
    assert p.total_time == pytest.approx(8192 / 1.4e9 + 512 / 1.12e9)


def test_disjoint_regions_of_one_tensor_do_not_depend():
    b = TraceBuilder()
    x, y = b.tensor("x", (128, 8192)), b.tensor("y", (128, 1024))
    b.vector("activation", [b.region(x, (0, 0), (128, 4096))], [b.region(y)], 4096, engine="scalar")
    b.vector("tensor_scalar", [b.region(y)], [b.region(x, (0, 4096), (128, 8192))], 4096)
    # WAR on y (the activation writes y, the vector op reads it): serialized by RAW, not by x
    p = estimate(b.trace, TRN1)
    assert p.total_time == pytest.approx(4096 / 1.4e9 + (4096 + 100) / 1.12e9)
    b2 = TraceBuilder()
    x2, y2, w2 = b2.tensor("x", (128, 8192)), b2.tensor("y", (128, 1024)), b2.tensor("w", (128, 1024))
    b2.vector("activation", [b2.region(x2, (0, 0), (128, 4096))], [b2.region(y2)], 4096, engine="scalar")
    b2.vector("tensor_scalar", [b2.region(w2)], [b2.region(x2, (0, 4096), (128, 8192))], 4096)
    assert estimate(b2.trace, SHIPPED1).total_time == pytest.approx(4096 / 1.12e9)


def _load_trace(n_loads, rows=128, cols=2048, same_statement=True, dtype="float32"):
    b = TraceBuilder()
    src = b.hbm("src", (rows * n_loads, cols), dtype)
    for i in range(n_loads):
        b.line = 10 if same_statement else 10 + i
        t = b.tensor(f"t{i}", (rows, cols), dtype)
        b.dma(b.region(t), b.region(src, (i * rows, 0), ((i + 1) * rows, cols)))
    return b.trace


def test_dma_transfer_time_follows_bytes_per_partition():
    big = estimate(_load_trace(1, cols=2048), SHIPPED1).total_time          # 8 KiB per partition, efficiency 0.98
    assert big == pytest.approx(128 * 8192 / (0.98 * 272e9), rel=1e-3)
    small = estimate(_load_trace(1, cols=512), SHIPPED1).total_time          # 2 KiB: 0.81, but the 1.3 us latency dominates
    assert small == pytest.approx(TRN1.dma_fixed_latency_s)
    # per byte, 256 B per partition is ~8x less efficient than 2 KiB
    t256 = estimate(_load_trace(64, cols=64), SHIPPED1).total_time
    t2k = estimate(_load_trace(8, cols=512), SHIPPED1).total_time
    assert t256 / t2k == pytest.approx(0.81 / 0.10, rel=0.1)


def test_one_queue_is_fifo_and_separate_statements_overlap():
    # 16 partitions (2 DMA engines): one queue moves ~27 GB/s, far below the shared caps
    serial = estimate(_load_trace(4, rows=16, same_statement=True), SHIPPED1).total_time
    parallel = estimate(_load_trace(4, rows=16, same_statement=False), SHIPPED1).total_time
    one = estimate(_load_trace(1, rows=16), SHIPPED1).total_time
    assert serial == pytest.approx(4 * one, rel=1e-3)
    assert parallel == pytest.approx(one, rel=1e-3)


def test_fewer_partitions_use_fewer_dma_engines():
    full = estimate(_load_trace(1, rows=128, cols=4096), SHIPPED1).total_time
    eighth = estimate(_load_trace(1, rows=16, cols=4096), SHIPPED1).total_time      # 2 of 16 engines
    assert eighth == pytest.approx(full, rel=1e-3)                        # 1/8 of the bytes, 1/8 of the engines


def test_concurrent_queues_share_the_dma_engines_and_hbm():
    # 16 queues, 32 KiB per partition: together they cannot beat the 16 engines' 272 GB/s
    p = estimate(_load_trace(32, cols=8192, same_statement=False), SHIPPED1)
    rate = p.hbm_read_bytes / p.total_time
    assert 0.9 * TRN1.dma_bandwidth < rate <= TRN1.dma_bandwidth * 1.001
    # a slower HBM binds instead
    p2 = estimate(_load_trace(32, cols=8192, same_statement=False), SHIPPED1, overrides={"hbm_bandwidth": 150e9})
    rate2 = p2.hbm_read_bytes / p2.total_time
    assert 0.9 * 150e9 < rate2 <= 150e9 * 1.001
    # 16-partition transfers use 2 engines each: 8 queues of them run side by side at full rate
    one = estimate(_load_trace(1, rows=16, cols=2048), SHIPPED1).total_time
    eight = estimate(_load_trace(8, rows=16, cols=2048, same_statement=False), SHIPPED1).total_time
    assert eight == pytest.approx(one, rel=1e-3)


def _port_trace(engine2, buffer):
    b = TraceBuilder()
    a, oa = b.tensor("a", (128, 4096), buffer=buffer), b.tensor("oa", (128, 4096))
    c, oc = b.tensor("c", (128, 4096), buffer=buffer), b.tensor("oc", (128, 4096))
    b.vector("tensor_scalar", [b.region(a)], [b.region(oa)], 4096)
    b.vector("tensor_scalar", [b.region(c)], [b.region(oc)], 4096, engine=engine2)
    return b.trace


def test_trn1_vector_and_gpsimd_share_the_sbuf_port():
    t1 = estimate(_port_trace("gpsimd", "sbuf"), SHIPPED1).total_time
    assert t1 == pytest.approx(4096 / 1.12e9 + (150 + 4096) / 1.4e9)      # serialized
    t2 = estimate(_port_trace("gpsimd", "sbuf"), SHIPPED2).total_time
    assert t2 == pytest.approx(max(4096 / 0.96e9, (150 + 4096) / 1.2e9))   # lifted on trn2


def test_trn1_vector_and_scalar_share_psum_access():
    assert estimate(_port_trace("scalar", "psum"), SHIPPED1).total_time == pytest.approx(4096 / 1.12e9 + 4096 / 1.4e9)
    assert estimate(_port_trace("scalar", "sbuf"), SHIPPED1).total_time == pytest.approx(4096 / 1.12e9)


def test_psum_accumulation_group_then_evacuation():
    b = TraceBuilder()
    ps = b.tensor("acc", (128, 512), "float32", "psum")
    st, mv, out = b.tensor("st", (128, 128), "bfloat16"), b.tensor("mv", (128, 512), "bfloat16"), b.tensor("o", (128, 512))
    b.vector("memset", [], [b.region(ps)], 512, value=0.0)
    for _ in range(4):
        b.matmul(b.region(ps), b.region(st), b.region(mv), 128, 128, 512)
    b.vector("tensor_copy", [b.region(ps)], [b.region(out)], 512)
    p = estimate(b.trace, TRN1)
    # the zero-fill is folded into the first matmul; the copy waits for all four matmuls
    assert p.total_time == pytest.approx(4 * 512 / 2.8e9 + (512 + 100) / 1.12e9)
    assert p.matmul_instruction_count == 4


def _pipeline(kind):
    """4 iterations of load -> vector op -> store, the tile allocated inside the loop."""
    b = TraceBuilder()
    src, dst = b.hbm("src", (512, 8192)), b.hbm("dst", (512, 8192), kind="output")
    for i in range(4):
        b.loops = ((1, kind, i),)
        b.line = 20
        t = b.tensor("t", (128, 8192))
        b.line = 21
        b.dma(b.region(t), b.region(src, (i * 128, 0), (i * 128 + 128, 8192)))
        b.line = 22
        b.vector("reciprocal", [b.region(t)], [b.region(t)], 8192)
        b.line = 23
        b.dma(b.region(dst, (i * 128, 0), (i * 128 + 128, 8192)), b.region(t))
    return b.trace


def test_affine_iterations_overlap_and_sequential_ones_are_single_buffered():
    affine = estimate(_pipeline("affine"), TRN1).total_time
    sequential = estimate(_pipeline("sequential"), TRN1).total_time
    load = 128 * 32768 / (1.0 * 272e9)
    compute = 8 * 8192 / 1.12e9
    assert affine == pytest.approx(load + 4 * compute + load, rel=0.02)      # loads and stores hide under compute
    assert sequential == pytest.approx(4 * (2 * load + compute), rel=0.02)   # next load waits for the free buffer


def _load_compute_store(kind):
    """4 iterations of load a -> vector a -> m -> vector m -> o -> store o: different tiles in and out."""
    b = TraceBuilder()
    src, dst = b.hbm("src", (512, 2048)), b.hbm("dst", (512, 2048), kind="output")
    for i in range(4):
        b.loops = ((1, kind, i),)
        rows = (i * 128, 0), (i * 128 + 128, 2048)
        tiles = []
        for line, name in enumerate("amo", start=30):     # one allocation site each
            b.line = line
            tiles.append(b.tensor(name, (128, 2048)))
        a, m, o = tiles
        b.dma(b.region(a), b.region(src, *rows))
        b.vector("tensor_scalar", [b.region(a)], [b.region(m)], 8192)
        b.vector("tensor_scalar", [b.region(m)], [b.region(o)], 8192)
        b.dma(b.region(dst, *rows), b.region(o))
    return b.trace


@pytest.mark.parametrize("kind", ["sequential", "spmd"])
def test_sequential_loads_wait_for_the_earlier_stores_to_land(kind):
    unordered = load_hw("trn1", {**documented_overrides(), **NO_FIXED, "sequential_hbm_order": False})
    transfer = 128 * 8192 / (0.98 * 272e9)     # 8 KiB per partition: 98% of the DMA engines' rate
    compute = (8192 + 100) / 1.12e9            # each op waits for its input: + the dependent overhead
    ordered = estimate(_load_compute_store(kind), TRN1).total_time
    assert ordered == pytest.approx(4 * (transfer + 2 * compute + transfer), rel=0.02)   # iterations do not overlap
    # without the rule the next load waits only for the last read of its buffer and hides under the compute
    assert estimate(_load_compute_store(kind), unordered).total_time == pytest.approx(
        transfer + 4 * 2 * compute + transfer, rel=0.02)
    affine = _load_compute_store("affine")
    assert estimate(affine, TRN1).total_time == pytest.approx(estimate(affine, unordered).total_time)


def test_dependent_back_to_back_instructions_pay_an_overhead():
    def chain(dependent):
        b = TraceBuilder()
        ts = [b.tensor(f"t{i}", (128, 512)) for i in range(9)]
        for i in range(4):
            src = ts[i] if dependent else ts[4 + i]
            b.vector("tensor_scalar", [b.region(src)], [b.region(ts[i + 1] if dependent else ts[i])], 512)
        return estimate(b.trace, TRN1).total_time
    assert chain(False) == pytest.approx(4 * 512 / 1.12e9)
    assert chain(True) == pytest.approx((4 * 512 + 3 * 100) / 1.12e9)


def test_estimate_is_deterministic():
    trace = _pipeline("affine")
    assert estimate(trace).to_dict() == estimate(trace).to_dict()


def test_empty_trace_and_bad_input():
    p = estimate(TraceBuilder().trace)
    assert p.total_time == 0 and p.bound == "empty"
    with pytest.raises(TypeError, match="Trace"):
        estimate([1, 2, 3])


# ---- fixed costs at small granularity (perf_model.md §2b) -------------------------------------
def test_a_launch_costs_its_fixed_overhead_once():
    trace = _load_trace(1, cols=2048)
    base = estimate(trace, load_hw("trn1", {"launch_overhead_s": 0.0}))
    launched = estimate(trace, "trn1")
    hw = load_hw("trn1")
    assert hw.launch_overhead_s > 0
    # latency is the kernel's time; a timer of the whole kernel (total_time, NCL) adds the start/stop
    assert launched.total_time == pytest.approx(base.total_time, rel=1e-9)
    assert launched.end_to_end_ms == pytest.approx(launched.latency + 1e3 * hw.launch_overhead_s, rel=1e-9)
    assert base.end_to_end_ms == pytest.approx(base.latency)


def _tiny_dma_loop(n, partitions=1):
    """n iterations of a 4-byte-per-partition load on one statement, affine (the course's chunked add)."""
    b = TraceBuilder()
    src = b.hbm("src", (n * partitions, 1))
    b.line = 10
    for i in range(n):
        b.loops = ((1, "affine", i),)
        t = b.tensor(f"t{i}", (partitions, 1))
        b.dma(b.region(t), b.region(src, (i * partitions, 0), ((i + 1) * partitions, 1)))
    return b.trace


def test_dma_engines_start_one_transfer_per_issue_slot_across_all_queues():
    issue = 0.35e-6
    hw = load_hw("trn1", {"launch_overhead_s": 0.0, "dma_issue_s": issue})
    free = estimate(_tiny_dma_loop(400), SHIPPED1).total_time
    slotted = estimate(_tiny_dma_loop(400), hw).total_time
    assert slotted == pytest.approx(399 * issue + hw.dma_fixed_latency_s, rel=0.02)
    assert free < 0.6 * slotted                       # one queue alone moves 4-byte transfers faster
    # large transfers are not slowed: their data time is far longer than a slot
    big = _load_trace(4, cols=4096, same_statement=False)
    assert estimate(big, hw).total_time == pytest.approx(estimate(big, SHIPPED1).total_time, rel=0.01)


PACKET = {"dma_packet_overhead_s": 10e-9}     # the v3 packet rule (shipped on since 2026-12-02, perf_model.md §3)


def test_packet_efficiency_matches_the_dmaov_curve_where_one_transfer_amortizes_its_latency():
    hw = load_hw("trn1", PACKET)
    assert load_hw("trn1").dma_packet_overhead_s == load_hw("trn2").dma_packet_overhead_s == 10e-9   # shipped on
    for b, eff in ((4096, 0.96), (8192, 0.98), (16384, 0.99)):       # DMAOV's large end: ~10 ns per packet
        assert hw.dma_packet_efficiency(b) == pytest.approx(eff, abs=0.005)
    # below 2 KiB the curve is one transfer's fixed latency, charged on its own: many in flight move faster
    assert hw.dma_packet_efficiency(256) > 4 * hw.dma_efficiency_at(256)
    # 32 transfers of 256 B per partition from one statement (one FIFO queue): the v2 curve made it ~6x slower
    trace = _load_trace(32, cols=64, same_statement=True)
    v3 = estimate(trace, load_hw("trn1", {**PACKET, "dma_issue_s": 0.0}))     # packets alone
    v2 = estimate(trace, SHIPPED1)
    assert v3.total_time < v2.total_time / 3
    # element-sized runs (a transposing load) stay slow: each 4-byte run is a packet
    assert hw.dma_packet_efficiency(4) < 0.03


def test_issue_slots_are_taken_by_readiness_not_program_order():
    from accelopt_nb.perf.dma import IssueSlots
    slots = IssueSlots(1.0)
    assert slots.take(10.2) == 10.2           # a late transfer first in program order
    assert slots.take(0.0) == 0.0             # does not hold back one that is ready earlier
    assert slots.take(0.5) == 1.0             # the slot at 0 is taken: next free one
    assert slots.take(10.0) == 11.0


def test_trn2_does_not_order_a_sequential_loops_loads_after_its_stores():
    # trn1's rule is its 2025 compiler's (perf_model.md §3c); the trn2 measurements (2026 toolchain) overlap the steps
    trace = _load_compute_store("sequential")
    trn2 = load_hw("trn2")
    ordered = estimate(trace, load_hw("trn2", {"sequential_hbm_order": True})).total_time
    assert estimate(trace, trn2).total_time < 0.85 * ordered     # 4 steps: three loads hide under the compute
    assert estimate(trace, load_hw("trn1")).total_time == pytest.approx(
        estimate(trace, load_hw("trn1", {"sequential_hbm_order": True})).total_time)
