"""The performance model on instruction streams recorded by the simulator, and `accelopt profile`."""
import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from accelopt_nb.cli import main as cli_main
from accelopt_nb.kernels import KERNELS_DIR as KERNELS
from accelopt_nb.perf import estimate
from accelopt_nb.sim import SimOptions, load_kernel, simulate

ROOT = Path(__file__).resolve().parent.parent

ADD_KERNEL = """
@nki.jit
def kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        x = nl.load(a[i * 128:(i + 1) * 128, :])
        y = nl.load(b[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], nl.add(x, y))
    return out
"""


def test_simulated_add_kernel(run_kernel, rng):
    a, b = rng.random((512, 1024), dtype=np.float32), rng.random((512, 1024), dtype=np.float32)
    res = run_kernel(ADD_KERNEL, a, b)
    p = estimate(res.trace)
    assert p.hbm_read_bytes == 2 * a.nbytes and p.hbm_write_bytes == a.nbytes
    assert p.dma_transfer_count == 12 and p.matmul_instruction_count == 0
    assert p.vector_engine_active_time_percent > 0 and p.tensor_engine_active_time_percent == 0
    # 6 MB over 410 GB/s is the floor; several DMA queues overlap, so it is within ~2x of it
    assert 6 * 2**20 / 410e9 < p.total_time < 2.5 * 6 * 2**20 / 410e9
    assert p.bound in ("memory", "dma")


def _mm(name, M=256, K=1024, N=2048, **overrides):
    bf = ml_dtypes.bfloat16
    kern = load_kernel(KERNELS / "matmul_tutorial.py", name=name)
    res = simulate(kern, np.empty((K, M), bf), np.empty((K, N), bf), options=SimOptions(trace_only=True))
    return estimate(res.trace, overrides=overrides or None)


def test_matmul_tutorial_steps_rank_in_published_order():
    # as written (every reload executed): the published order
    as_written = {"elide_redundant_work": False}
    tiled, hoisted, blocked = (_mm(n, **as_written) for n in ("matmul_tiled", "matmul_hoisted", "matmul_blocked_free"))
    assert tiled.latency > hoisted.latency > blocked.latency
    # at this small shape all of lhsT (4 KiB per partition) stays on chip, so the toolchain's reuse
    # gives the tiled kernel what hoisting gives by hand (at the tutorial's shape it cannot, 64 MB)
    kept = _mm("matmul_tiled")
    assert kept.hbm_read_bytes == _mm("matmul_hoisted").hbm_read_bytes < tiled.hbm_read_bytes
    assert tiled.hardware_flops == hoisted.hardware_flops == blocked.hardware_flops == 2 * 256 * 1024 * 2048
    assert tiled.hbm_read_bytes > hoisted.hbm_read_bytes > blocked.hbm_read_bytes
    assert tiled.mm_arithmetic_intensity < blocked.mm_arithmetic_intensity


def test_matmul_functional_and_trace_only_give_the_same_profile():
    bf = ml_dtypes.bfloat16
    rng = np.random.default_rng(1)
    lhsT = rng.standard_normal((256, 128)).astype(bf)
    rhs = rng.standard_normal((256, 512)).astype(bf)
    kern = load_kernel(KERNELS / "matmul_tutorial.py", name="matmul_hoisted")
    full = simulate(kern, lhsT, rhs)
    ref = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    assert np.linalg.norm(full.outputs[0].astype(np.float32) - ref) / np.linalg.norm(ref) < 1e-2
    fast = simulate(kern, lhsT, rhs, options=SimOptions(trace_only=True))
    assert estimate(full.trace).to_dict() == estimate(fast.trace).to_dict()


SPILL_KERNEL = """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nb = x.shape[0] // 128
    buf = nl.ndarray((nb, nl.par_dim(128), x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(nb):
        buf[i] = nl.load(x[i * 128:(i + 1) * 128, :])
    for i in nl.affine_range(nb):
        nl.store(out[i * 128:(i + 1) * 128, :], nl.multiply(buf[i], 2.0))
    return out
"""

TILED_KERNEL = """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], nl.multiply(t, 2.0))
    return out
"""


