"""Renaming of whole-tile redefinitions, and sequential loops in kernels that skip the middle end (perf_model.md §3d)."""
import numpy as np
import pytest

from accelopt_nb.perf import estimate, load_hw
from accelopt_nb.perf.calibrate import documented_overrides
from accelopt_nb.sim import SimOptions
from perf_builders import TraceBuilder

NO_FIXED = {"launch_overhead_s": 0.0, "dma_issue_s": 0.0, "dma_packet_overhead_s": 0.0}


def _hw(**over):
    return load_hw("trn1", {**documented_overrides(), **NO_FIXED, **over})


LOAD = 128 * 8192 / (0.98 * 272e9)      # one (128, 2048) fp32 tile: 8 KiB per partition, 98% of the DMA rate
COMPUTE = 8192 / 1.12e9                 # one 8192-element VectorE op at the documented 1 cycle per element


def _reused_row_buffer(cover=2048, iters=4):
    """One SBUF tile declared once, reloaded every (affine) iteration and read by a long VectorE op."""
    b = TraceBuilder()
    src = b.hbm("src", (iters * 128, 2048))
    buf = b.tensor("buf", (128, 2048))
    for i in range(iters):
        b.loops = ((1, "affine", i),)
        b.line = 40
        out = b.tensor("out", (128, 2048))
        b.dma(b.region(buf, (0, 0), (128, cover)), b.region(src, (i * 128, 0), (i * 128 + 128, cover)))
        b.vector("tensor_scalar", [b.region(buf)], [b.region(out)], 8192)
    return b.trace


def test_a_whole_tile_reload_does_not_wait_for_the_old_values_readers():
    trace = _reused_row_buffer()
    chained = estimate(trace, _hw(rename_full_overwrites="none")).total_time
    renamed = estimate(trace, _hw(rename_full_overwrites="tiles")).total_time
    # one buffer: each load waits for the op reading the previous row, so nothing overlaps
    assert chained == pytest.approx(4 * (LOAD + COMPUTE), rel=0.03)
    # a new address per row (the allocator colours live ranges): the loads run ahead under the compute
    assert renamed == pytest.approx(LOAD + 4 * COMPUTE, rel=0.03)


def test_a_partial_overwrite_is_not_renamed():
    # half the tile is rewritten: the other half of the old value is still live in place, so the write waits
    trace = _reused_row_buffer(cover=1024)
    assert estimate(trace, _hw(rename_full_overwrites="tiles")).total_time == pytest.approx(
        estimate(trace, _hw(rename_full_overwrites="none")).total_time)


