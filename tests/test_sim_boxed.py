"""Ragged tiles computed on the box their mask keeps, and on-chip memory kept between launches.

A masked elementwise instruction whose mask keeps a box of its tile reads only that box of its operands
(views of memory, no tile-sized copies) and computes its result into the destination's box. The elements
it masks off are never written: nothing may show them. On-chip buffers take the arrays a finished
launch used; their unwritten elements must still read as never written.
"""
import numpy as np
import pytest

from accelopt_nb.errors import KernelError
from accelopt_nb.sim.core import memory, onchip, operands
from accelopt_nb.sim.core.prims import PRIMS
from accelopt_nb.sim.replay import values as value_replay

RAGGED = """
@nki.jit
def kernel(x, g, b):
    M, N = x.shape
    MT, NT = (M + 127) // 128, (N + 511) // 512
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    xs = nl.ndarray((MT, NT, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    gs = nl.ndarray((MT, NT, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    ys = nl.ndarray((MT, NT, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    bias = nl.load(b)
    for i in nl.affine_range(MT):
        for j in nl.affine_range(NT):
            keep = (128 * i + nl.arange(128)[:, None] < M) & (512 * j + nl.arange(512)[None, :] < N)
            xs[i, j, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(
                x[128 * i + nl.arange(128)[:, None], 512 * j + nl.arange(512)[None, :]], mask=keep)
            gs[i, j, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.activation(
                op=nl.exp, data=xs[i, j, nl.arange(128)[:, None], nl.arange(512)[None, :]], bias=bias, scale=0.5,
                mask=keep)
            ys[i, j, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.multiply(
                gs[i, j, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                xs[i, j, nl.arange(128)[:, None], nl.arange(512)[None, :]], mask=keep)
            nl.store(out[128 * i + nl.arange(128)[:, None], 512 * j + nl.arange(512)[None, :]],
                     value=ys[i, j, nl.arange(128)[:, None], nl.arange(512)[None, :]], mask=keep)
    return out
"""


def _ragged_reference(x, b):
    return np.exp(np.float32(0.5) * x + b) * x


@pytest.mark.parametrize("replay", [True, False])
def test_ragged_tiles_are_computed_on_their_masks_box_without_tile_copies(run_kernel, rng, monkeypatch, replay):
    copies = []
    for name in ("_kept_copy", "_masked_copy", "_assign"):
        real = getattr(memory, name)
        spy = (lambda *a, _real=real, _name=name, **k: copies.append(_name) or _real(*a, **k))
        monkeypatch.setattr(memory, name, spy)
        monkeypatch.setitem(PRIMS, spy, PRIMS[real])   # the spy is the primitive, with its rules
    x = rng.standard_normal((200, 1100)).astype(np.float32)   # 2 x 3 tiles, the last row and column ragged
    b = rng.standard_normal((128, 1)).astype(np.float32)
    out = run_kernel(RAGGED, x, x, b, loop_replay=replay).outputs[0]
    np.testing.assert_allclose(out, _ragged_reference(x, b[np.arange(200) % 128]), rtol=2e-6)
    # every ragged tile's load, activation, multiply and store wrote its box alone: the store of each tile
    # is the only assignment, and no read filled a tile around a box
    assert copies == ["_assign"] * 6


