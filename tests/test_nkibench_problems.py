"""NKIBench problem definitions: shapes, references, layouts, adversarial inputs and peak formulas."""
from __future__ import annotations

import math

import numpy as np
import pytest

import nkibench
from accelopt_nb.errors import ProblemError
from accelopt_nb.taskfile import load_task

# The paper's shapes (issue 4, accelopt_algorithm.md section 4.2).
PAPER_SHAPES = {
    "adamw": {"M": 10944, "N": 2048},
    "add_rmsnorm_matmul": {"M": 4096, "N": 2048, "K": 1024},
    "bmm": {"B": 16, "M": 4096, "K": 64, "N": 4096},
    "bmm_softmax": {"B": 16, "M": 4096, "K": 64, "N": 4096},
    "gqa_full": {"B": 1, "N": 4096, "QH": 16, "KH": 8, "D": 128},
    "lora": {"M": 4096, "N": 12288, "K": 5120, "R": 128},
    "mamba": {"M": 7168, "C": 256, "S": 16},
    "matmul": {"M": 4096, "N": 12288, "K": 5120},
    "matmul_add_rmsnorm": {"M": 4096, "N": 2048, "K": 2048},
    "rmsnorm_matmul": {"M": 4096, "N": 2048, "K": 1024},
    "rope_single_freq_apply": {"B": 1, "H": 64, "N": 4096, "D": 128},
    "silu": {"M": 4096, "N": 7168},
    "swiglu": {"M": 4096, "N": 3072, "K": 1024},
    "transpose_matmul": {"M": 4096, "K": 2048, "N": 10944},
}

# theoretical_peak_latency_ms and bound of the paper's trn1 table (nkibench_trn1_measured.csv).
PAPER_PEAK_MS = {
    "adamw": (1.0182, "memory"), "add_rmsnorm_matmul": (0.7234, "mm"), "bmm": (2.5152, "memory"),
    "bmm_softmax": (4.6811, "vec"), "gqa_full": (5.7869, "mm"), "lora": (22.4695, "mm"),
    "mamba": (0.8192, "vec"), "matmul": (21.7009, "mm"), "matmul_add_rmsnorm": (1.4467, "mm"),
    "rmsnorm_matmul": (0.7234, "mm"), "rope_single_freq_apply": (0.9146, "memory"), "silu": (0.5335, "memory"),
    "swiglu": (3.2551, "mm"), "transpose_matmul": (7.7309, "mm"),
}


def test_the_fourteen_problems_with_the_paper_shapes():
    assert nkibench.list_problems() == sorted(PAPER_SHAPES)
    for name, shapes in PAPER_SHAPES.items():
        assert nkibench.get_problem(name).shapes("paper") == shapes, name


def test_tolerances():
    for name in PAPER_SHAPES:
        assert nkibench.get_problem(name).tolerance == (3e-5 if name == "mamba" else 2e-5)


def test_peak_by_hand_matmul_and_silu():
    # matmul: mm-bound, 2*M*N*K / 23.75e12 FLOP/s.
    p = nkibench.get_problem("matmul").peak("paper", "trn1")
    assert p.bound == "mm"
    assert p.mm_flops == 2 * 4096 * 12288 * 5120
    assert p.seconds == pytest.approx(2 * 4096 * 12288 * 5120 / 23.75e12, rel=1e-12)
    assert p.ms == pytest.approx(21.7009, abs=5e-5)
    # silu: memory-bound, 8*M*N bytes (read x, write y, fp32) / 410 GiB/s.
    s = nkibench.get_problem("silu").peak("paper", "trn1")
    assert s.bound == "memory"
    assert s.hbm_bytes == 8 * 4096 * 7168
    assert s.seconds == pytest.approx(8 * 4096 * 7168 / (410 * 2**30), rel=1e-12)
    assert s.ms == pytest.approx(0.5335, abs=5e-5)
    # trn2 uses its own (derived) constants: fp32 TensorE at 128*128*2*2.4e9/4.
    t2 = nkibench.get_problem("matmul").peak("paper", "trn2")
    assert t2.seconds == pytest.approx(2 * 4096 * 12288 * 5120 / (128 * 128 * 2 * 2.4e9 / 4), rel=1e-12)


@pytest.mark.parametrize("name", sorted(PAPER_PEAK_MS))
def test_peak_matches_the_paper_table(name):
    ms, bound = PAPER_PEAK_MS[name]
    peak = nkibench.get_problem(name).peak("paper", "trn1")
    assert peak.bound == bound
    assert peak.ms == pytest.approx(ms, abs=1.5e-4)