def test_a_masked_write_of_the_whole_box_is_not_renamed():
    # the write's box spans the tile but a mask keeps half its elements: the other half of the old value is
    # still live in place, so the write waits for the old value's readers, and a later read waits for both writes
    import dataclasses
    trace = _reused_row_buffer()
    for ins in trace.instructions:
        if ins.op.startswith("dma"):
            ins.writes = [dataclasses.replace(w, elements=w.elements // 2) for w in ins.writes]
    assert estimate(trace, _hw(rename_full_overwrites="tiles")).total_time == pytest.approx(
        estimate(trace, _hw(rename_full_overwrites="none")).total_time)


def test_renaming_is_bounded_by_on_chip_capacity():
    # 6 rows of 8 KiB on a 20 KiB SBUF: no room for a second row, so each load waits for room (the compute
    # reading the previous row), as without renaming
    trace = _reused_row_buffer(iters=6)
    small = {"sbuf_usable_bytes_per_partition": 20480, "sbuf_bytes_per_partition": 20480}
    free = estimate(trace, _hw(rename_full_overwrites="tiles")).total_time
    tight = estimate(trace, _hw(rename_full_overwrites="tiles", **small)).total_time
    assert free == pytest.approx(LOAD + 6 * COMPUTE, rel=0.03)
    assert tight > free * 1.1


def _load_compute_store(skip_middle_end):
    """A sequential loop: load a row, one VectorE op, store the row (one allocation site per tile)."""
    b = TraceBuilder()
    b.trace.skip_middle_end = skip_middle_end
    src, dst = b.hbm("src", (512, 2048)), b.hbm("dst", (512, 2048), kind="output")
    for i in range(4):
        b.loops = ((1, "sequential", i),)
        rows = (i * 128, 0), (i * 128 + 128, 2048)
        b.line = 30
        a = b.tensor("a", (128, 2048))
        b.line = 31
        o = b.tensor("o", (128, 2048))
        b.dma(b.region(a), b.region(src, *rows))
        b.vector("tensor_scalar", [b.region(a)], [b.region(o)], 8192)
        b.dma(b.region(dst, *rows), b.region(o))
    return b.trace


def test_skip_middle_end_kernels_do_not_keep_sequential_loops_in_order():
    on, off = _hw(sequential_rules_need_middle_end=True), _hw(sequential_rules_need_middle_end=False)
    conservative = 4 * (LOAD + COMPUTE + LOAD)     # §3c: each load waits for the previous store to land
    # with the middle end, sequential_range keeps its order under either setting
    assert estimate(_load_compute_store(False), on).total_time == pytest.approx(conservative, rel=0.03)
    assert estimate(_load_compute_store(False), off).total_time == pytest.approx(conservative, rel=0.03)
    # skip_middle_end_transformations: the loop reaches the backend as any unrolled stream, ordered by its data
    assert estimate(_load_compute_store(True), off).total_time == pytest.approx(conservative, rel=0.03)
    assert estimate(_load_compute_store(True), on).total_time == pytest.approx(LOAD + 4 * COMPUTE + LOAD, rel=0.03)


ROWS_KERNEL = """
{decorator}
@nki.jit
def kernel(x, w):
    out = nl.ndarray((x.shape[0], 128, 510), dtype=x.dtype, buffer=nl.shared_hbm)
    w_sb = nl.ndarray((128, 128), dtype=w.dtype, buffer=nl.sbuf)
    nisa.dma_copy(src=w, dst=w_sb)
    row = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)          # one row buffer, reloaded whole
    for h in nl.sequential_range(x.shape[0]):
        acc = nl.zeros((128, 510), dtype=nl.float32, buffer=nl.psum)
        for k in nl.sequential_range(2):
            nisa.dma_copy(src=x[h, k], dst=row)
            for j in nl.sequential_range(3):
                acc += nisa.nc_matmul(w_sb, row[:, j:j + 510])
        res = nisa.tensor_copy(acc, dtype=x.dtype)
        nisa.dma_copy(src=res, dst=out[h])
    return out
"""


def test_a_row_streaming_kernel_keeps_tensor_e_busy_only_without_the_middle_end(run_kernel):
    """A conv-like stream (a row buffer reloaded whole inside sequential loops, one store per output row), as
    the course's trn2 convolution: with skip_middle_end_transformations neither the row buffer nor the stores
    chain the row loads, and TensorE runs nearly back to back; without it §3c keeps each row's loads behind the
    previous row's store. The model before the two rules chained both alike."""
    x = np.zeros((16, 2, 128, 512), np.float32)
    w = np.zeros((128, 128), np.float32)
    # trn2 with trn1's sequential-loop order (§3c), which trn2's own toolchain does not keep (§10)
    shipped = load_hw("trn2", {"rename_full_overwrites": "tiles", "sequential_rules_need_middle_end": True,
                               "sequential_hbm_order": True})
    old = load_hw("trn2", {"rename_full_overwrites": "none", "sequential_rules_need_middle_end": False,
                           "sequential_hbm_order": True})
    out = {}
    for skip in (False, True):
        decorator = "@nki.compiler.skip_middle_end_transformations" if skip else ""
        trace = run_kernel(ROWS_KERNEL.format(decorator=decorator), x, w, trace_only=True).trace
        assert trace.skip_middle_end is skip
        prof = estimate(trace, shipped)
        sched = prof.schedule
        tensor_busy = float(((sched.busy_end - sched.start)[sched.row == 0]).sum())
        out[skip] = (prof.total_time, tensor_busy / prof.total_time, estimate(trace, old).total_time)
    assert out[True][1] > 0.9 and out[False][1] < 0.7
    assert out[False][0] > 1.3 * out[True][0]
    assert out[False][2] == pytest.approx(out[True][2]) and out[True][2] > out[False][0]


def test_the_decorator_reaches_the_trace_and_both_fingerprints_through_a_host_function(tmp_path):
    """A decorated kernel launched from a plain host function is marked too, and the trace and program hashes
    tell it from the undecorated kernel (the evaluation cache must not hand one's latency to the other)."""
    from accelopt_nb.evaluation.backends.simulator import trace_fingerprint
    from accelopt_nb.sim import load_kernel, program_fingerprint, simulate

    x = np.zeros((2, 2, 128, 512), np.float32)
    w = np.zeros((128, 128), np.float32)
    traces, programs = {}, {}
    for skip in (False, True):
        decorator = "@nki.compiler.skip_middle_end_transformations" if skip else ""
        source = ("import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\nimport neuronxcc.nki.isa as nisa\n"
                  + ROWS_KERNEL.format(decorator=decorator).replace("def kernel(", "def rows(")
                  + "\n\ndef kernel(x, w):\n    return rows(x, w)\n")
        path = tmp_path / f"k{int(skip)}.py"
        path.write_text(source)
        kernel = load_kernel(path)
        trace = simulate(kernel, x, w, options=SimOptions(trace_only=True)).trace
        assert trace.skip_middle_end is skip
        traces[skip] = trace_fingerprint(trace)
        programs[skip] = program_fingerprint(kernel, x, w)[0]
    assert traces[True] != traces[False]
    assert programs[True] is not None and programs[True] != programs[False]
