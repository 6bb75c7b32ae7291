"""Kernel files written against neuronxcc.nki run unchanged on the simulator."""
import subprocess
import sys

import numpy as np
import pytest

from accelopt_nb.errors import KernelLoadError
from accelopt_nb.sim import load_kernel, simulate
from tests.conftest import DATA


def test_accelopt_style_kernel_runs_unchanged(rng):
    kern = load_kernel(DATA / "accelopt_style_matmul.py")
    a = rng.standard_normal((256, 384)).astype(np.float32)
    b = rng.standard_normal((384, 700)).astype(np.float32)
    res = simulate(kern, a, b)
    np.testing.assert_allclose(res.output, a @ b, rtol=1e-4, atol=1e-3)
    counts = res.trace.op_counts()
    assert counts["nc_matmul"] == 2 * 3 + 2 * 2 * 3  # identity transposes + the tiled matmul
    assert counts["dma_store"] == 4


def test_jit_kernel_is_callable_with_numpy(run_kernel, tmp_path, rng):
    (tmp_path / "k.py").write_text(
        "import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n"
        "@nki.jit\ndef kernel(x):\n    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
        "    nl.store(out, value=nl.exp(nl.load(x)))\n    return out\n")
    kern = load_kernel(tmp_path / "k.py")
    x = rng.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(kern(x), np.exp(x), rtol=1e-6)


def test_string_statements_and_trace_import(run_kernel, rng):
    body = """
@trace
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        ' a no-op string statement '
        nl.store(out[i * 128:(i + 1) * 128, :], value=t)
    return out
"""
    x = rng.standard_normal((256, 4)).astype(np.float32)
    np.testing.assert_array_equal(run_kernel(body, x).output, x)


def test_simulator_never_shadows_real_neuronxcc():
    # the facade lives only in kernel module builtins: importing neuronxcc normally still fails here
    code = "import accelopt_nb.sim, sys\ntry:\n import neuronxcc\nexcept ImportError:\n print('absent')\n" \
           "print('neuronxcc' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["absent", "False"]


def test_syntax_error_names_line(tmp_path):
    (tmp_path / "bad.py").write_text("import neuronxcc.nki as nki\n\ndef kernel(x)\n    return x\n")
    with pytest.raises(KernelLoadError) as exc:
        load_kernel(tmp_path / "bad.py")
    assert exc.value.line == 3


def test_missing_kernel_function(tmp_path):
    (tmp_path / "k.py").write_text("x = 1\n")
    with pytest.raises(KernelLoadError, match="no function named"):
        load_kernel(tmp_path / "k.py")


def test_unknown_neuronxcc_module(tmp_path):
    (tmp_path / "k.py").write_text("import neuronxcc.nki.backends as ncc\ndef kernel(x):\n    return x\n")
    with pytest.raises(KernelLoadError, match="not provided"):
        load_kernel(tmp_path / "k.py")


def test_load_kernel_from_source(rng):
    src = ("import neuronxcc.nki.language as nl\nfrom neuronxcc.nki import jit\n@jit\ndef kernel(x):\n"
           "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
           "    nl.store(out, value=nl.load(x) * 2.0)\n    return out\n")
    kern = load_kernel(source=src)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(simulate(kern, x).output, 2 * x)


def test_simulation_holds_blas_to_one_thread_and_restores_it(tmp_path, rng):
    """Per-tile matmuls are tiny: the simulator runs NumPy's BLAS on one thread (found once per process),
    and gives the caller's setting back afterwards."""
    from threadpoolctl import threadpool_info, threadpool_limits
    (tmp_path / "k.py").write_text(
        "import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n"
        "@nki.jit\ndef double(x):\n    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
        "    nl.store(out, value=nl.multiply(nl.load(x), 2.0))\n    return out\n")
    double = load_kernel(tmp_path / "k.py", name="double")
    seen = []

    def host(x):   # host code: runs inside the simulation, around the kernel's launch
        seen.append([lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"])
        return double(x)

    x = rng.standard_normal((128, 64)).astype(np.float32)
    with threadpool_limits(limits=2, user_api="blas"):
        for _ in range(2):
            np.testing.assert_array_equal(simulate(host, x).output, 2 * x)
        after = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
    assert seen[0] and all(n == [1] * len(seen[0]) for n in seen)
    assert after == [2] * len(after)
