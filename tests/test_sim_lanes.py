"""Lane replay (``accelopt_nb.sim.replay.lanes``) leaves memory as running every iteration does, or is not used.

Each kernel runs with values three ways: loop replay with lanes (the default), loop replay iteration by iteration
(lanes switched off), and every iteration in Python (``loop_replay=False``). Outputs must be bit-equal and traces
equal; the count of iterations run as lanes shows which path ran. The kernels whose iterations depend on each other
through memory (a tile reused, an accumulator, a recurrence through HBM) must not run as lanes.
"""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

from accelopt_nb.sim import SimOptions, load_kernel, simulate
from accelopt_nb.sim.replay import lanes
from accelopt_nb.sim.trace import trace_fields
from tests.conftest import HEADER



def run_three(monkeypatch, source: str, *inputs) -> int:
    """Iterations run as lanes; asserts the three runs agree."""
    kernel = load_kernel(source=HEADER + textwrap.dedent(source))
    ran = [0]
    real = lanes.replay

    def spy(*args):
        done = real(*args)
        ran[0] += done or 0
        return done

    monkeypatch.setattr(lanes, "replay", spy)
    with_lanes = simulate(kernel, *inputs)
    monkeypatch.setattr(lanes, "replay", lambda *args: None)
    without = simulate(kernel, *inputs)
    every = simulate(kernel, *inputs, options=SimOptions(loop_replay=False))
    # (with lanes an enclosing loop records fewer calls, so it may replay other iterations than without)
    assert with_lanes.trace.replayed > 0 and without.trace.replayed > 0
    for other in (without, every):
        assert trace_fields(with_lanes.trace) == trace_fields(other.trace)
        for a, b in zip(with_lanes.outputs, other.outputs):
            assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
    return ran[0]


def data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def test_independent_row_tiles_run_as_lanes(monkeypatch):
    src = """
    @nki.jit
    def kernel(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0] // 128):
            x = nl.load(a[i * 128:(i + 1) * 128, :])
            y = nl.load(b[i * 128:(i + 1) * 128, :])
            nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(nl.exp(x), nl.multiply(y, 3.0)))
        return out
    """
    assert run_three(monkeypatch, src, data(128 * 24, 64), data(128 * 24, 64, seed=1)) == 21   # 3 probes run


def test_column_tiles_whose_spans_overlap_are_proven_apart_exactly(monkeypatch):
    # each tile's byte span covers all 128 rows, so the spans of neighbouring lanes overlap: the exact check
    # (np.shares_memory) finds the tiles apart
    src = """
    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for j in nl.affine_range(a.shape[1] // 64):
            x = nl.load(a[:, j * 64:(j + 1) * 64])
            nl.store(out[:, j * 64:(j + 1) * 64], value=nl.tanh(x))
        return out
    """
    meets = []
    real = lanes._meet
    monkeypatch.setattr(lanes, "_meet", lambda *args: meets.append(1) or real(*args))
    assert run_three(monkeypatch, src, data(128, 64 * 16)) == 13
    assert meets


def test_transpose_and_matmul_in_the_body_run_as_lanes(monkeypatch):
    src = """
    @nki.jit
    def kernel(a, w):
        out = nl.ndarray((a.shape[0], w.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
        wt = nl.load(w)
        for i in nl.affine_range(a.shape[0] // 128):
            block = nl.load(a[i * 128:(i + 1) * 128, :])
            block_t = nl.copy(nisa.nc_transpose(block))
            nl.store(out[i * 128:(i + 1) * 128, :], value=nl.copy(nisa.nc_matmul(block_t, wt)))
        return out
    """
    assert run_three(monkeypatch, src, data(128 * 12, 64), data(64, 256, seed=1)) == 8   # 4 probes: the first reads wt anew


SEQUENTIAL = """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    BODY
    return out
"""


@pytest.mark.parametrize("body", [
    # one SBUF tile written and read again by every iteration
    """buf = nl.ndarray((nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(a.shape[0] // 128):
        buf[...] = nl.load(a[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.exp(buf))""",
    # an accumulator: each iteration reads what the one before wrote
    """acc = nl.zeros((nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(a.shape[0] // 128):
        acc[...] = nl.add(acc, nl.load(a[i * 128:(i + 1) * 128, :]))
        nl.store(out[i * 128:(i + 1) * 128, :], value=acc)""",
    # a recurrence through HBM: iteration i reads the rows iteration i - 1 stored
    """nl.store(out[0:128, :], value=nl.load(a[0:128, :]))
    for i in nl.sequential_range(1, a.shape[0] // 128):
        prev = nl.load(out[(i - 1) * 128:i * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(prev, nl.load(a[i * 128:(i + 1) * 128, :])))""",
], ids=["tile-reused", "accumulator", "hbm-recurrence"])
def test_iterations_that_depend_on_each_other_through_memory_do_not_run_as_lanes(monkeypatch, body):
    src = SEQUENTIAL.replace("BODY", textwrap.indent(body, "").replace("\n    ", "\n    "))
    assert run_three(monkeypatch, src, data(128 * 16, 64)) == 0