def test_simulated_kernel_spills_until_it_is_tiled(run_kernel):
    x = np.zeros((8 * 128, 8192), dtype=np.float32)     # 8 blocks of 32 KiB per partition: 256 KiB > 176 KiB
    spilled = estimate(run_kernel(SPILL_KERNEL, x, trace_only=True).trace)
    tiled = estimate(run_kernel(TILED_KERNEL, x, trace_only=True).trace)
    assert spilled.spill_save_bytes > 0 and spilled.spill_reload_bytes > 0
    assert tiled.spill_save_bytes == tiled.spill_reload_bytes == 0
    assert spilled.latency > tiled.latency


TASK = """
import numpy as np

def get_inputs():
    return [np.random.rand(256, 512).astype(np.float32), np.random.rand(256, 512).astype(np.float32)]

def forward(a, b):
    return a + b

def transform_to_nki_inputs(inputs):
    return inputs

def transform_nki_outputs(k_res, ref):
    return k_res
"""

HEADER = "import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n"


def _files(tmp_path, kernel_body):
    task = tmp_path / "task.py"
    task.write_text(TASK)
    kern = tmp_path / "kernel.py"
    kern.write_text(HEADER + kernel_body)
    return kern, task


def test_cli_profile_table_and_json(tmp_path, capsys):
    kern, task = _files(tmp_path, ADD_KERNEL)
    assert cli_main(["profile", str(kern), "--task", str(task), "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "status: correct" in out and "latency" in out and "hbm_read_bytes" in out
    assert cli_main(["profile", str(kern), "--task", str(task), "--json", "--hw", "trn2", "--no-cache"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "correct" and all(c["passed"] for c in data["checks"])
    assert data["profile"]["hw"] == "trn2" and data["profile"]["hbm_read_bytes"] == 2 * 256 * 512 * 4
    assert cli_main(["profile", str(kern), "--task", str(task), "--json", "--trace-only"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "not_checked" and data["correct"] is None and data["profile"]["latency_ms"] > 0


def test_cli_profile_reports_a_wrong_kernel(tmp_path, capsys):
    kern, task = _files(tmp_path, ADD_KERNEL.replace("nl.add(x, y)", "nl.subtract(x, y)"))
    assert cli_main(["profile", str(kern), "--task", str(task), "--no-cache"]) == 1
    assert "status: incorrect" in capsys.readouterr().out


def test_cli_profile_names_a_missing_task(tmp_path, capsys):
    kern, _ = _files(tmp_path, ADD_KERNEL)
    assert cli_main(["profile", str(kern), "--task", str(tmp_path / "nope.py")]) == 2
    assert "task file not found" in capsys.readouterr().err


@pytest.mark.slow
def test_fidelity_benchmark_meets_its_targets():
    """Every published tutorial step within 15% of its published speedup (benchmarks/perf_fidelity.py), but the
    matmul tutorial's last step, whose two ends were measured under an older compiler's DMA (STEPS_NOT_HELD)."""
    import importlib.util
    import sys
    spec = importlib.util.spec_from_file_location("perf_fidelity", ROOT / "benchmarks" / "perf_fidelity.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["perf_fidelity"] = mod          # dataclasses look their module up there
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.modules.pop("perf_fidelity", None)
    from accelopt_nb.perf import load_hw
    out = mod.run_tutorials({"before": load_hw("trn1", mod.BEFORE), "after": load_hw("trn1")})
    assert out["all_within"], out["steps"]
    assert [s["not_held"] != "" for s in out["steps"]] == [False, False, True, False, False]
    assert all(s["after"] > 1 for s in out["steps"])          # every step is a speedup, as published


@pytest.mark.slow
def test_mamba_human_steps_are_correct_and_get_faster():
    """benchmarks/mamba_vs_humans.py: the tutorial's v1 -> v2 -> v3 are correct on the NKIBench task and
    speed up in order at the paper's shape."""
    import importlib.util
    import sys
    spec = importlib.util.spec_from_file_location("mamba_vs_humans", ROOT / "benchmarks" / "mamba_vs_humans.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["mamba_vs_humans"] = mod
    try:
        spec.loader.exec_module(mod)
        rows = {r["kernel"]: r for r in mod.run("trn1", None)}
    finally:
        sys.modules.pop("mamba_vs_humans", None)
    from accelopt_nb.reproduce.humans import TUTORIAL_STEPS
    steps = [rows[label] for label, *_ in TUTORIAL_STEPS]                  # v1 (the baseline), v2, v3
    assert all(r["correct"] for r in steps)
    v1, v2, v3 = (r["latency_ms"] for r in steps)
    assert v1 > v2 > v3
