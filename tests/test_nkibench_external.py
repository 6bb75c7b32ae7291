"""Problems and kernels in the paper's NKIBench file format, loaded as they are."""
from __future__ import annotations

import json

import numpy as np
import pytest

import nkibench
from accelopt_nb.bench import run_bench
from accelopt_nb.errors import ProblemError

# A task module written by hand in the paper's format: module constants and the four functions only.
HANDWRITTEN_TASK = """\
import numpy as np

M = 256
N = 384


def get_inputs():
    x = np.random.normal(0, 1, (M, N)).astype(np.float32)
    return [x]


def forward(x):
    return x / (1 + np.exp(-x))


def transform_to_nki_inputs(inputs):
    return [inputs[0].reshape(128, M // 128, N)]


def transform_nki_outputs(k_res, ref):
    return (k_res.reshape(ref.shape),)
"""


def test_exported_problem_loads_as_external_with_builtin_peak(tmp_path):
    task_path, kernel_path = nkibench.export_problem("matmul", "small", tmp_path)
    ext = nkibench.load_external(task_path, kernel_path)
    assert ext.name == "matmul_task" and ext.builtin == "matmul"
    assert ext.shapes()["M"] == 256
    assert ext.peak(hw="trn1") == nkibench.get_problem("matmul").peak("small", "trn1")
    df = run_bench([ext], progress=False)
    assert df.iloc[0]["status"] == "correct"
    assert df.iloc[0]["pct_peak"] > 0


def test_handwritten_paper_format_task(tmp_path):
    (tmp_path / "silu_M256_N384.py").write_text(HANDWRITTEN_TASK)
    kernel = tmp_path / "kernel.py"
    kernel.write_text(nkibench.get_problem("silu").baseline_source())
    ext = nkibench.load_external(tmp_path / "silu_M256_N384.py", kernel)
    assert ext.builtin == "silu" and ext.tolerance == 2e-5
    assert not ext.task().has_adversarial
    df = run_bench([ext], progress=False)
    row = df.iloc[0]
    assert row["status"] == "correct", row["message"]
    assert row["peak_ms"] == pytest.approx(8 * 256 * 384 / (410 * 2**30) * 1e3)


def test_unknown_problem_needs_counts_for_a_peak(tmp_path):
    (tmp_path / "mystery.py").write_text(HANDWRITTEN_TASK)
    kernel = tmp_path / "k.py"
    kernel.write_text(nkibench.get_problem("silu").baseline_source())
    ext = nkibench.load_external(tmp_path / "mystery.py", kernel)
    assert ext.builtin is None and ext.peak() is None
    df = run_bench([ext], progress=False)
    assert df.iloc[0]["status"] == "correct" and df.iloc[0]["pct_peak"] is None
    with_counts = nkibench.load_external(tmp_path / "mystery.py", kernel,
                                         counts={"vec_flops": 0, "mm_flops": 0, "hbm_bytes": 8 * 256 * 384})
    assert with_counts.peak().bound == "memory"


def test_paper_summary_json_suite(tmp_path):
    (tmp_path / "reference").mkdir()
    (tmp_path / "kernels").mkdir()
    nkibench.export_task("rope_single_freq_apply", "small", tmp_path / "reference" / "rope_case.py")
    (tmp_path / "kernels" / "rope_case.py").write_text(nkibench.get_problem("rope_single_freq_apply").baseline_source())
    summary = {"rope_single_freq_apply": {"seed": "seeds/rope.yaml", "cases": {"rope_small": {
        "values": {"B": 1, "H": 4, "N": 160, "D": 128},
        "impls": [{"task": "reference/rope_case.py", "kernel": "kernels/rope_case.py"}]}}}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    suite = nkibench.load_external_suite(tmp_path / "summary.json")
    assert [e.name for e in suite] == ["rope_single_freq_apply/rope_small"]
    assert suite[0].peak().ms == pytest.approx(nkibench.get_problem("rope_single_freq_apply").peak("small").ms)
    df = run_bench(suite, progress=False)
    assert df.iloc[0]["status"] == "correct", df.iloc[0]["message"]


def test_external_errors(tmp_path):
    with pytest.raises(ProblemError, match="task file not found"):
        nkibench.load_external(tmp_path / "nope.py", tmp_path / "k.py")
    (tmp_path / "broken.py").write_text("import numpy as np\ndef get_inputs(): return []\n")
    (tmp_path / "k.py").write_text("")
    with pytest.raises(ProblemError, match="does not define forward"):
        nkibench.load_external(tmp_path / "broken.py", tmp_path / "k.py")
    (tmp_path / "summary.json").write_text("{not json")
    with pytest.raises(ProblemError, match="invalid JSON"):
        nkibench.load_external_suite(tmp_path / "summary.json")


def test_external_task_inputs_are_used_as_is(tmp_path):
    (tmp_path / "silu_x.py").write_text(HANDWRITTEN_TASK)
    (tmp_path / "k.py").write_text(nkibench.get_problem("silu").baseline_source())
    ext = nkibench.load_external(tmp_path / "silu_x.py", tmp_path / "k.py")
    np.random.seed(3)
    expected = np.random.normal(0, 1, (256, 384)).astype(np.float32)
    np.testing.assert_array_equal(ext.task().get_inputs(3)[0], expected)