def test_a_boxed_result_shows_nothing_outside_its_box(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    low = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.ndarray((nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    h = nl.ndarray((nl.par_dim(128), 64), dtype=nl.bfloat16, buffer=nl.sbuf)
    keep = (nl.arange(128)[:, None] < 100) & (nl.arange(64)[None, :] < 40)
    t[...] = nl.load(a)
    e = nl.exp(t, mask=keep)
    h[nl.arange(128)[:, None], nl.arange(64)[None, :]] = nl.exp(t, mask=keep)   # bf16: computed whole, then cast
    y = nl.add(e, 1.0)   # reads e whole: its masked-off elements are never written
    nl.store(out[nl.arange(128)[:, None], nl.arange(64)[None, :]], value=y, mask=keep)
    nl.store(low[nl.arange(128)[:, None], nl.arange(64)[None, :]], value=h, mask=keep)
    STORE_E
    return out, low
"""
    a = rng.standard_normal((128, 64)).astype(np.float32)
    out, low = run_kernel(body.replace("STORE_E", ""), a).outputs
    np.testing.assert_allclose(out[:100, :40], np.exp(a[:100, :40]) + 1, rtol=1e-6)
    assert np.isnan(out[100:]).all() and np.isnan(out[:, 40:]).all()
    np.testing.assert_allclose(low[:100, :40].astype(np.float32), np.exp(a[:100, :40]), rtol=1e-2)
    with pytest.raises(KernelError, match="never written"):
        run_kernel(body.replace("STORE_E", "nl.store(out, value=e)"), a)


def test_replayed_iterations_run_no_guard_calls(run_kernel, rng, monkeypatch):
    # a guard is evaluated before each replayed iteration; its recorded call does nothing and is not replayed
    programs = []
    init = value_replay.Program.__init__

    def spy(self, *args):
        init(self, *args)
        programs.append(self)

    monkeypatch.setattr(value_replay.Program, "__init__", spy)
    x = rng.standard_normal((1800, 600)).astype(np.float32)   # 15 row tiles: the outer loop replays
    b = rng.standard_normal((128, 1)).astype(np.float32)
    out = run_kernel(RAGGED, x, x, b).outputs[0]
    np.testing.assert_allclose(out, _ragged_reference(x, b[np.arange(1800) % 128]), rtol=2e-6)
    replayed = [fn for p in programs for fn, *_ in p.calls]
    assert memory.cover_add in replayed
    assert memory.guard_covered not in replayed and memory.guard_local not in replayed


def test_on_chip_memory_of_a_finished_launch_serves_the_next(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 96), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((nl.par_dim(128), 96), dtype=nl.float32, buffer=nl.sbuf)
    t[:, 0:WIDTH] = nl.load(a[:, 0:WIDTH])
    nl.store(out, value=t)
    return out
"""
    a = rng.standard_normal((128, 96)).astype(np.float32)
    onchip.release()
    np.testing.assert_array_equal(run_kernel(body.replace("WIDTH", "96"), a).outputs[0], a)
    kept = onchip._kept().by_size[128 * 96 * 4]
    assert len(kept) == 1
    kept[0][1].view(np.float32)[...] = 7.0   # what a launch before left in the memory
    with pytest.raises(KernelError, match="4096 element"):   # half of it never written in this launch
        run_kernel(body.replace("WIDTH", "64"), a)
    assert not onchip._kept().by_size.get(128 * 96 * 4)   # a failed launch keeps its memory to itself
    np.testing.assert_array_equal(run_kernel(body.replace("WIDTH", "96"), a).outputs[0], a)
    onchip.release()
    assert not onchip._kept().by_size


def test_kept_on_chip_memory_lets_the_oldest_go(monkeypatch):
    onchip.release()
    monkeypatch.setattr(onchip, "KEEP_BYTES", 3000)
    first, big, last = onchip.Launch(), onchip.Launch(), onchip.Launch()
    arrays = [onchip.take((250,), np.float32, first), onchip.take((10, 50), np.float32, first)]   # 1000, 2000 bytes
    onchip.give_back(first)
    arrays.append(onchip.take((4, 100), np.float64, big))   # 3200 bytes: past the cap alone, never kept
    onchip.give_back(big)
    assert sorted(onchip._kept().by_size) == [1000, 2000]
    arrays += [onchip.take((250,), np.float32, first), onchip.take((10, 50), np.float32, first)]
    onchip.give_back(first)
    arrays.append(onchip.take((125,), np.float64, last))   # 1000 bytes: the oldest, of 1000, goes
    onchip.give_back(last)
    assert sorted(onchip._kept().by_size) == [1000, 2000] and onchip._kept().nbytes == 3000
    assert len(onchip._kept().by_size[1000]) == 1
    onchip.release()


def test_a_buffer_that_dies_during_a_launch_frees_its_memory(run_kernel, rng):
    # buffers allocated in a loop body die each iteration: a launch must not hold on to all of them
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.sequential_range(6):
        t = nl.ndarray((nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
        t[...] = nl.load(a)
        nl.store(out, value=nl.add(t, float(i)))
    return out
"""
    onchip.release()
    a = rng.standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_allclose(run_kernel(body, a).outputs[0], a + 5.0, rtol=1e-6)
    assert not onchip._kept().by_size.get(128 * 64 * 4)
    onchip.release()


# ---- HBM tensors allocated without a fill: what stays unwritten is filled at the end ----------------------
def test_cover_complete_agrees_with_its_mask():
    from accelopt_nb.sim.core.boxes import Cover
    rng = np.random.default_rng(3)
    shape = (7, 9)
    seen = {True: 0, False: 0}
    for _ in range(400):
        cover = Cover()
        if rng.random() < 0.5:   # a tiling by random cuts (tiles of ragged size), maybe with one tile left out
            rows = [0, *sorted(set(rng.integers(1, shape[0], 2).tolist())), shape[0]]
            cols = [0, *sorted(set(rng.integers(1, shape[1], 3).tolist())), shape[1]]
            tiles = [((a, b, 1), (c, d, 1)) for a, b in zip(rows, rows[1:]) for c, d in zip(cols, cols[1:])]
            if rng.random() < 0.3:
                tiles.pop(int(rng.integers(len(tiles))))
            for box in tiles:
                cover.add(box)
        for _ in range(rng.integers(0, 4)):
            lo = [int(rng.integers(0, n)) for n in shape]
            hi = [int(rng.integers(a + 1, n + 1)) for a, n in zip(lo, shape)]
            step = 2 if rng.random() < 0.1 and hi[1] - lo[1] > 1 else 1
            hi[1] = lo[1] + (hi[1] - 1 - lo[1]) // step * step + 1   # tight, as boxes are
            cover.add(((lo[0], hi[0], 1), (lo[1], hi[1], step)))
        full = bool(cover.mask(shape).all())
        strided = any(b[1][2] != 1 and b[1][1] - b[1][0] > 1 for b in cover.boxes)
        # never claims a hole covered; without strided boxes it always decides
        assert cover.complete(shape) == full or (strided and not cover.complete(shape))
        seen[full] += 1
    assert min(seen.values()) > 50   # the draw makes both kinds of cover


RAGGED_HOLE = """
@nki.jit
def kernel(x):
    M, N = x.shape
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    tmp = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.hbm)
    for i in nl.affine_range((M + 127) // 128):
        for j in nl.affine_range((N + 511) // 512):
            keep = (128 * i + nl.arange(128)[:, None] < M) & (512 * j + nl.arange(512)[None, :] < N - 7)
            nl.store(tmp[128 * i + nl.arange(128)[:, None], 512 * j + nl.arange(512)[None, :]],
                     value=nl.load(x[128 * i + nl.arange(128)[:, None], 512 * j + nl.arange(512)[None, :]], mask=keep),
                     mask=keep)
    for i in nl.affine_range((M + 127) // 128):
        rows = 128 * i + nl.arange(128)[:, None] < M
        nl.store(out[128 * i + nl.arange(128)[:, None], nl.arange(N)[None, :]],
                 value=nl.load(tmp[128 * i + nl.arange(128)[:, None], nl.arange(N)[None, :]], mask=rows), mask=rows)
    return out
"""


@pytest.mark.parametrize("replay", [True, False])
def test_unwritten_hbm_elements_read_and_return_as_nan(run_kernel, replay):
    """An HBM scratch tensor's last 7 columns are never written: read back, they come out as NaN (its memory
    is not filled when it is allocated)."""
    x = np.random.default_rng(0).standard_normal((300, 520)).astype(np.float32)
    out = run_kernel(RAGGED_HOLE, x, loop_replay=replay).output
    np.testing.assert_array_equal(out[:, :-7], x[:, :-7])
    assert np.isnan(out[:, -7:]).all()


def test_output_with_a_hole_returns_nan_there(run_kernel):
    body = """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(3):
        keep = (i * 128 + nl.arange(128)[:, None] < 300) & (nl.arange(64)[None, :] != 5)
        nl.store(out[i * 128 + nl.arange(128)[:, None], nl.arange(64)[None, :]],
                 value=nl.load(x[i * 128 + nl.arange(128)[:, None], nl.arange(64)[None, :]], mask=keep), mask=keep)
    return out
"""
    x = np.random.default_rng(1).standard_normal((300, 64)).astype(np.float32)
    out = run_kernel(body, x).output
    assert np.isnan(out[:, 5]).all()
    np.testing.assert_array_equal(np.delete(out, 5, axis=1), np.delete(x, 5, axis=1))


def test_a_ragged_store_into_bf16_does_not_read_its_box(run_kernel, rng, monkeypatch):
    """A bf16 destination cannot take a float32 box, so the store reads its value whole, and only so."""
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((100, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.load(a[nl.arange(128)[:, None], nl.arange(64)[None, :]], mask=nl.arange(128)[:, None] < 100)
    nl.store(out[nl.arange(128)[:, None], nl.arange(64)[None, :]], value=t, mask=nl.arange(128)[:, None] < 100)
    return out
"""
    reads = []
    box_read = operands.boxed_read
    monkeypatch.setattr(operands, "boxed_read", lambda *a: reads.append(a) or box_read(*a))
    a = rng.standard_normal((100, 64)).astype(np.float32)
    out = run_kernel(body, a).outputs[0]
    np.testing.assert_array_equal(out.astype(np.float32), a.astype(out.dtype).astype(np.float32))
    assert reads == []   # the load's box is read through language's own name; the store reads none
