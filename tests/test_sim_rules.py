"""Each hardware / NKI rule, violated on purpose, gives its own error with file, line, API and rule."""
import numpy as np
import pytest

from accelopt_nb.errors import KernelError, NKIRuleError

CASES = {
    "partition_dim": ("""
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((256, 4), dtype=nl.float32, buffer=nl.sbuf)
    return out
""", (256, 4), "partition dim <= 128", "nl.ndarray"),
    "load_partition": ("""
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a))
    return out
""", (256, 4), "partition dim <= 128", "nl.load"),
    "stationary_size": ("""
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a[0:128, 0:256])
    p = nisa.nc_matmul(x, x)
    return out
""", (128, 256), "matmul stationary <= 128x128", "nisa.nc_matmul"),
    "moving_size": ("""
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.shared_hbm)
    s = nl.load(a[0:128, 0:128])
    m = nl.load(a[0:128, 0:1024])
    p = nisa.nc_matmul(s, m)
    return out
""", (128, 1024), "matmul moving <= 128x512", "nisa.nc_matmul"),
    "psum_bank": ("""
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    p = nl.zeros((128, 4608), nl.float32, buffer=nl.psum)
    return out
""", (128, 4), "PSUM tile <= 16 KiB per partition (8 banks of 512 fp32)", "nl.zeros"),
    "matmul_output_within_one_bank": ("""
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    s = nl.load(a)
    p = nl.zeros((128, 1024), nl.float32, buffer=nl.psum)
    p[:, 448:576] += nisa.nc_matmul(s, s)
    return out
""", (128, 128), "one matmul's output lies within one PSUM bank", "+="),
    "tensor_engine_reads_sbuf_only": ("""
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    s = nl.load(a)
    p = nl.zeros((128, 128), nl.float32, buffer=nl.psum)
    p += nisa.nc_matmul(s, s)
    q = nisa.nc_matmul(p, s)
    return out
""", (128, 128), "engine/buffer connectivity", "nisa.nc_matmul"),
    "gpsimd_no_psum": ("""
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    s = nl.load(a)
    p = nisa.nc_matmul(s, s)
    q = nisa.tensor_copy(p, engine=nisa.gpsimd_engine)
    return out
""", (128, 128), "engine/buffer connectivity", "nisa.tensor_copy"),
    "compute_on_hbm": ("""
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.exp(a))
    return out
""", (4, 4), "compute APIs operate on SBUF/PSUM tiles", "nl.exp"),
    "output_in_sbuf": ("""
@nki.jit
def kernel(a):
    return nl.load(a)
""", (4, 4), "kernel inputs and outputs live in HBM", None),
    "assign_to_hbm": ("""
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    out[...] = nl.load(a)
    return out
""", (4, 4), "HBM is written by DMA only", "assignment"),
    "block_dims_not_indexed": ("""
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    b = nl.zeros((2, par_dim(4), 4), nl.float32)
    y = nl.exp(b)
    return out
""", (4, 4), "compute APIs take tiles (partition axis first)", "nl.exp"),
    "shape_mismatch": ("""
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((4, 8), dtype=nl.float32)
    t[...] = nl.load(a)
    return out
""", (4, 5), "assigned tile must match the destination shape", "assignment"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rule_violation_is_reported(run_kernel, case):
    body, shape, rule, api = CASES[case]
    with pytest.raises(KernelError) as exc:
        run_kernel(body, np.ones(shape, dtype=np.float32))
    err = exc.value
    assert rule in err.rule, err
    if api is not None:
        assert err.api == api
        assert err.file is not None and err.file.endswith(".py")
        assert err.line is not None and err.line > 7  # points into the kernel body, after the header
    assert str(err)  # a readable one-line message


def test_python_error_in_kernel_names_line(run_kernel):
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = undefined_name + 1
    return out
"""
    with pytest.raises(KernelError) as exc:
        run_kernel(body, np.ones((2, 2), np.float32))
    assert exc.value.line == 12 and "NameError" in exc.value.message


def test_kernel_returning_nothing(run_kernel):
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
"""
    with pytest.raises(KernelError, match="returned nothing"):
        run_kernel(body, np.ones((2, 2), np.float32))
