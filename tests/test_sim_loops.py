"""affine_range independence, sequential loops, loop_reduce, SPMD grids."""
import numpy as np
import pytest

from accelopt_nb.errors import LoopCarriedDependencyError

CONFLICT = """
@nki.jit
def kernel(a):
    out = nl.ndarray((a.shape[0], 4), dtype=a.dtype, buffer=nl.shared_hbm)
    tmp = nl.ndarray((a.shape[0], 4), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.{loop}(a.shape[1] // 4):
        tmp[...] = nl.load(a[:, i * 4:(i + 1) * 4])     # same location every iteration
    nl.store(out, value=tmp)
    return out
"""


def test_plain_assignment_across_affine_iterations_is_an_error(run_kernel):
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    with pytest.raises(LoopCarriedDependencyError) as exc:
        run_kernel(CONFLICT.format(loop="affine_range"), a)
    assert exc.value.line == 14 and "affine_range" in exc.value.rule


def test_conflict_is_configurable_to_a_warning(run_kernel):
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    with pytest.warns(UserWarning, match="same location"):
        res = run_kernel(CONFLICT.format(loop="affine_range"), a, affine_write_conflicts="warn")
    np.testing.assert_array_equal(res.output, a[:, 4:8])
    assert res.warnings


@pytest.mark.parametrize("loop", ["sequential_range", "static_range"])
def test_sequential_loops_may_overwrite(run_kernel, loop):
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    np.testing.assert_array_equal(run_kernel(CONFLICT.format(loop=loop), a).output, a[:, 4:8])


def test_plain_python_range_is_sequential(run_kernel):
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    body = CONFLICT.replace("nl.{loop}(", "range(")
    res = run_kernel(body, a)
    np.testing.assert_array_equal(res.output, a[:, 4:8])
    assert all(l[1] == "sequential" for i in res.trace.instructions if i.op == "dma_load" for l in i.loops)


def test_accumulation_across_affine_iterations_is_legal(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((a.shape[0], 4), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((a.shape[0], 4), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(a.shape[1] // 4):
        acc += nl.load(a[:, i * 4:(i + 1) * 4])
    nl.store(out, value=acc)
    return out
"""
    a = rng.standard_normal((4, 16)).astype(np.float32)
    np.testing.assert_allclose(run_kernel(body, a).output, a.reshape(4, 4, 4).sum(axis=1), rtol=1e-6)


def test_buffers_declared_inside_the_loop_are_fresh(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[1] // 4):
        tmp = nl.ndarray((a.shape[0], 4), dtype=nl.float32, buffer=nl.sbuf)
        tmp[...] = nl.load(a[:, i * 4:(i + 1) * 4])
        nl.store(out[:, i * 4:(i + 1) * 4], value=tmp)
    return out
"""
    a = rng.standard_normal((4, 16)).astype(np.float32)
    np.testing.assert_array_equal(run_kernel(body, a).output, a)


def test_loop_reduce_max(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((a.shape[0], 4), dtype=a.dtype, buffer=nl.shared_hbm)
    m = None
    for i in nl.affine_range(a.shape[1] // 4):
        m = nl.loop_reduce(nl.load(a[:, i * 4:(i + 1) * 4]), op=np.maximum, loop_indices=[i], dtype=nl.float32)
    nl.store(out, value=m)
    return out
"""
    a = rng.standard_normal((4, 16)).astype(np.float32)
    np.testing.assert_array_equal(run_kernel(body, a).output, a.reshape(4, 4, 4).max(axis=1))


def test_spmd_grid_program_id(tmp_path, rng):
    from accelopt_nb.sim import load_kernel
    (tmp_path / "k.py").write_text("""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    j = nl.program_id(1)
    n = nl.num_programs(1)
    t = nl.load(a[i * 4:(i + 1) * 4, j * 2:(j + 1) * 2])
    nl.store(out[i * 4:(i + 1) * 4, j * 2:(j + 1) * 2], value=t * (i * n + j))
    return out
""")
    kern = load_kernel(tmp_path / "k.py")
    a = rng.standard_normal((8, 6)).astype(np.float32)
    out = kern[2, 3](a)
    scale = (np.arange(2)[:, None] * 3 + np.arange(3)[None, :]).repeat(4, axis=0).repeat(2, axis=1)
    np.testing.assert_allclose(out, a * scale)