def test_a_nested_loop_runs_as_lanes_while_its_outer_loop_probes(monkeypatch):
    # the outer loop probes with values and records the inner loop's lane calls, then replays them
    src = """
    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0] // 128):
            for j in nl.affine_range(a.shape[1] // 64):
                x = nl.load(a[i * 128:(i + 1) * 128, j * 64:(j + 1) * 64])
                nl.store(out[i * 128:(i + 1) * 128, j * 64:(j + 1) * 64], value=nl.exp(x))
        return out
    """
    probing = []
    real = lanes.replay
    monkeypatch.setattr(lanes, "replay", lambda rt, *args: probing.append(bool(rt.observer.probes)) or real(rt, *args))
    assert run_three(monkeypatch, src, data(128 * 10, 64 * 16)) > 0
    assert True in probing


NESTED_MOVING_APART = """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for k in nl.affine_range(a.shape[0] // 128):
        nl.store(out[k * 128:(k + 1) * 128, :], value=nl.load(a[k * 128:(k + 1) * 128, :]))
    for i in nl.sequential_range(8):
        for j in nl.sequential_range(16):
            t = nl.load(out[(40 + j) * 128:(41 + j) * 128, :])
            nl.store(out[(6 * i + j) * 128:(6 * i + j + 1) * 128, :], value=nl.add(t, 1.0))
    return out
"""


def test_nested_lanes_whose_distances_change_with_the_outer_loop_are_not_extrapolated(monkeypatch):
    # the inner loop reads blocks 40 + j and writes blocks 6 i + j: its lanes are apart at the outer loop's
    # probes (i = 0, 1, 2) but a write meets a later lane's read at i = 7. Its write moves with i and its read
    # does not (effects.same_step), so the outer loop does not replay the recorded lane calls
    a = data(128 * 58, 64)
    run_three(monkeypatch, NESTED_MOVING_APART, a)
    # the same without the same_step notes: the outer loop replays them, and i = 7 comes out wrong
    monkeypatch.undo()
    monkeypatch.setattr(lanes.Plan, "together", lambda self, row: [])
    kernel = load_kernel(source=HEADER + textwrap.dedent(NESTED_MOVING_APART))
    wrong = simulate(kernel, a).outputs[0]
    right = simulate(kernel, a, options=SimOptions(loop_replay=False)).outputs[0]
    assert not np.array_equal(wrong, right)


def test_reductions_in_the_body_run_as_lanes(monkeypatch):
    # each lane reduces over its own axes (shifted behind the lane axis), in the order one iteration reduces
    src = """
    @nki.jit
    def kernel(a):
        out = nl.ndarray((a.shape[0], 2), dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0] // 128):
            x = nl.load(a[i * 128:(i + 1) * 128, :])
            total = nl.sum(nl.multiply(x, x), axis=1, keepdims=True)
            peak = nisa.tensor_reduce(np.max, x, axis=(1,), keepdims=True)
            nl.store(out[i * 128:(i + 1) * 128, 0:1], value=total)
            nl.store(out[i * 128:(i + 1) * 128, 1:2], value=peak)
        return out
    """
    assert run_three(monkeypatch, src, data(128 * 12, 1000)) == 9


def test_an_accumulator_that_stays_put_is_summed_into_lane_after_lane(monkeypatch):
    # a PSUM accumulator over a contraction loop: the products of all lanes at once, then added in the
    # iterations' order, so the sums round as running every iteration does
    src = """
    @nki.jit
    def kernel(a, b):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(a.shape[0] // 128):
            acc += nisa.nc_matmul(nl.load(a[k * 128:(k + 1) * 128, :]), nl.load(b[k * 128:(k + 1) * 128, :]))
        nl.store(out, value=nl.copy(acc))
        return out
    """
    assert run_three(monkeypatch, src, data(128 * 16, 128), data(128 * 16, 512, seed=1)) == 13


def test_an_accumulator_read_in_its_own_loop_does_not_run_as_lanes(monkeypatch):
    # each iteration also stores the running sum: a lane's read would see later lanes' additions
    src = """
    @nki.jit
    def kernel(a, b):
        out = nl.ndarray((a.shape[0], 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        for k in nl.sequential_range(a.shape[0] // 128):
            acc += nisa.nc_matmul(nl.load(a[k * 128:(k + 1) * 128, :]), nl.load(b[k * 128:(k + 1) * 128, :]))
            nl.store(out[k * 128:(k + 1) * 128, :], value=nl.copy(acc))
        return out
    """
    assert run_three(monkeypatch, src, data(128 * 16, 128), data(128 * 16, 512, seed=1)) == 0


def test_a_tile_of_the_iteration_read_at_an_offset_that_moves_runs_as_lanes(monkeypatch):
    # u is each iteration's own tile (a register) and the columns read from it move with i: a lane's view starts
    # one lane's bytes plus one offset step after the previous lane's (with the step left out, every lane read
    # the first lane's columns and the outputs differed)
    src = """
    @nki.jit
    def kernel(a):
        out = nl.ndarray((a.shape[0], 4), dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0] // 128):
            u = nl.exp(nl.load(a[i * 128:(i + 1) * 128, :]))
            nl.store(out[i * 128:(i + 1) * 128, :], value=nl.copy(u[:, i:i + 4]))
        return out
    """
    assert run_three(monkeypatch, src, data(128 * 16, 64)) == 13