@pytest.mark.parametrize("name", sorted(PAPER_SHAPES))
def test_task_small_preset(name):
    problem = nkibench.get_problem(name)
    task = problem.task("small")
    for k, v in problem.shapes("small").items():
        assert getattr(task.module, k) == v
    inputs = task.get_inputs(0)
    assert all(x.dtype == np.float32 for x in inputs)
    again = task.get_inputs(0)
    assert all(np.array_equal(a, b) for a, b in zip(inputs, again))
    ref = task.forward(*inputs)
    for r in (ref if isinstance(ref, tuple) else (ref,)):
        assert r.dtype == np.float64 and np.isfinite(r).all()
    nki_inputs = task.to_nki(inputs)
    assert all(x.dtype == np.float32 and x.flags.c_contiguous for x in nki_inputs)
    # the adversarial generators are deterministic, float32, finite, and shaped like get_inputs()
    adv = task.adversarial_inputs()
    assert adv, f"{name} has no adversarial inputs"
    for case, case2 in zip(adv, task.adversarial_inputs()):
        assert [x.shape for x in case] == [x.shape for x in inputs]
        assert all(x.dtype == np.float32 and np.isfinite(x).all() for x in case)
        assert all(np.array_equal(a, b) for a, b in zip(case, case2))
        ref = task.forward(*case)
        assert all(np.isfinite(r).all() for r in (ref if isinstance(ref, tuple) else (ref,)))


def test_matmul_layout_maps_blocks():
    task = nkibench.load_problem("matmul", "small")
    a, b = task.get_inputs(3)
    lhs, rhs = task.to_nki([a, b])
    assert lhs[1, 5, 2, 7] == a[128 + 5, 256 + 7]
    assert rhs[2, 9, 11] == b[256 + 9, 11]


def test_adamw_matches_the_paper_formula():
    # The table writes the step as theta(1-1e-5) - 0.01 m'/(sqrt(1000 v') + 1e-8); our task derives it
    # from PyTorch's AdamW defaults at step 1.
    task = nkibench.load_problem("adamw", "small")
    p, g, m, v = (x.astype(np.float64) for x in task.get_inputs(5))
    m1 = 0.9 * m + 0.1 * g
    v1 = 0.999 * v + 0.001 * g * g
    expected = p * (1 - 1e-5) - 0.01 * m1 / (np.sqrt(1000 * v1) + 1e-8)
    np.testing.assert_allclose(task.forward(*task.get_inputs(5)), expected, rtol=1e-12)


def test_mamba_reference_against_a_naive_loop():
    task = nkibench.get_problem("mamba").task({"M": 9, "C": 3, "S": 2})
    delta, u, a, b, c = (x.astype(np.float64) for x in task.get_inputs(1))
    out = np.zeros((3, 9))
    for ch in range(3):
        for s in range(2):
            h = 0.0
            for t in range(9):
                h = math.exp(delta[ch, t] * a[ch, s]) * h + delta[ch, t] * b[s, t] * u[ch, t]
                out[ch, t] += c[s, t] * h
    np.testing.assert_allclose(task.forward(*task.get_inputs(1)), out, rtol=1e-12)


def test_gqa_reference_maps_query_heads_to_kv_heads():
    task = nkibench.get_problem("gqa_full").task({"B": 1, "N": 128, "QH": 4, "KH": 2, "D": 8})
    q, k, v = task.get_inputs(2)
    out = task.forward(q, k, v)
    for h in range(4):
        kv = h // 2
        s = q[0, h].astype(np.float64) @ k[0, kv].astype(np.float64).T / math.sqrt(8)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        np.testing.assert_allclose(out[0, h], p @ v[0, kv], rtol=1e-10)


def test_custom_shapes_are_checked_against_the_layout_constraints():
    problem = nkibench.get_problem("matmul")
    assert problem.shapes({"M": 512, "N": 100, "K": 256}) == {"M": 512, "N": 100, "K": 256}
    assert problem.shapes({"M": 512})["N"] == 12288       # missing values come from the paper preset
    with pytest.raises(ProblemError, match="M % 128 == 0"):
        problem.shapes({"M": 100, "N": 100, "K": 256})
    with pytest.raises(ProblemError, match="no shape parameter"):
        problem.shapes({"Q": 1})
    with pytest.raises(ProblemError, match="no preset 'huge'"):
        problem.shapes("huge")
    with pytest.raises(ProblemError, match="unknown NKIBench problem 'nope'"):
        nkibench.get_problem("nope")


def test_export_task_is_a_standalone_nkibench_file(tmp_path):
    path = nkibench.export_task("rmsnorm_matmul", "small", tmp_path / "rmsnorm_matmul_small.py")
    text = path.read_text()
    assert "nkibench" not in text.split("\n", 2)[2]        # only the header comment names us
    assert "\nM = 256\n" in text and "\nK = 256\n" in text
    exported = load_task(path)                              # the paper-format loader
    in_memory = nkibench.load_problem("rmsnorm_matmul", "small")
    a, b = exported.get_inputs(7), in_memory.get_inputs(7)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    np.testing.assert_array_equal(exported.forward(*a), in_memory.forward(*b))


def test_export_problem_writes_task_and_kernel(tmp_path):
    task_path, kernel_path = nkibench.export_problem("silu", "paper", tmp_path)
    assert "\nM = 4096\n" in task_path.read_text()
    assert kernel_path.read_text() == nkibench.get_problem("silu").baseline_source()
