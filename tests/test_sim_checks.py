"""Anti-cheat and safety properties: opaque tensors, uninitialized memory, output coverage."""
import numpy as np
import pytest

from accelopt_nb.errors import OpaqueTensorError, UninitializedReadError


@pytest.mark.parametrize("expr", ["np.asarray(a)", "np.array(a)", "a.tolist()", "float(nl.load(a)[0, 0])",
                                  "np.sum(a)", "list(a)", "np.matmul(a, a)", "np.exp(nl.load(a))",
                                  "a.item()", "bool(a)"])
def test_kernel_cannot_read_inputs_as_numpy(run_kernel, expr):
    body = f"""
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    host = {expr}
    return out
"""
    with pytest.raises(OpaqueTensorError) as exc:
        run_kernel(body, np.ones((4, 4), np.float32))
    assert exc.value.line == 12


def test_output_computed_from_never_written_memory(run_kernel):
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    t[0:2, :] = nl.load(a[0:2, :])          # rows 2.. never written
    nl.store(out, value=nl.exp(t))
    return out
"""
    with pytest.raises(UninitializedReadError) as exc:
        run_kernel(body, np.ones((4, 4), np.float32))
    assert exc.value.line == 14 and exc.value.api == "nl.store"


def test_masked_garbage_rows_are_not_an_uninitialized_read(run_kernel, rng):
    # unmasked math on the unloaded rows of a ragged tile is fine as long as they are never stored
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(8)[:, None]
    i_f = nl.arange(a.shape[1])[None, :]
    t = nl.load(a[i_p, i_f], mask=(i_p < a.shape[0]))
    y = nl.exp(t)
    nl.store(out[i_p, i_f], value=y, mask=(i_p < a.shape[0]))
    return out
"""
    a = rng.standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_allclose(run_kernel(body, a).output, np.exp(a), rtol=1e-6)


def test_partial_output_write_leaves_nan_fill(run_kernel):
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:2, :], value=nl.load(a[0:2, :]))
    return out
"""
    out = run_kernel(body, np.ones((4, 4), np.float32)).output
    assert np.isnan(out[2:]).all() and (out[:2] == 1).all()


def test_new_on_chip_tensors_start_as_nan(run_kernel):
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nl.store(out, value=t)
    return out
"""
    with pytest.raises(UninitializedReadError):
        run_kernel(body, np.ones((2, 2), np.float32))
    res = run_kernel(body, np.ones((2, 2), np.float32), check_uninitialized=False)
    assert np.isnan(res.output).all()
