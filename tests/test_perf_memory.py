"""On-chip memory pressure: live ranges, spills, and the capacity limit in time."""

from accelopt_nb.perf import estimate, load_hw
from accelopt_nb.perf.memory import TimedPool, live_ranges, plan_memory
from perf_builders import TraceBuilder

TRN1 = load_hw("trn1")
NB, COLS = 8, 8192          # 8 blocks of 128 x 8192 fp32 = 32 KiB per partition each: 256 KiB in all


def _untiled():
    """Load every block first, then compute, then store: all 8 blocks are live at once."""
    b = TraceBuilder("untiled")
    src, dst = b.hbm("src", (NB * 128, COLS)), b.hbm("dst", (NB * 128, COLS), kind="output")
    buf = b.tensor("buf", (NB, 128, COLS), par_axis=1)
    for i in range(NB):
        b.line = 10
        b.dma(b.block(buf, i), b.region(src, (i * 128, 0), ((i + 1) * 128, COLS)))
    for i in range(NB):
        b.line = 11
        b.vector("tensor_scalar", [b.block(buf, i)], [b.block(buf, i)], COLS)
    for i in range(NB):
        b.line = 12
        b.dma(b.region(dst, (i * 128, 0), ((i + 1) * 128, COLS)), b.block(buf, i))
    return b.trace


def _tiled():
    """The same work, one tile at a time (the tile is declared inside the loop)."""
    b = TraceBuilder("tiled")
    src, dst = b.hbm("src", (NB * 128, COLS)), b.hbm("dst", (NB * 128, COLS), kind="output")
    for i in range(NB):
        b.loops = ((1, "affine", i),)
        b.line = 20
        t = b.tensor("t", (128, COLS))
        b.line = 21
        b.dma(b.region(t), b.region(src, (i * 128, 0), ((i + 1) * 128, COLS)))
        b.line = 22
        b.vector("tensor_scalar", [b.region(t)], [b.region(t)], COLS)
        b.line = 23
        b.dma(b.region(dst, (i * 128, 0), ((i + 1) * 128, COLS)), b.region(t))
    return b.trace


def test_spills_appear_when_live_data_exceeds_sbuf_and_vanish_when_tiled():
    block = 128 * COLS * 4
    untiled, tiled = estimate(_untiled()), estimate(_tiled())
    assert untiled.sbuf_peak_demand_bytes_per_partition == NB * COLS * 4 > TRN1.sbuf_usable_bytes_per_partition
    # 256 KiB of demand against 176 KiB: at least 3 blocks of 32 KiB leave SBUF and come back
    assert untiled.spill_save_bytes >= 3 * block and untiled.spill_reload_bytes >= 3 * block
    assert untiled.spill_save_bytes % block == 0
    # spill traffic is HBM traffic (profiler convention)
    io = NB * block
    assert untiled.hbm_read_bytes == io + untiled.spill_reload_bytes
    assert untiled.hbm_write_bytes == io + untiled.spill_save_bytes
    assert any("spills" in line for line in untiled.bottleneck)
    assert tiled.spill_save_bytes == tiled.spill_reload_bytes == 0
    assert tiled.hbm_read_bytes == io
    assert tiled.sbuf_peak_demand_bytes_per_partition <= 2 * COLS * 4
    assert untiled.total_time > tiled.total_time


def test_spill_schedule_moves_data_on_the_spill_queue():
    p = estimate(_untiled())
    kinds = {ev.kind for ev in p.schedule.spill_events}
    assert kinds == {"spill_save", "spill_reload"}
    for ev in p.schedule.spill_events:
        assert ev.end > ev.start


def test_psum_overflow_spills_whole_banks():
    b = TraceBuilder()
    st, mv = b.tensor("st", (128, 128), "bfloat16"), b.tensor("mv", (128, 512), "bfloat16")
    outs = [b.tensor(f"acc{i}", (128, 512), "float32", "psum") for i in range(9)]       # 9 banks > 8
    for ps in outs:
        b.matmul(b.region(ps), b.region(st), b.region(mv), 128, 128, 512, accumulate=False)
    sink = b.tensor("sink", (128, 512))
    for ps in outs:
        b.vector("tensor_copy", [b.region(ps)], [b.region(sink)], 512)
    plan = plan_memory(b.trace, TRN1)
    assert plan.peak_demand["psum"] == 9 * 2048
    assert plan.peak_resident["psum"] <= 8 * 2048
    assert len(plan.spills) == 1 and plan.spills[0].buffer == "psum"


def test_blocks_are_live_separately_and_overwrites_start_new_ranges():
    b = TraceBuilder()
    buf = b.tensor("buf", (4, 128, 256), par_axis=1)
    x = b.tensor("x", (128, 256))
    for i in range(4):
        b.vector("tensor_scalar", [b.region(x)], [b.block(buf, i)], 256)
        b.vector("tensor_scalar", [b.block(buf, i)], [b.region(x)], 256)
    ranges, _ = live_ranges(b.trace, TRN1)
    per_block = [r for r in ranges if r.tensor == buf]
    assert len(per_block) == 4 and all(r.end == r.start + 1 for r in per_block)
    # x: read, then written and read three times, then written: each write after a read starts a new
    # value (live range): [0], [1, 2], [3, 4], [5, 6], [7]
    assert [(r.start, r.end) for r in ranges if r.tensor == x] == [(0, 0), (1, 2), (3, 4), (5, 6), (7, 7)]
    assert plan_memory(b.trace, TRN1).peak_demand["sbuf"] == 2 * 256 * 4


def test_timed_pool_waits_for_releases_in_time_order():
    pool = TimedPool(100)
    assert pool.allocate(60, 0.0) == 0.0
    pool.release(60, 5.0)
    assert pool.allocate(30, 1.0) == 1.0          # fits beside the first allocation
    assert pool.allocate(50, 2.0) == 5.0          # must wait for the first release
    assert pool.allocate(500, 0.0) == 0.0         # cannot fit at all: proceeds (the spill plan covers it)


def test_capacity_limits_how_far_loads_run_ahead():
    """Big tiles in an affine loop: only a few fit in SBUF, so loads cannot all be issued at once."""
    def trace(cols):
        b = TraceBuilder()
        n = 16
        src = b.hbm("src", (n * 128, cols))
        out = b.tensor("out", (128, cols))
        for i in range(n):
            b.loops = ((1, "affine", i),)
            t = b.tensor("t", (128, cols))
            b.line = 1
            b.dma(b.region(t), b.region(src, (i * 128, 0), ((i + 1) * 128, cols)))
            b.line = 2
            b.vector("reciprocal", [b.region(t)], [b.region(out)], cols)
        return b.trace
    p = estimate(trace(16384))          # 64 KiB tiles: two fit in 176 KiB
    starts = p.schedule.start
    loads = [i for i, ins in enumerate(p.trace.instructions) if ins.engine == "dma"]
    computes = [i for i, ins in enumerate(p.trace.instructions) if ins.engine == "vector"]
    # the 4th load cannot start before the 1st tile has been consumed
    assert starts[loads[3]] >= p.schedule.end[computes[0]] - 1e-12
